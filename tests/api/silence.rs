//! A database path that goes silent: one instance's connections to PostgreSQL stop moving
//! bytes either way, with nothing closed or reset, for longer than the request timeout,
//! while a second instance sells the same hot product and another one. The silence starts
//! at the worst moment: with the first instance's lock cycle's COMMIT in flight. And the
//! same path made slow: every message delayed past the request timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::helpers::*;
use crate::money::money_is_exact;

/// How the silenced instance's path to PostgreSQL fails, from the moment one of its lock
/// cycles sends a COMMIT (of a transaction that inserted orders).
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Nothing moves either way: what is read is held, nothing is closed.
    Silent,
    /// Every message waits this long before it is passed on.
    Slow(Duration),
}

/// A TCP proxy in front of PostgreSQL. Armed with a [`Fault`], it fails every connection at
/// once when a client sends the COMMIT of a transaction that inserted orders, until
/// [`heal`], which delivers what it held. Clients must connect with `sslmode=disable` (it
/// reads the protocol's messages).
///
/// [`heal`]: SilentProxy::heal
struct SilentProxy {
    addr: String,
    path: Arc<Path>,
}

/// What every connection through the proxy shares.
struct Path {
    armed: Mutex<Option<Fault>>,
    silent: watch::Sender<bool>,
    delay: watch::Sender<Option<Duration>>,
    /// Set once the fault struck.
    struck: watch::Sender<bool>,
}

impl Path {
    fn strike(&self) {
        let Some(fault) = self.armed.lock().unwrap().take() else {
            return;
        };
        match fault {
            Fault::Silent => self.silent.send_replace(true),
            Fault::Slow(delay) => self.delay.send_replace(Some(delay)).is_some(),
        };
        self.struck.send_replace(true);
    }

    /// Waits while the path is silent, then as long as it is slow.
    async fn pass(&self) {
        let _ = self.silent.subscribe().wait_for(|s| !*s).await;
        let slow = *self.delay.borrow();
        if let Some(delay) = slow {
            tokio::time::sleep(delay).await;
        }
    }
}

impl SilentProxy {
    async fn start(target: String) -> SilentProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let path = Arc::new(Path {
            armed: Mutex::new(None),
            silent: watch::channel(false).0,
            delay: watch::channel(None).0,
            struck: watch::channel(false).0,
        });
        let shared = path.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (target, path) = (target.clone(), shared.clone());
                tokio::spawn(async move {
                    // A connection made while the path fails waits for it, too.
                    path.pass().await;
                    if let Ok(outbound) = TcpStream::connect(&target).await {
                        relay(inbound, outbound, path).await;
                    }
                });
            }
        });
        SilentProxy { addr, path }
    }

    fn arm(&self, fault: Fault) {
        *self.path.armed.lock().unwrap() = Some(fault);
    }

    async fn struck(&self) {
        let mut struck = self.path.struck.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(30), struck.wait_for(|s| *s));
        let _ = waited.await.expect("the fault struck within 30 s");
    }

    fn heal(&self) {
        self.path.delay.send_replace(None);
        self.path.silent.send_replace(false);
    }
}

async fn relay(inbound: TcpStream, outbound: TcpStream, path: Arc<Path>) {
    let (client_rx, mut client_tx) = inbound.into_split();
    let (mut server_rx, server_tx) = outbound.into_split();
    let upstream = upstream(client_rx, server_tx, path.clone());
    let downstream = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = server_rx.read(&mut buf).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>(());
            }
            path.pass().await;
            client_tx.write_all(&buf[..n]).await?;
        }
    };
    let _ = tokio::join!(upstream, downstream);
}

/// Client to server, message by message (see `read_message`). The statements a connection prepared, by name, say which transactions insert orders (sqlx
/// prepares a statement once per connection, then only binds it).
async fn upstream(
    mut client_rx: OwnedReadHalf,
    mut server_tx: OwnedWriteHalf,
    path: Arc<Path>,
) -> std::io::Result<()> {
    let mut started = false;
    let mut prepared: HashMap<Vec<u8>, bool> = HashMap::new();
    let mut inserting = false;
    loop {
        let (message, body) = read_message(&mut client_rx, started).await?;
        let mut fields = body.split(|b| *b == 0);
        match started.then_some(message[0]) {
            // Parse: statement name, query.
            Some(b'P') => {
                let name = fields.next().unwrap_or_default().to_vec();
                let query = fields.next().unwrap_or_default();
                let inserts = query.windows(18).any(|w| w == b"INSERT INTO orders");
                inserting |= inserts;
                prepared.insert(name, inserts);
            }
            // Bind: portal name, statement name.
            Some(b'B') => {
                let _portal = fields.next();
                let name = fields.next().unwrap_or_default();
                inserting |= prepared.get(name).copied().unwrap_or(false);
            }
            Some(b'Q') => {
                let commit = String::from_utf8_lossy(&body)
                    .trim_start()
                    .to_ascii_uppercase()
                    .starts_with("COMMIT");
                if commit && inserting {
                    path.strike();
                }
                if commit {
                    inserting = false;
                }
            }
            _ => {}
        }
        path.pass().await;
        server_tx.write_all(&message).await?;
        started = true;
    }
}

/// One buyer's order on `base`, with what it was told.
async fn buy(base: &str, product: i64, user: &str) -> Option<Reply> {
    place_order(&http(), base, product, user).await.ok()
}

