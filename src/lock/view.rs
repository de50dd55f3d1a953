//! A product's lock as the teaching page draws it: numbered tickets, the holder first, each
//! waiter with the one node it watches.

use zookeeper_client as zk;

use super::{node, LockStats, Recipe, Zk};
use crate::telemetry::metrics;

/// One node in a lock's directory: a numbered ticket.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
#[schema(as = LockTicket)]
pub struct Ticket {
    pub node: String,
    /// The queue number (fair recipe).
    pub seq: Option<u64>,
    /// The instance that created it (the node's data).
    pub owner: String,
    /// The node this waiter watches: the one just before it (fair recipe).
    pub watches: Option<String>,
    /// czxid: the fencing token this ticket will carry when served.
    pub token: i64,
}

/// A product's lock at one moment: who holds it and who waits, in order.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct QueueView {
    pub product_id: i64,
    /// `fair` (guard `zk`) or `herd` (guard `zk-herd`).
    #[schema(value_type = String)]
    pub recipe: &'static str,
    pub path: String,
    pub holder: Option<Ticket>,
    /// In queue order (fair recipe; the herd has no queue, its waiters hold no node).
    pub waiters: Vec<Ticket>,
    /// Nodes in the directory; only the first [`QUEUE_VIEW_MAX`] are detailed.
    pub nodes: usize,
    /// Buyers of this instance waiting for or holding the lock.
    pub waiting_here: usize,
    /// What this instance's acquisitions have cost.
    pub stats: LockStats,
    pub instance: String,
}

pub const QUEUE_VIEW_MAX: usize = 50;

impl Zk {
    /// The product's lock as it stands: holder and waiters (read in one multi-read, so the
    /// tickets are a consistent snapshot).
    pub async fn queue(&self, product_id: i64, recipe: Recipe) -> Result<QueueView, zk::Error> {
        let client = self.client();
        let dir = self.lock_dir(recipe, product_id);
        metrics::zk("get_children");
        let mut names: Vec<(Option<u64>, String)> = match client.list_children(&dir).await {
            Ok(children) => children
                .into_iter()
                .map(|c| (node::sequence(&c), c))
                .collect(),
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        };
        names.sort_unstable();
        let nodes = names.len();
        names.truncate(QUEUE_VIEW_MAX);
        let mut tickets = Vec::new();
        if !names.is_empty() {
            metrics::zk("multi_read");
            let mut reader = client.new_multi_reader();
            for (_, name) in &names {
                reader.add_get_data(&format!("{dir}/{name}"))?;
            }
            let mut previous: Option<String> = None;
            for ((seq, name), result) in names.into_iter().zip(reader.commit().await?) {
                // A node that went between the listing and the read is simply not drawn.
                let zk::MultiReadResult::Data { data, stat } = result else {
                    continue;
                };
                let data = String::from_utf8_lossy(&data);
                let owner = data
                    .split_once('#')
                    .map_or(&*data, |(owner, _)| owner)
                    .to_string();
                let watches = if recipe == Recipe::Fair {
                    previous.clone()
                } else {
                    None
                };
                previous = Some(name.clone());
                tickets.push(Ticket {
                    node: name,
                    seq,
                    owner,
                    watches,
                    token: stat.czxid,
                });
            }
        }
        let mut tickets = tickets.into_iter();
        let holder = tickets.next().map(|t| Ticket { watches: None, ..t });
        Ok(QueueView {
            product_id,
            recipe: recipe.as_str(),
            path: dir,
            holder,
            waiters: tickets.collect(),
            nodes,
            waiting_here: self.waiting_here(product_id),
            stats: self.stats(product_id),
            instance: self.instance().to_string(),
        })
    }
}
