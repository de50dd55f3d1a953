//! The order's SQL. Orders are written set-based: a batch's rows, its buyers' units and its
//! payment intents in one statement (its Idempotency-Keys learn their orders in one more,
//! `idempotency::claim`'s).

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::model::{Order, OrderStatus, Ticket};
use crate::database::Bound;
use crate::idempotency::claim;
use crate::inventory::Terms;

/// How long recording orders that ended without a sale may take: they are a record for
/// the buyer's later look, written after the lock is given up, never worth a stuck worker.
const ENDED_BOUND: Duration = Duration::from_secs(5);

/// One order's row, as its batch (or whatever ended it) decided it.
pub struct Row<'a> {
    pub ticket: &'a Ticket,
    /// Its product's terms as its lock cycle decided with them.
    pub terms: &'a Terms,
    pub status: OrderStatus,
    /// Why a `failed` order failed.
    pub failure: Option<&'a str>,
    /// Its time in the lock queue (guards with a lock only).
    pub waited: Option<Duration>,
    /// The token its batch's stock write carried.
    pub fence: Option<i64>,
    /// How many orders its lock cycle served (none for orders no cycle served).
    pub batch_size: Option<i32>,
}

/// Units a batch adds to one buyer's holding of one product.
pub struct Units<'a> {
    pub product_id: i64,
    pub user_id: &'a str,
    pub units: i32,
    /// The product's per-customer limit (the CHECK's bound).
    pub max_units: i32,
}

/// A batch's orders as the insert's columns: one array per column, each in `rows`' order.
/// Adding a column is a field here, its line in [`OrderColumns::push`], and its place in the
/// statement (which stays compile-checked against the schema).
#[derive(Default)]
struct OrderColumns<'a> {
    ids: Vec<Uuid>,
    products: Vec<i64>,
    users: Vec<&'a str>,
    quantities: Vec<i32>,
    amounts: Vec<i64>,
    statuses: Vec<&'a str>,
    failures: Vec<Option<&'a str>>,
    waits: Vec<Option<i32>>,
    fences: Vec<Option<i64>>,
    /// Seconds a reservation lasts (its product's terms), for `expires_at`.
    ttls: Vec<f64>,
    sizes: Vec<Option<i32>>,
}

