//! TCP proxies the fault tests put between an instance and its servers.

use super::*;

/// Forwards 127.0.0.1:<port> to `target` until cut; while cut, drops every connection.
pub struct ChaosProxy {
    pub addr: String,
    up: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
}

impl ChaosProxy {
    pub async fn start(target: String) -> ChaosProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let (cut, _) = watch::channel(0u64);
        let (up2, cut2) = (up.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused in all but name
                }
                let target = target.clone();
                let mut cuts = cut2.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        ChaosProxy { addr, up, cut }
    }

    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// A TCP proxy in front of PostgreSQL that, once armed, takes the next `COMMIT` and closes
/// the client's connection with no answer. [`CommitDropper::start`] lets that COMMIT through
/// at once (it happened, and the client cannot know it); [`CommitDropper::delaying`] holds it
/// until [`CommitDropper::deliver`] (a COMMIT late in the network: the client has given up
/// on it, and it may still land). Clients must connect with `sslmode=disable` (it reads the
/// protocol's messages).
pub struct CommitDropper {
    /// `host:port` to use in place of PostgreSQL's.
    pub addr: String,
    armed: Arc<AtomicBool>,
    /// Commits whose answer it dropped.
    pub dropped: Arc<std::sync::atomic::AtomicUsize>,
    /// Delaying: opened to let the held COMMIT go on to PostgreSQL.
    deliver: watch::Sender<bool>,
    /// Delaying: how the held COMMIT ended once delivered (see [`Delivered`]).
    delivered: watch::Receiver<Option<Delivered>>,
}

/// What PostgreSQL did with a COMMIT delivered late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivered {
    /// It answered `CommandComplete`: the transaction was still open, and the COMMIT landed.
    Committed,
    /// An error (its backend was ended meanwhile: PostgreSQL's FATAL), or the connection was
    /// gone: the COMMIT landed nowhere.
    Refused,
}

impl CommitDropper {
    pub async fn start(target: String) -> CommitDropper {
        Self::spawn(target, false).await
    }

    /// A proxy that holds the dropped COMMIT until [`Self::deliver`]. It takes only the
    /// COMMIT of a transaction that wrote orders (a lock cycle's), not a heartbeat's.
    pub async fn delaying(target: String) -> CommitDropper {
        Self::spawn(target, true).await
    }

    async fn spawn(target: String, delay: bool) -> CommitDropper {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let armed = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (deliver, deliver_rx) = watch::channel(!delay);
        let (delivered_tx, delivered) = watch::channel(None);
        let delivered_tx = Arc::new(delivered_tx);
        let (armed2, dropped2) = (armed.clone(), dropped.clone());
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (target, armed, dropped) = (target.clone(), armed2.clone(), dropped2.clone());
                let (deliver, delivered) = (deliver_rx.clone(), delivered_tx.clone());
                tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(&target).await {
                        let commit = Commit {
                            armed,
                            dropped,
                            deliver,
                            delivered,
                            after: delay.then_some(&b"INSERT INTO orders"[..]),
                        };
                        relay(inbound, outbound, commit).await;
                    }
                });
            }
        });
        CommitDropper {
            addr,
            armed,
            dropped,
            deliver,
            delivered,
        }
    }

    /// Drops the answer to the next COMMIT any client sends.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Lets the held COMMIT go on to PostgreSQL, and waits (bounded) for what became of it.
    pub async fn deliver(&mut self) -> Delivered {
        self.deliver.send_replace(true);
        let became = tokio::time::timeout(
            Duration::from_secs(30),
            self.delivered.wait_for(Option::is_some),
        );
        became
            .await
            .expect("the late COMMIT was delivered within 30 s")
            .expect("the proxy is running")
            .expect("waited for Some")
    }
}

/// The next message a PostgreSQL client sends, whole, and its body: the startup message
/// (before `started`) has no type byte; every later one is a type byte and a length that
/// counts itself.
pub async fn read_message(
    client: &mut (impl tokio::io::AsyncRead + Unpin),
    started: bool,
) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut message = Vec::new();
    if started {
        let mut kind = [0u8; 1];
        client.read_exact(&mut kind).await?;
        message.push(kind[0]);
    }
    let mut len = [0u8; 4];
    client.read_exact(&mut len).await?;
    message.extend_from_slice(&len);
    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    client.read_exact(&mut body).await?;
    message.extend_from_slice(&body);
    Ok((message, body))
}

/// One connection's part in the COMMIT it may drop.
struct Commit {
    armed: Arc<AtomicBool>,
    dropped: Arc<std::sync::atomic::AtomicUsize>,
    deliver: watch::Receiver<bool>,
    delivered: Arc<watch::Sender<Option<Delivered>>>,
    /// Only a COMMIT of a transaction that sent a statement containing this.
    after: Option<&'static [u8]>,
}

async fn relay(inbound: TcpStream, outbound: TcpStream, commit: Commit) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Commit {
        armed,
        dropped,
        mut deliver,
        delivered,
        after,
    } = commit;
    let (mut client_rx, mut client_tx) = inbound.into_split();
    let (mut server_rx, mut server_tx) = outbound.into_split();
    let (cut, mut cut_rx) = watch::channel(false);
    let (sent, mut sent_rx) = watch::channel(false);
    let upstream = async move {
        let mut started = false;
        let mut marked = after.is_none();
        loop {
            let (message, body) = read_message(&mut client_rx, started).await?;
            let is_commit = started
                && message[0] == b'Q'
                && String::from_utf8_lossy(&body)
                    .trim_start()
                    .to_ascii_uppercase()
                    .starts_with("COMMIT");
            if let Some(marker) = after {
                marked |= body.windows(marker.len()).any(|w| w == marker);
            }
            if is_commit && marked && armed.swap(false, Ordering::SeqCst) {
                // From now on nothing goes back to this client: the commit runs (now, or
                // once delivered), its answer read by nobody.
                cut.send_replace(true);
                dropped.fetch_add(1, Ordering::SeqCst);
                let go = deliver.wait_for(|go| *go).await.map(|_| ());
                drop(go);
                let written = server_tx.write_all(&message).await;
                sent.send_replace(true);
                written?;
                return Ok::<_, std::io::Error>(());
            }
            if is_commit {
                marked = after.is_none();
            }
            server_tx.write_all(&message).await?;
            started = true;
        }
    };
    let downstream = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                read = server_rx.read(&mut buf) => {
                    let n = read?;
                    if n == 0 {
                        return Ok(());
                    }
                    client_tx.write_all(&buf[..n]).await?;
                }
                _ = async { cut_rx.wait_for(|cut| *cut).await.map(|_| ()) } => break,
            }
        }
        // The client sees its connection close, with no answer to its commit.
        drop(client_tx);
        // What PostgreSQL does with the COMMIT once it is sent: an answer, or a connection
        // its backend already closed.
        let sent = sent_rx.wait_for(|sent| *sent).await.map(|_| ());
        if sent.is_err() {
            return Ok(()); // the client went away first
        }
        // The first message of the answer: `C` (CommandComplete) if the COMMIT ran. A backend
        // ended before it came had sent its FATAL (`E`) already, then closed.
        let became = match server_rx.read(&mut buf).await {
            Ok(n) if n > 0 && buf[0] == b'C' => Delivered::Committed,
            _ => Delivered::Refused,
        };
        delivered.send_replace(Some(became));
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::join!(upstream, downstream);
}