/// Whether a buyer holds, or paid for, any unit of any product.
async fn holds_anything(env: &TestEnv, user: &str) -> bool {
    let live = format!(
        "SELECT COUNT(*) FROM orders WHERE user_id = '{user}'
         AND status IN ('reserved', 'paying', 'paid')"
    );
    count(env, &live).await > 0
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_database_path_frees_the_hot_product_within_the_bound_and_tells_the_truth() {
    sale_over(Fault::Silent).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_database_path_frees_the_hot_product_within_the_bound_and_tells_the_truth() {
    sale_over(Fault::Slow(Duration::from_secs(8))).await;
}

/// Two instances sell a hot product (and the healthy one another product) while the first
/// one's path to PostgreSQL fails as `fault` says from one of its COMMITs, for longer than
/// the request timeout; then it heals.
async fn sale_over(fault: Fault) {
    let env = TestEnv::new().await;
    let (prefix, name) = env.database_url.rsplit_once('/').unwrap();
    let (credentials, target) = prefix.rsplit_once('@').unwrap();
    let proxy = SilentProxy::start(target.to_string()).await;
    let via_proxy = format!("{credentials}@{}/{name}?sslmode=disable", proxy.addr);
    let request_timeout = Duration::from_secs(6);
    let timeouts = [
        "--request-timeout-ms",
        "6000",
        "--shutdown-grace-ms",
        "8000",
        "--lock-timeout-ms",
        "2000",
        "--db-statement-timeout-ms",
        "1000",
        "--expiry-interval-ms",
        "200",
    ];
    let mut silent_args = timeouts.to_vec();
    silent_args.extend(["--database-url", &via_proxy]);
    let a = env.spawn_process("silenced", &silent_args).await;
    let b = env.spawn_process("healthy", &timeouts).await;
    let hot = create_product(&b.base_url, 100_000, "zk").await;
    let other = create_product(&b.base_url, 100_000, "zk").await;
    // Instance a sells first, through the proxy, while the path is healthy.
    let warm = buy(&a.base_url, hot, "a-warm").await.expect("answered");
    assert_eq!(warm.status, StatusCode::CREATED, "{warm:?}");

    // The fault strikes with a's lock cycle's COMMIT in flight.
    proxy.arm(fault);
    let first = tokio::spawn({
        let base = a.base_url.clone();
        async move { buy(&base, hot, "a-first").await }
    });
    proxy.struck().await;
    let silenced = Instant::now();
    let silence = request_timeout + Duration::from_secs(8);

    // Meanwhile: b's buyers of both products, one after another per product; a's buyers too.
    let sell = |base: String, product: i64, tag: &'static str| {
        tokio::spawn(async move {
            let mut sold = Vec::new();
            let mut told = Vec::new();
            for i in 0..2_000 {
                if silenced.elapsed() > silence {
                    break;
                }
                let user = format!("{tag}-{i}");
                let reply = buy(&base, product, &user).await;
                if reply
                    .as_ref()
                    .is_some_and(|r| r.status == StatusCode::CREATED)
                {
                    sold.push(silenced.elapsed());
                }
                told.push((user, reply));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (sold, told)
        })
    };
    let b_hot = sell(b.base_url.clone(), hot, "b-hot");
    let b_other = sell(b.base_url.clone(), other, "b-other");
    let a_hot = sell(a.base_url.clone(), hot, "a-hot");
    let (hot_sold, _) = b_hot.await.unwrap();
    let (other_sold, _) = b_other.await.unwrap();
    let (_, a_told) = a_hot.await.unwrap();
    proxy.heal();

    // The healthy instance sells the hot product again within the request timeout plus a
    // few seconds (a's cycle gives its lock up at its step's bound; PostgreSQL ends the
    // abandoned transaction that holds the row at idle_in_transaction_session_timeout).
    let again = hot_sold.first().copied();
    assert!(
        again.is_some_and(|t| t <= request_timeout + Duration::from_secs(3)),
        "the hot product sold again on the healthy instance {again:?} after the silence began"
    );
    // Its other product never pauses more than a few seconds.
    let mut last = Duration::ZERO;
    let mut longest = Duration::ZERO;
    for t in other_sold.iter().copied() {
        longest = longest.max(t - last);
        last = t;
    }
    eprintln!(
        "{fault:?}: the hot product sold again on the healthy instance {again:?} after the fault struck; its other product's longest pause {longest:?}"
    );
    assert!(
        !other_sold.is_empty() && longest <= Duration::from_secs(4),
        "the other product paused {longest:?} ({} sold)",
        other_sold.len()
    );

    // No buyer told the order failed without an order id holds or pays for it.
    let first = first.await.unwrap();
    let mut told = a_told;
    told.push(("a-first".into(), first));
    // Once healed, nothing is left `paying`, and the books equal the ledger.
    wait_until(Duration::from_secs(60), "nothing left paying", || async {
        (count(&env, "SELECT COUNT(*) FROM orders WHERE status = 'paying'").await == 0)
            .then_some(())
    })
    .await;
    for (user, reply) in &told {
        let Some(reply) = reply else { continue };
        let failed_without_id = !reply.status.is_success() && reply.body["order_id"].is_null();
        if failed_without_id {
            assert!(
                !holds_anything(&env, user).await,
                "{user} was told {reply:?}, yet holds a unit"
            );
        }
    }
    money_is_exact(&env).await;
    let audit = audit(&b.base_url, hot).await;
    assert_eq!(audit["consistent"], true, "{audit}");
}
