//! The page's money demo: the most instructive failure of a flash sale's payments, "the
//! gateway charged, but its answer never came back", acted out on a real order against the
//! real provider (admin, `--allow-unsafe-guards`, a provider with `--test-controls`).
//!
//! One unit is reserved for a demo buyer; the provider is told to make every charge under
//! that order's key but lose each answer; the order is paid. Its every try goes unanswered,
//! so the intent stays pending and the buyer would hear 503 `outcome_pending`; then the
//! provider answers again, and the sweep — once the order's attempt is surely over — asks it
//! under the same key, hears "succeeded", and settles the order `paid`. Charged once, known
//! late, never declared failed.
//!
//! The provider lets a key's fault lapse on its own after 2 minutes: with a
//! `--request-timeout-ms` longer than that, the order's own last tries would be answered and
//! the demo would end `settled_by: answer` instead.

use anyhow::anyhow;
use tokio::sync::oneshot;
use tokio::time::Instant;
use uuid::Uuid;

use super::model::Order;
use super::pay::intent_key;
use super::request::NewOrder;
use super::shop::Shop;
use super::store;
use crate::error::Error;
use crate::payment::Charge;

/// Who buys in the demo (the audit and the ledger show it as any other buyer).
const BUYER: &str = "lost-answer-demo";

impl Shop {
    /// Reserves one unit of the product for the demo's buyer and tells the provider to lose
    /// every answer under its intent's key. Pay it with [`Shop::pay_losing_the_answer`].
    pub async fn reserve_for_lost_answer(&self, product_id: i64) -> Result<Order, Error> {
        // Asked first: without test controls nothing is reserved.
        self.payment
            .test_controls()
            .await
            .map_err(|e| Error::Unavailable(anyhow!(e)))?;
        let request = NewOrder {
            product_id,
            user_id: None,
            quantity: 1,
            pay: false,
            pass: None,
        }
        .parse(BUYER.to_string())?;
        let admitted = self
            .admit(&request, false, std::time::Instant::now())
            .await?;
        let (_here, gone) = oneshot::channel();
        let order = self.place(admitted, None, gone).await?;
        if let Err(e) = self.payment.lose_answers(&intent_key(order.id)).await {
            // Unpaid, it expires and its unit goes back on sale.
            return Err(Error::Unavailable(anyhow!(e)));
        }
        Ok(order)
    }

    /// Pays the demo's reservation: every answer is lost until its attempt gives up (the
    /// intent stays pending), then the provider answers again and the sweep settles it.
    pub async fn pay_losing_the_answer(&self, id: Uuid) {
        let answer = self.pay(id, std::time::Instant::now()).await;
        tracing::info!(order = %id, answer = ?answer.as_ref().map(|o| o.status).map_err(Error::code), "lost-answer demo: the order's attempt is over");
        let key = intent_key(id);
        // Until the provider answers again, the sweep's asking goes unanswered too. (The
        // provider also lets the fault lapse on its own after a while.)
        for attempt in 1..=5u32 {
            match self.payment.answer_again(&key).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(order = %id, attempt, error = %e, "lost-answer demo: the provider still loses this key's answers");
                    tokio::time::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)))
                        .await;
                }
            }
        }
    }

    /// What the provider's ledger holds under the order's key, asked now (the page shows it
    /// beside the intent). `Ok(None)`: no such order; `Ok(Some(None))`: nothing charged.
    pub async fn charge_at_provider(&self, id: Uuid) -> Result<Option<Option<Charge>>, Error> {
        if store::get(&self.db, id).await?.is_none() {
            return Ok(None);
        }
        let deadline = Instant::now() + self.payment.timeout;
        let charge = self.payment.lookup(&intent_key(id), deadline).await;
        Ok(Some(charge.map_err(|e| Error::Unavailable(anyhow!(e)))?))
    }
}
