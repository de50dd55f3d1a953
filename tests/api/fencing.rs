//! The dangerous case of the source material: a holder whose session expired while it was in
//! the critical section. ZooKeeper grants the lock to the next contender; the stale holder
//! must not be able to write the stock.

use std::time::Duration;

use reqwest::StatusCode;
use seckill::inventory::{self, Change, Outcome, Protection};
use seckill::lock::Token;
use tokio::sync::oneshot;
use uuid::Uuid;
use zookeeper_client as zk;

use crate::helpers::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_session_expired_cannot_write_the_stock() {
    let env = TestEnv::new().await;
    // The stale holder's ZooKeeper connection runs through a proxy we can cut: a network
    // partition.
    let partition = ChaosProxy::start(env.zk_connect.clone()).await;
    let stale = env
        .spawn_app(&["--instance", "stale", "--zk", &partition.addr])
        .await;
    let fresh = env
        .spawn_app(&["--lock-timeout-ms", "20000", "--instance", "fresh"])
        .await;
    let product = create_product(&stale.base_url, 5, "zk").await;

    // The stale holder stops between reading and writing the stock until we let it go: the
    // long pause (a GC, a stall) of the source material.
    let mut pause = stale.holds.hold_next(product);
    let stale_order = {
        let base = stale.base_url.clone();
        tokio::spawn(async move { place_order(&http(), &base, product, "stale-buyer").await })
    };
    pause.reached().await;
    // Inside the critical section: the row is claimed with the stale holder's token.
    let stale_token = env.fence(product).await;
    assert!(stale_token > 0, "the stale holder claimed the row");

    end_session(&env, &partition, &stale, product).await;

    let fresh_reply = place_order(&http(), &fresh.base_url, product, "fresh-buyer")
        .await
        .unwrap();
    assert_eq!(fresh_reply.status, StatusCode::CREATED, "{fresh_reply:?}");
    assert!(fresh_reply.body["fence"].as_i64().unwrap() > stale_token);

    // Only now does the stale holder wake up and write.
    assert!(!stale_order.is_finished(), "the stale holder waited");
    pause.release();
    let stale_reply = stale_order.await.unwrap().unwrap();
    assert_eq!(
        stale_reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{stale_reply:?}"
    );
    assert_eq!(stale_reply.code(), "lock_lost");
    assert!(stale_reply.retry_after.is_some());

    let stale_id = stale_reply.body["order_id"].as_str().unwrap().to_string();
    assert_eq!(
        env.order_row(&stale_id).await,
        ("failed".to_string(), Some("lock_lost".to_string()))
    );
    assert_eq!(env.stock(product).await, 4, "only the fresh holder sold");
    let audit = audit(&fresh.base_url, product).await;
    assert_eq!(audit["consistent"], true, "{audit}");
}