impl<'a> OrderColumns<'a> {
    fn of(rows: &[Row<'a>]) -> OrderColumns<'a> {
        let mut columns = OrderColumns::default();
        for row in rows {
            columns.push(row);
        }
        columns
    }

    fn push(&mut self, row: &Row<'a>) {
        let ticket: &'a Ticket = row.ticket;
        self.ids.push(ticket.id);
        self.products.push(row.terms.id);
        self.users.push(&ticket.user_id);
        self.quantities.push(ticket.quantity);
        self.amounts.push(ticket.amount_cents);
        self.statuses.push(row.status.as_str());
        self.failures.push(row.failure);
        self.waits.push(row.waited.map(millis));
        self.fences.push(row.fence);
        self.ttls.push(f64::from(row.terms.reservation_ttl_s));
        self.sizes.push(row.batch_size);
    }
}

/// The buyers' holdings a batch adds to, as the insert's columns.
#[derive(Default)]
struct HoldingColumns<'a> {
    products: Vec<i64>,
    users: Vec<&'a str>,
    units: Vec<i32>,
    limits: Vec<i32>,
}

impl<'a> HoldingColumns<'a> {
    fn of(units: &[Units<'a>]) -> HoldingColumns<'a> {
        let mut columns = HoldingColumns::default();
        for held in units {
            columns.products.push(held.product_id);
            columns.users.push(held.user_id);
            columns.units.push(held.units);
            columns.limits.push(held.max_units);
        }
        columns
    }
}

/// Writes the rows (of one product or many), adds `units` to each buyer's holding (the
/// per-customer limit's CHECK stays the last word) and writes a payment intent for each
/// `paying` order (its key is `pay::intent_key`'s), in one statement; then links each
/// Idempotency-Key to its order (`claim::link`). Returns the orders in the order of `rows`.
pub async fn insert(
    conn: &mut PgConnection,
    rows: &[Row<'_>],
    units: &[Units<'_>],
) -> Result<Vec<Order>, sqlx::Error> {
    let o = OrderColumns::of(rows);
    let h = HoldingColumns::of(units);
    let mut orders: Vec<Order> = sqlx::query_as!(
        Order,
        "WITH o AS (
            INSERT INTO orders (id, product_id, user_id, quantity, amount_cents, status, failure,
                                fence, lock_wait_ms, expires_at, batch_size)
            SELECT t.id, t.product_id, t.user_id, t.quantity, t.amount, t.status, t.failure,
                   t.fence, t.waited,
                   CASE WHEN t.status IN ('reserved', 'paying')
                        THEN now() + make_interval(secs => t.ttl) END,
                   t.size
            FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[], $5::bigint[], $6::text[],
                        $7::text[], $8::int[], $9::bigint[], $10::float8[], $11::int[])
                 AS t(id, product_id, user_id, quantity, amount, status, failure, waited, fence,
                      ttl, size)
            RETURNING *
         ), held AS (
            INSERT INTO purchases (product_id, user_id, units, max_units)
            SELECT h.product_id, h.user_id, h.units, h.max_units
            FROM unnest($12::bigint[], $13::text[], $14::int[], $15::int[])
                 AS h(product_id, user_id, units, max_units)
            ON CONFLICT (product_id, user_id)
            DO UPDATE SET units = purchases.units + EXCLUDED.units, max_units = EXCLUDED.max_units
         ), intents AS (
            INSERT INTO payments (order_id, key, amount_cents)
            SELECT id, 'seckill-' || id::text, amount_cents FROM o WHERE status = 'paying'
         )
         SELECT id AS \"id!\", product_id AS \"product_id!\", user_id AS \"user_id!\", quantity AS \"quantity!\", amount_cents AS \"amount_cents!\", status AS \"status!: OrderStatus\", fence, lock_wait_ms, batch_size, failure, expires_at, created_at AS \"created_at!\", updated_at AS \"updated_at!\" FROM o",
        &o.ids,
        &o.products,
        &o.users as _,
        &o.quantities,
        &o.amounts,
        &o.statuses as _,
        &o.failures as _,
        &o.waits as _,
        &o.fences as _,
        &o.ttls,
        &o.sizes as _,
        &h.products,
        &h.users as _,
        &h.units,
        &h.limits,
    )
    .fetch_all(&mut *conn)
    .await?;
    // Each key learns its order in the same transaction (the key's rule: `claim`).
    let claims = rows
        .iter()
        .filter_map(|r| Some((r.ticket.id, r.ticket.claim.as_ref()?)));
    claim::link(conn, claims).await?;
    let place: HashMap<Uuid, usize> = o.ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    orders.sort_by_key(|o| place[&o.id]);
    Ok(orders)
}

/// Records orders that ended before any stock was theirs (lock not granted, client gone,
/// sold out while queued), outside any batch. Best effort: if the database is what failed,
/// the order simply has no row — nothing was sold, and its key is forgotten.
pub async fn ended(
    db: &PgPool,
    terms: &Terms,
    tickets: &[&Ticket],
    status: OrderStatus,
    failure: Option<&str>,
) {
    let rows: Vec<Row> = tickets
        .iter()
        .map(|ticket| Row {
            ticket,
            terms,
            status,
            failure,
            waited: None,
            fence: None,
            batch_size: None,
        })
        .collect();
    let written = async {
        let mut conn = db.acquire().await?;
        insert(&mut conn, &rows, &[]).await
    };
    // Best effort, and bounded: a lock cycle's worker writes these after its lock is given
    // up, and must not wait on a database gone silent for as long as TCP would.
    if let Err(e) = Bound::steps(ENDED_BOUND).run(written).await {
        tracing::warn!(orders = tickets.len(), ?status, failure, error = %e, "could not record ended orders");
    }
}

/// Gives units back to the user's allowance (their order returned its stock).
pub(super) async fn release_units(tx: &mut PgConnection, order: &Order) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE purchases SET units = units - $3 WHERE product_id = $1 AND user_id = $2",
        order.product_id,
        &order.user_id,
        order.quantity
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Expires up to `limit` of the product's reservations past their deadline, oldest first,
/// skipping any a payment is claiming this moment; returns each one's buyer and units.
pub(super) async fn expire_due(
    tx: &mut PgConnection,
    product_id: i64,
    limit: i64,
) -> Result<Vec<(String, i32)>, sqlx::Error> {
    let rows = sqlx::query!(
        "UPDATE orders o SET status = 'expired', updated_at = now()
         WHERE o.id IN (SELECT d.id FROM orders d
                        WHERE d.product_id = $1 AND d.status = 'reserved' AND d.expires_at <= now()
                        ORDER BY d.expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
         RETURNING o.user_id, o.quantity",
        product_id,
        limit
    )
    .fetch_all(tx)
    .await?;
    Ok(rows.into_iter().map(|r| (r.user_id, r.quantity)).collect())
}

/// Takes returned units off their buyers' holdings (one statement for a cycle's returns).
pub(super) async fn release_holdings(
    tx: &mut PgConnection,
    product_id: i64,
    returned: &[(String, i32)],
) -> Result<(), sqlx::Error> {
    let (users, units): (Vec<&str>, Vec<i32>) =
        returned.iter().map(|(u, q)| (u.as_str(), *q)).unzip();
    sqlx::query!(
        "UPDATE purchases p SET units = p.units - t.units
         FROM (SELECT user_id, SUM(units)::INT AS units
               FROM unnest($2::text[], $3::int[]) AS r(user_id, units) GROUP BY user_id) t
         WHERE p.product_id = $1 AND p.user_id = t.user_id",
        product_id,
        &users as _,
        &units
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Products with reservations past their deadline, the longest overdue first.
pub(super) async fn products_due(db: &PgPool, limit: i64) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT product_id AS "product_id!" FROM orders
           WHERE status = 'reserved' AND expires_at <= now()
           GROUP BY product_id ORDER BY min(expires_at) LIMIT $1"#,
        limit
    )
    .fetch_all(db)
    .await
}

/// Moves the order `from` → `to` if it is still `from`; `false` if it had moved on. A
/// `reserved` order moves only once due (the expiry's side of the race with a payment).
pub(super) async fn advance(
    conn: &mut PgConnection,
    id: Uuid,
    from: OrderStatus,
    to: OrderStatus,
) -> Result<bool, sqlx::Error> {
    let moved = sqlx::query!(
        "UPDATE orders SET status = $3, updated_at = now()
         WHERE id = $1 AND status = $2 AND ($2 <> 'reserved' OR expires_at <= now())",
        id,
        from.as_str(),
        to.as_str()
    )
    .execute(conn)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Units of the product the buyer holds now (reserved and paid).
pub(super) async fn units_held(
    db: &PgPool,
    product_id: i64,
    user_id: &str,
) -> Result<i32, sqlx::Error> {
    let held: Option<i32> = sqlx::query_scalar!(
        "SELECT units FROM purchases WHERE product_id = $1 AND user_id = $2",
        product_id,
        user_id
    )
    .fetch_optional(db)
    .await?;
    Ok(held.unwrap_or(0))
}

pub async fn get(db: &PgPool, id: Uuid) -> Result<Option<Order>, sqlx::Error> {
    sqlx::query_as!(
        Order,
        "SELECT id AS \"id!\", product_id AS \"product_id!\", user_id AS \"user_id!\", quantity AS \"quantity!\", amount_cents AS \"amount_cents!\", status AS \"status!: OrderStatus\", fence, lock_wait_ms, batch_size, failure, expires_at, created_at AS \"created_at!\", updated_at AS \"updated_at!\" FROM orders WHERE id = $1",
        id
    )
    .fetch_optional(db)
        .await
}

/// A buyer's orders, newest first, from just before `after` (the last one of the page
/// before: its time and id), at most `limit`.
pub async fn of_buyer(
    db: &PgPool,
    buyer: &str,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<Order>, sqlx::Error> {
    let (at, id) = after.unzip();
    sqlx::query_as!(
        Order,
        r#"SELECT id AS "id!", product_id AS "product_id!", user_id AS "user_id!", quantity AS "quantity!", amount_cents AS "amount_cents!", status AS "status!: OrderStatus", fence, lock_wait_ms, batch_size, failure, expires_at, created_at AS "created_at!", updated_at AS "updated_at!"
           FROM orders
           WHERE user_id = $1
             AND (created_at, id) < (COALESCE($2, 'infinity'::timestamptz),
                                     COALESCE($3, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))
           ORDER BY created_at DESC, id DESC
           LIMIT $4"#,
        buyer,
        at,
        id,
        limit
    )
    .fetch_all(db)
    .await
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}
