//! Servers of a fault test's own, so that killing, wiping or restarting them disturbs no
//! other test: ZooKeeper servers (one, or an ensemble) on free loopback ports, started from
//! Debian's `zookeeper` package as `scripts/lib.sh` does, and the second PostgreSQL cluster
//! that `scripts/test` makes for restarts.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::helpers::wait_until;

/// ZooKeeper servers: `count` 1 is a standalone server, 3 an ensemble.
pub struct ZkServers {
    dir: PathBuf,
    /// Client, quorum and election port of each server.
    ports: Vec<[u16; 3]>,
    children: Vec<Option<Child>>,
    /// The connect string naming every server.
    pub connect: String,
}

impl ZkServers {
    pub async fn start(count: usize) -> ZkServers {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("zk-{}", uuid::Uuid::new_v4().simple()));
        // Hold every listener until all ports are chosen, so no two are the same.
        let listeners: Vec<std::net::TcpListener> = (0..count * 3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
            .collect();
        let port = |i: usize| listeners[i].local_addr().unwrap().port();
        let ports: Vec<[u16; 3]> = (0..count)
            .map(|i| [port(3 * i), port(3 * i + 1), port(3 * i + 2)])
            .collect();
        drop(listeners);
        let connect = ports
            .iter()
            .map(|p| format!("127.0.0.1:{}", p[0]))
            .collect::<Vec<_>>()
            .join(",");
        let mut servers = ZkServers {
            dir,
            ports,
            children: (0..count).map(|_| None).collect(),
            connect,
        };
        for i in 0..count {
            servers.write_config(i);
            servers.spawn(i);
        }
        for i in 0..count {
            servers.wait_serving(i).await;
        }
        servers
    }

    fn node_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("server-{}", i + 1))
    }

    fn write_config(&self, i: usize) {
        let dir = self.node_dir(i);
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let mut config = format!(
            "tickTime=500\ninitLimit=20\nsyncLimit=4\ndataDir={}\nclientPort={}\n\
             clientPortAddress=127.0.0.1\nmaxClientCnxns=0\nmaxSessionTimeout=60000\n\
             4lw.commands.whitelist=*\nadmin.enableServer=false\n",
            data.display(),
            self.ports[i][0]
        );
        if self.ports.len() > 1 {
            for (n, p) in self.ports.iter().enumerate() {
                config += &format!("server.{}=127.0.0.1:{}:{}\n", n + 1, p[1], p[2]);
            }
            std::fs::write(data.join("myid"), format!("{}\n", i + 1)).unwrap();
        }
        std::fs::write(dir.join("zoo.cfg"), config).unwrap();
    }

    fn spawn(&mut self, i: usize) {
        let dir = self.node_dir(i);
        let log = std::fs::File::create(dir.join("zookeeper.log")).unwrap();
        let child = Command::new("java")
            // A small, quick-starting JVM: three of them share two cores with the tests.
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg(format!("-Dzookeeper.log.dir={}", dir.display()))
            .args(["-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(dir.join("zoo.cfg"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .expect("start ZooKeeper (scripts/test installs Debian's zookeeper)");
        self.children[i] = Some(child);
    }

    /// Starts server `i` again (after [`Self::kill`]), and waits until it serves.
    pub async fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_serving(i).await;
    }

    /// SIGKILL: the server vanishes without a goodbye, as in a crash.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            child.kill().await.expect("kill ZooKeeper");
        }
    }

    /// Loses server `i`'s data (it must be stopped): a new, empty ZooKeeper in its place.
    pub fn wipe(&self, i: usize) {
        assert!(
            self.children[i].is_none(),
            "stop the server before wiping it"
        );
        std::fs::remove_dir_all(self.node_dir(i).join("data")).unwrap();
        self.write_config(i);
    }

    /// The server's `srvr` mode: leader, follower or standalone; None while not serving.
    pub async fn mode(&self, i: usize) -> Option<String> {
        let ask = async {
            let mut conn = TcpStream::connect(("127.0.0.1", self.ports[i][0]))
                .await
                .ok()?;
            conn.write_all(b"srvr").await.ok()?;
            let mut reply = String::new();
            conn.read_to_string(&mut reply).await.ok()?;
            reply
                .lines()
                .find_map(|l| l.strip_prefix("Mode: "))
                .map(str::to_string)
        };
        tokio::time::timeout(Duration::from_secs(2), ask)
            .await
            .ok()
            .flatten()
    }

    pub async fn wait_serving(&self, i: usize) {
        wait_until(Duration::from_secs(60), "ZooKeeper to serve", || {
            self.mode(i)
        })
        .await;
    }

    /// The ensemble's leader now.
    pub async fn leader(&self) -> usize {
        wait_until(Duration::from_secs(60), "an elected leader", || async {
            for i in 0..self.ports.len() {
                if self.mode(i).await.as_deref() == Some("leader") {
                    return Some(i);
                }
            }
            None
        })
        .await
    }
}

impl Drop for ZkServers {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The PostgreSQL cluster the fault tests may stop and start: `FAULTS_PG_CLUSTER`
/// (`<version>/<name>`, for pg_ctlcluster) serving `FAULTS_DATABASE_URL`. `scripts/test`
/// creates it, apart from the cluster every other test uses.
pub struct PgCluster {
    version: String,
    name: String,
    pub url: String,
}

impl PgCluster {
    pub fn from_env() -> PgCluster {
        let cluster = std::env::var("FAULTS_PG_CLUSTER")
            .expect("FAULTS_PG_CLUSTER: run the fault tests through scripts/test");
        let (version, name) = cluster.split_once('/').expect("<version>/<name>");
        PgCluster {
            version: version.to_string(),
            name: name.to_string(),
            url: std::env::var("FAULTS_DATABASE_URL").expect("FAULTS_DATABASE_URL"),
        }
    }

    pub async fn ctl(&self, action: &str) {
        let mut cmd = Command::new("pg_ctlcluster");
        cmd.args([&self.version, &self.name, action]);
        if action == "stop" {
            // Fast: connections are cut at once, as in a crash or a failover.
            cmd.args(["-m", "fast"]);
        }
        let status = cmd.status().await.expect("run pg_ctlcluster");
        assert!(status.success(), "pg_ctlcluster {action}: {status}");
    }
}