/// Ends the session of `app`, whose ZooKeeper connection runs through `partition`: cut from
/// ZooKeeper, its session taken over and closed, as ZooKeeper ends it once a long GC pause or
/// partition outlasts the session timeout (cut first, or its client would win the session
/// back). Returns once its lock node for `product` is gone.
pub(crate) async fn end_session(
    env: &TestEnv,
    partition: &ChaosProxy,
    app: &TestApp,
    product: i64,
) {
    partition.cut();
    let hijack = zk::Client::connector()
        .with_session(app.zk.session())
        .connect(&env.zk_connect)
        .await
        .expect("take over the session");
    drop(hijack);
    let watcher = env.zk_client().await;
    wait_until(
        Duration::from_secs(10),
        "the stale lock node to vanish",
        || async {
            env.lock_queue(&watcher, product)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_database_rejects_an_older_token_after_a_newer_claim() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let db = env.db.clone();
    let ours = app.zk.ensemble();

    // Token 10 claims and reads, then pauses until told; token 20 claims and sells meanwhile.
    let (has_read, go_on, older) = paused_take(&db, product, token(ours, 10));
    has_read.await.expect("token 10 reached its pause");
    assert_eq!(env.fence(product).await, 10, "token 10 claimed the row");
    match inventory::change_stock(
        &db,
        product,
        Change::Take(1),
        Protection::Fenced(token(ours, 20)),
        async {},
    )
    .await
    {
        Ok(Outcome::Applied(written)) => written.tx.commit().await.unwrap(),
        _ => panic!("the newer token must be able to write"),
    }
    go_on.send(()).expect("token 10 still paused");
    assert!(
        matches!(older.await.unwrap(), Ok(Outcome::Fenced)),
        "the older token's write must be refused"
    );

    // And once a newer token has claimed the row, an older one cannot even claim it.
    let late = inventory::change_stock(
        &db,
        product,
        Change::Take(1),
        Protection::Fenced(token(ours, 15)),
        async {},
    )
    .await;
    assert!(matches!(late, Ok(Outcome::Fenced)));
    assert_eq!(env.stock(product).await, 9);
}

/// Takes one unit under `token` in the background, pausing between its read and its write:
/// resolves the first receiver once it has read (its claim made), writes once the sender
/// fires.
fn paused_take(
    db: &sqlx::PgPool,
    product: i64,
    token: Token,
) -> (
    oneshot::Receiver<()>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<Outcome, sqlx::Error>>,
) {
    let (read, has_read) = oneshot::channel::<()>();
    let (go_on, write) = oneshot::channel::<()>();
    let db = db.clone();
    let taking = tokio::spawn(async move {
        let pause = async move {
            let _ = read.send(());
            let _ = write.await;
        };
        inventory::change_stock(
            &db,
            product,
            Change::Take(1),
            Protection::Fenced(token),
            pause,
        )
        .await
    });
    (has_read, go_on, taking)
}

/// Postgres meets `ensemble`: its epoch is the newest.
async fn rank(db: &sqlx::PgPool, ensemble: Uuid) {
    sqlx::query("INSERT INTO zk_ensembles (id) VALUES ($1)")
        .bind(ensemble)
        .execute(db)
        .await
        .expect("rank an ensemble");
}

fn token(ensemble: Uuid, zxid: i64) -> Token {
    Token { ensemble, zxid }
}

/// Takes one unit under `token`, committing if the write was allowed.
async fn take_one(db: &sqlx::PgPool, product: i64, token: Token) -> bool {
    match inventory::change_stock(
        db,
        product,
        Change::Take(1),
        Protection::Fenced(token),
        async {},
    )
    .await
    {
        Ok(Outcome::Applied(written)) => {
            written.tx.commit().await.unwrap();
            true
        }
        Ok(Outcome::Fenced) => false,
        _ => panic!("unexpected outcome"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replaced_ensembles_tokens_supersede_the_old_ones_and_never_the_reverse() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let db = env.db.clone();
    let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
    // Postgres ranks them in this order (as `inventory::ensembles` does once the old one
    // falls silent: the stranger test below covers that decision).
    rank(&db, old).await;

    assert!(
        take_one(&db, product, token(old, 5_000)).await,
        "the first ensemble sells"
    );
    // The old ensemble's holder reads, then pauses; meanwhile ZooKeeper is replaced and the
    // new ensemble's first holder, with a far smaller zxid, claims the row and sells.
    let (has_read, go_on, stale) = paused_take(&db, product, token(old, 5_001));
    has_read.await.expect("the old holder reached its pause");
    rank(&db, new).await;
    assert!(
        take_one(&db, product, token(new, 7)).await,
        "the new ensemble's tokens supersede the old ones"
    );
    go_on.send(()).expect("the old holder still paused");
    assert!(
        matches!(stale.await.unwrap(), Ok(Outcome::Fenced)),
        "the old ensemble's write in flight must be refused"
    );
    // The old ensemble coming back (any zxid) cannot take the row back: no flip-flopping.
    assert!(!take_one(&db, product, token(old, 9_999_999)).await);
    // Within the new ensemble, tokens order by zxid as before.
    assert!(!take_one(&db, product, token(new, 6)).await);
    assert!(take_one(&db, product, token(new, 8)).await);
    assert_eq!(env.stock(product).await, 7, "three sales were allowed");
}

async fn readiness(base_url: &str) -> Reply {
    send(http().get(format!("{base_url}/readyz")))
        .await
        .unwrap()
}

/// Session timeouts short enough that an ensemble's silence ([`inventory::SILENCE`] of
/// them) passes within a test.
const SHORT_SESSIONS: [&str; 4] = [
    "--zk-session-timeout-ms",
    "2000",
    "--db-statement-timeout-ms",
    "1000",
];

#[tokio::test(flavor = "multi_thread")]
async fn an_identity_made_again_under_a_running_fleet_is_taken_up_by_all() {
    let env = TestEnv::new().await;
    let old = env.spawn_app(&SHORT_SESSIONS).await;
    let product = create_per_request_product(&old.base_url, 5, "zk").await;
    let sold = place_order(&http(), &old.base_url, product, "before")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED);
    // Someone deletes the identity node; the next instance to start makes a new one. The
    // running instance reads it within a beat, and once the old identity has been silent
    // for its window, Postgres ranks the new one first: both instances sell again.
    let zk = env.zk_client().await;
    zk.delete(&format!("{}/ensemble", env.zk_root), None)
        .await
        .unwrap();
    let new = env.spawn_app(&SHORT_SESSIONS).await;
    wait_until(
        Duration::from_secs(60),
        "both instances to take up the new identity",
        || async {
            (old.zk.ensemble() == new.zk.ensemble()
                && readiness(&old.base_url).await.status == StatusCode::OK
                && readiness(&new.base_url).await.status == StatusCode::OK)
                .then_some(())
        },
    )
    .await;
    for (app, user) in [(&new, "new"), (&old, "old")] {
        let sold = place_order(&http(), &app.base_url, product, user)
            .await
            .unwrap();
        assert_eq!(sold.status, StatusCode::CREATED, "{user}: {sold:?}");
    }
    assert_eq!(env.stock(product).await, 2);
}

/// A stranger: an instance pointed at another ZooKeeper (here another root, so another
/// ensemble identity) over the same database, as with a staging ZooKeeper URL. It must not
/// fence the live fleet out; it reports itself not ready and sells nothing. Once the fleet
/// has been silent for its window (as a wiped ZooKeeper's old identity is), it takes over.
#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_ensemble_cannot_fence_a_live_fleet_out() {
    let env = TestEnv::new().await;
    let fleet = env.spawn_app(&SHORT_SESSIONS).await;
    let product = create_product(&fleet.base_url, 10, "zk").await;
    let sold = place_order(&http(), &fleet.base_url, product, "before")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    let fenced_by = env.fence_of(product).await;

    let elsewhere = format!("{}-stranger", env.zk_root);
    let mut flags = SHORT_SESSIONS.to_vec();
    flags.extend(["--zk-root", &elsewhere]);
    let stranger = env.spawn_app(&flags).await;
    let ready = readiness(&stranger.base_url).await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE, "{ready:?}");
    assert_eq!(ready.body["ensemble"], "outranked", "{ready:?}");
    assert_eq!(
        ready.body["guarding"],
        fleet.zk.ensemble().to_string(),
        "{ready:?}"
    );
    let refused = place_order(&http(), &stranger.base_url, product, "at-the-stranger")
        .await
        .unwrap();
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    // The fleet goes on selling, its fence untouched by the stranger.
    for user in ["after-1", "after-2"] {
        let sold = place_order(&http(), &fleet.base_url, product, user)
            .await
            .unwrap();
        assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    }
    let now = env.fence_of(product).await;
    assert_eq!(now.0, fenced_by.0, "the fleet's epoch still fences the row");
    assert_eq!(readiness(&fleet.base_url).await.status, StatusCode::OK);

    // The fleet goes away for good: once it has been silent for its window, the stranger's
    // ensemble takes over on its own (the wiped-ZooKeeper recovery).
    drop(fleet);
    wait_until(
        Duration::from_secs(60),
        "the stranger to take over from the silent fleet",
        || async { (readiness(&stranger.base_url).await.status == StatusCode::OK).then_some(()) },
    )
    .await;
    let sold = place_order(&http(), &stranger.base_url, product, "taken-over")
        .await
        .unwrap();
    assert_eq!(sold.status, StatusCode::CREATED, "{sold:?}");
    assert_eq!(env.stock(product).await, 6);
    assert_eq!(audit(&stranger.base_url, product).await["consistent"], true);
}

/// A stale holder's write still in flight (the row locked) when the next holder claims the
/// row: the claim waits for it, and what it committed must be in what the new holder decides
/// with. Here that write reserved the last unit unpaid reservations may hold, so the next
/// reservation is refused (with the write missing from the read, it would be granted: one
/// over the cap). A claim and read merged into one statement, whose snapshot predates the
/// wait, failed this until it read again. (A pause between read and write keeps the cycle
/// in a transaction of its own, claim first; the shared transaction's twin is below.)
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_that_waited_for_a_stale_write_decides_with_what_it_committed() {
    let env = TestEnv::new().await;
    // 10 units: unpaid reservations may hold 1.
    let app = env
        .spawn_app(&["--max-unpaid-share", "0.1", "--stock-think-ms", "1"])
        .await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let late = stale_write_then(&env, &app, product, "%UPDATE products p SET fence_epoch%").await;
    assert_eq!(
        (late.status, late.code()),
        (StatusCode::CONFLICT, "too_many_unpaid"),
        "{late:?}"
    );
    assert_eq!(
        env.stock(product).await,
        9,
        "only the stale write's unit is gone"
    );
}

/// The same stale write in flight when a cycle in a shared transaction writes (it claims in
/// its write): the write waits for it, then finds the stock is no longer what it read, and
/// sells nothing — its buyer is told the lock was lost and may retry, and no decision made on
/// the stale read lands.
#[tokio::test(flavor = "multi_thread")]
async fn a_shared_write_that_waited_for_a_stale_write_sells_nothing_on_its_stale_read() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&["--max-unpaid-share", "0.1"]).await;
    let product = create_product(&app.base_url, 10, "zk").await;
    let late = stale_write_then(&env, &app, product, "%SET stock = t.next, fence_epoch%").await;
    assert_eq!(
        (late.status, late.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "lock_lost"),
        "{late:?}"
    );
    assert_eq!(
        env.stock(product).await,
        9,
        "only the stale write's unit is gone"
    );
    let unpaid: i64 = count(
        &env,
        "SELECT COUNT(*) FROM orders WHERE status = 'reserved'",
    )
    .await;
    assert_eq!(
        unpaid, 1,
        "the stale write's reservation alone: the cap holds"
    );
}

