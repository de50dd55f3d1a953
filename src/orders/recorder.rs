//! Payments' answers recorded many to a statement: the charges of a sale come back from the
//! provider at nearly the same moment, and each would otherwise cost PostgreSQL a statement
//! and a commit of its own (see `group`). The same combining as the lock cycles', for the
//! step after them.

use std::sync::Arc;

use sqlx::PgPool;

use super::intents::{self, Answered};
use super::model::Order;
use crate::group::{GroupWriter, WriteGroup, Written};

/// At most this many answers in one statement (the arrays of one `unnest`).
const GROUP_MAX: usize = 512;

#[derive(Clone)]
pub struct Recorder {
    writer: GroupWriter<Answered, Option<Order>>,
    /// Intents marked sent, before their charges leave (`intents::mark_sent`).
    sent: GroupWriter<String, bool>,
}

impl Recorder {
    pub fn new(db: PgPool) -> Recorder {
        let answers_db = db.clone();
        let write: WriteGroup<Answered, Option<Order>> = Arc::new(move |answers, _| {
            let db = answers_db.clone();
            Box::pin(async move { intents::record_payments(&db, &answers).await })
        });
        let mark: WriteGroup<String, bool> = Arc::new(move |keys, _| {
            let db = db.clone();
            Box::pin(async move { intents::mark_sent(&db, &keys).await })
        });
        Recorder {
            writer: GroupWriter::new(write, |answered| &answered.key, GROUP_MAX),
            sent: GroupWriter::new(mark, |key| key, GROUP_MAX),
        }
    }

    /// Marks the intent under `key` as sent, in the next statement: `false` if it is no
    /// longer pending (then its charge must not be sent).
    pub(super) async fn mark_sent(&self, key: String) -> Written<bool> {
        self.sent.write(key).await
    }

    /// Records one answer (see `intents::record_payments`) in the next statement: the order
    /// if this moved it to `paid`, `None` if it did not (declined, or moved on already).
    pub(super) async fn record(&self, answered: Answered) -> Written<Option<Order>> {
        self.writer.write(answered).await
    }
}
