//! A product's lock as the teaching page draws it: numbered tickets, the holder first, each
//! waiter with the one node it watches.

use zookeeper_client as zk;

use super::node::Place;
use super::{node, rwlock, Access, LockStats, Recipe, Zk};
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
    /// What the node is for, after the instance in its data (`sale`, `lab-3`, an order id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The side of a read-write lock this node asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
}

/// The payment semaphore at one moment: who holds its leases and who waits for one.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SemaphoreView {
    pub path: String,
    /// N: how many leases may be held at once.
    pub max_leases: usize,
    /// Leases held, oldest first.
    pub leases: Vec<Ticket>,
    /// Waiting for a lease, in turn: the acquirer whose lease node is over the limit (it
    /// watches the leases), then the recipe's mutex queue behind it.
    pub waiters: Vec<Ticket>,
    pub instance: String,
}

/// A product's terms lock at one moment: the readers sharing it (or the one writer), then
/// everyone waiting, in queue order.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct RwLockView {
    pub product_id: i64,
    pub path: String,
    pub holders: Vec<Ticket>,
    pub waiters: Vec<Ticket>,
    pub instance: String,
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
        // The herd's one node has no sequence: it sorts first, alone.
        let mut names: Vec<(Option<u64>, String)> = children(&client, &dir)
            .await?
            .into_iter()
            .map(|c| (node::sequence(&c), c))
            .collect();
        names.sort_unstable();
        let nodes = names.len();
        names.truncate(QUEUE_VIEW_MAX);
        let mut tickets = tickets(&client, &dir, names).await?;
        let mut previous: Option<String> = None;
        for ticket in &mut tickets {
            // Each fair waiter watches the node just before it; the herd's data is no label.
            let name = Some(ticket.node.clone());
            if recipe == Recipe::Fair {
                ticket.watches = std::mem::replace(&mut previous, name);
            }
            ticket.label = None;
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

/// A directory's nodes, given in queue order as `(sequence, name)`, as tickets (owner and
/// label from each node's data, read in one multi-read, so a consistent snapshot); nodes
/// gone meanwhile are skipped.
async fn tickets(
    client: &zk::Client,
    dir: &str,
    names: Vec<(Option<u64>, String)>,
) -> Result<Vec<Ticket>, zk::Error> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    metrics::zk("multi_read");
    let mut reader = client.new_multi_reader();
    for (_, name) in &names {
        reader.add_get_data(&format!("{dir}/{name}"))?;
    }
    let mut tickets = Vec::new();
    for ((seq, name), result) in names.into_iter().zip(reader.commit().await?) {
        let zk::MultiReadResult::Data { data, stat } = result else {
            continue;
        };
        let data = String::from_utf8_lossy(&data);
        let (owner, label) = match data.split_once('#') {
            Some((owner, label)) => (owner.to_string(), Some(label.to_string())),
            None => (data.to_string(), None),
        };
        tickets.push(Ticket {
            node: name,
            seq,
            owner,
            watches: None,
            token: stat.czxid,
            label,
            access: None,
        });
    }
    Ok(tickets)
}

/// A directory's children, or none if it does not exist yet.
async fn children(client: &zk::Client, dir: &str) -> Result<Vec<String>, zk::Error> {
    metrics::zk("get_children");
    match client.list_children(dir).await {
        Ok(children) => Ok(children),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Sorted `(sequence, name)` of the children named like `lock_name` contenders.
fn in_turn(children: Vec<String>, lock_name: &str) -> Vec<(Option<u64>, String)> {
    let mut names: Vec<(Option<u64>, String)> = children
        .into_iter()
        .filter_map(|c| Some((Some(node::sequence_after(&c, lock_name)?), c)))
        .collect();
    names.sort_unstable();
    names.truncate(QUEUE_VIEW_MAX);
    names
}

impl Zk {
    /// The semaphore `name` as it stands (N is this instance's `max`).
    pub async fn semaphore_view(&self, name: &str, max: usize) -> Result<SemaphoreView, zk::Error> {
        let client = self.client();
        let dir = self.semaphore_dir(name);
        let (leases_dir, locks_dir) = (format!("{dir}/leases"), format!("{dir}/locks"));
        let leases = in_turn(children(&client, &leases_dir).await?, node::LEASE);
        let turns = in_turn(children(&client, &locks_dir).await?, node::MUTEX);
        let mut leases = tickets(&client, &leases_dir, leases).await?;
        let turns = tickets(&client, &locks_dir, turns).await?;
        // Only the mutex holder creates a lease node while the leases are full, so a node
        // over the limit is the newest, and it is that acquirer's: not held, waiting.
        let mut waiters = Vec::new();
        if leases.len() > max {
            waiters.extend(leases.pop());
        }
        // The mutex holder is the one at the leases (drawn there, or between its steps): the
        // next in turn watches its mutex node, drawn as that acquirer's lease node.
        let at_the_leases = waiters.first().map(|t| t.node.clone());
        let mut previous: Option<String> = None;
        for (i, mut turn) in turns.into_iter().enumerate() {
            turn.watches = previous.replace(turn.node.clone());
            if i == 1 {
                turn.watches = at_the_leases.clone().or(turn.watches);
            }
            if i > 0 {
                waiters.push(turn);
            }
        }
        Ok(SemaphoreView {
            path: dir,
            max_leases: max,
            leases,
            waiters,
            instance: self.instance().to_string(),
        })
    }

    /// The product's terms lock as it stands.
    pub async fn terms_lock_view(&self, product_id: i64) -> Result<RwLockView, zk::Error> {
        let client = self.client();
        let dir = self.terms_lock_dir(product_id);
        let mut queue = rwlock::queue_order(children(&client, &dir).await?);
        queue.truncate(QUEUE_VIEW_MAX);
        let names = queue
            .iter()
            .map(|(seq, _, name)| (Some(*seq), name.clone()))
            .collect();
        let mut holders = Vec::new();
        let mut waiters = Vec::new();
        for mut ticket in tickets(&client, &dir, names).await? {
            let seq = ticket.seq.unwrap_or_default();
            ticket.access = queue.iter().find(|(s, _, _)| *s == seq).map(|(_, a, _)| *a);
            match rwlock::place(&queue, seq) {
                Place::Holder => holders.push(ticket),
                Place::After(watched) => {
                    ticket.watches = Some(watched.to_string());
                    waiters.push(ticket);
                }
                Place::Gone => {}
            }
        }
        Ok(RwLockView {
            product_id,
            path: dir,
            holders,
            waiters,
            instance: self.instance().to_string(),
        })
    }
}