/// A stale holder's write (a reservation of the product's last unpaid room) left open with
/// its row locked; a reservation placed meanwhile, whose lock cycle waits on that row lock in
/// the statement matching `waiting`; then the stale write commits. The reservation's answer.
async fn stale_write_then(env: &TestEnv, app: &TestApp, product: i64, waiting: &str) -> Reply {
    let mut stale = env.db.begin().await.unwrap();
    sqlx::query("UPDATE products SET stock = stock - 1, updated_at = now() WHERE id = $1")
        .bind(product)
        .execute(&mut *stale)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO orders (id, product_id, user_id, quantity, amount_cents, status, expires_at)
         VALUES ($1, $2, 'stale-buyer', 1, 100, 'reserved', now() + interval '1 hour')",
    )
    .bind(Uuid::new_v4())
    .bind(product)
    .execute(&mut *stale)
    .await
    .unwrap();

    let late = {
        let base = app.base_url.clone();
        tokio::spawn(async move { reserve(&base, product, "late-buyer").await })
    };
    env.wait_for_lock_wait(waiting, "the cycle to wait for the stale write's row lock")
        .await;
    stale.commit().await.unwrap();
    late.await.unwrap()
}

/// A lock cycle served in a shared transaction claims its row in the write itself: a row a
/// newer token has claimed (a holder granted the lock after ours lost its session) refuses
/// the write, the cycle sells nothing and its buyer is told the lock was lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_shared_cycle_cannot_write_a_row_a_newer_token_claimed() {
    let env = TestEnv::new().await;
    let app = env.spawn_app(&[]).await;
    let product = create_product(&app.base_url, 5, "zk").await;
    let first = place_order(&http(), &app.base_url, product, "first")
        .await
        .unwrap();
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    // A newer holder of the same ensemble has claimed the row (the zxids of our next lock
    // nodes stay far below this one).
    sqlx::query("UPDATE products SET fence = fence + 1000000000000 WHERE id = $1")
        .bind(product)
        .execute(&env.db)
        .await
        .unwrap();
    let refused = place_order(&http(), &app.base_url, product, "second")
        .await
        .unwrap();
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "lock_lost"),
        "{refused:?}"
    );
    assert_eq!(env.stock(product).await, 4, "only the first order's unit");
    let sold: i64 = count(
        &env,
        "SELECT COUNT(*) FROM orders WHERE status IN ('reserved', 'paying', 'paid')",
    )
    .await;
    assert_eq!(sold, 1);
}
