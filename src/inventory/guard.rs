//! A product's guard (how its stock is protected), and entering it before a stock change: for `zk` and `zk-herd`, the product's
//! ZooKeeper lock, whose token fences the write; for the others, what PostgreSQL alone does.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lock::{LockError, Owner, Recipe, Session, StockLock, Token, Zk};

/// How a product's stock is protected against concurrent buyers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Guard {
    /// Read-check-write inside the product's fair ZooKeeper lock, fenced by the lock's token.
    Zk,
    /// The same, under the naive lock everyone watches (the herd effect), also fenced.
    ZkHerd,
    /// No lock: one conditional `UPDATE ... WHERE stock >= q`. The database-only baseline.
    PgAtomic,
    /// Read-check-write with no lock and no fence. Oversells under concurrency: the demo.
    None,
}

impl Guard {
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::Zk => "zk",
            Guard::ZkHerd => "zk-herd",
            Guard::PgAtomic => "pg-atomic",
            Guard::None => "none",
        }
    }

    /// The guard a server sells under: `none` only where unsafe guards are allowed. A
    /// product made on a demo server and sold by a production one (same database) is sold
    /// under `pg-atomic`, never unguarded.
    pub fn sold_under(self, allow_unsafe_guards: bool) -> Guard {
        match self {
            Guard::None if !allow_unsafe_guards => Guard::PgAtomic,
            guard => guard,
        }
    }

    /// The ZooKeeper lock recipe that guards the stock, for the guards that take one.
    pub fn recipe(self) -> Option<Recipe> {
        match self {
            Guard::Zk => Some(Recipe::Fair),
            Guard::ZkHerd => Some(Recipe::Herd),
            Guard::PgAtomic | Guard::None => None,
        }
    }
}

impl TryFrom<String> for Guard {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        match s.as_str() {
            "zk" => Ok(Guard::Zk),
            "zk-herd" => Ok(Guard::ZkHerd),
            "pg-atomic" => Ok(Guard::PgAtomic),
            "none" => Ok(Guard::None),
            _ => Err(format!("unknown guard {s:?}")),
        }
    }
}

/// Read from its TEXT column by name (`products.guard` in SQL: `guard AS "guard: Guard"`).
impl sqlx::Type<sqlx::Postgres> for Guard {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for Guard {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let name = <String as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(Guard::try_from(name)?)
    }
}

/// Who may write the stock, and how that is checked.
#[derive(Clone, Copy, Debug)]
pub enum Protection {
    /// We hold the ZooKeeper lock whose token this is. The row must be claimed for it.
    Fenced(Token),
    /// No lock: PostgreSQL's row lock, taken at the read and held to the commit.
    Atomic,
    /// Nothing: the unsafe demo guard.
    Unguarded,
}

/// What the product's guard needs before a stock change: for `zk` and `zk-herd`, the
/// product's lock (kept until the change commits), whose token fences the write. `timeout`
/// bounds the wait for the lock.
pub async fn enter(
    zk: &Zk,
    product_id: i64,
    guard: Guard,
    session: Session,
    timeout: Duration,
) -> Result<(Option<StockLock>, Protection), LockError> {
    enter_as(zk, None, product_id, guard, session, timeout).await
}

/// [`enter`] for an `owner` that may hold the product's lock already: then the lock is
/// re-entered by counting (see `lock::Owner`), with the same token.
pub async fn enter_as(
    zk: &Zk,
    owner: Option<&Owner>,
    product_id: i64,
    guard: Guard,
    session: Session,
    timeout: Duration,
) -> Result<(Option<StockLock>, Protection), LockError> {
    let Some(recipe) = guard.recipe() else {
        let protection = match guard {
            Guard::None => Protection::Unguarded,
            _ => Protection::Atomic,
        };
        return Ok((None, protection));
    };
    let lock = zk
        .lock_stock_as(owner, product_id, recipe, session, timeout)
        .await?;
    Ok(fenced(lock))
}

/// A granted lock, and the protection its token gives the stock write.
fn fenced(lock: StockLock) -> (Option<StockLock>, Protection) {
    let protection = Protection::Fenced(lock.token);
    (Some(lock), protection)
}

/// [`enter`] for a sale's lock cycle: with a ZooKeeper guard, the product's terms are
/// read-locked too (see `inventory::terms`), until the lock is released.
pub async fn enter_for_sale(
    zk: &Zk,
    product_id: i64,
    guard: Guard,
    session: Session,
    timeout: Duration,
) -> Result<(Option<StockLock>, Protection), LockError> {
    let Some(recipe) = guard.recipe() else {
        return enter(zk, product_id, guard, session, timeout).await;
    };
    let lock = zk
        .lock_for_sale(product_id, recipe, session, timeout)
        .await?;
    Ok(fenced(lock))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_round_trip_through_their_names() {
        for g in [Guard::Zk, Guard::ZkHerd, Guard::PgAtomic, Guard::None] {
            assert_eq!(Guard::try_from(g.as_str().to_string()), Ok(g));
            assert_eq!(serde_json::to_value(g).unwrap(), g.as_str());
        }
        assert!(Guard::try_from("redis".to_string()).is_err());
    }
}
