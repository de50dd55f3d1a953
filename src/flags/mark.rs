//! What a node among the flags is, read from ZooKeeper: one of ours (sealed for itself),
//! one being raised (its seal follows), or someone else's; and the seal written on a node
//! being raised.

use zookeeper_client as zk;

use super::seal::{OLD_MARK, PENDING};
use super::Inner;
use crate::telemetry::metrics;

/// What a node among the flags is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mark {
    /// One of our flags: sealed for itself.
    Ours,
    /// Being raised: its seal follows (and a data-change event with it).
    Pending,
    /// Someone else's: it flags nothing.
    Stranger,
}

/// Seals the pending node at `path` (as `stat` saw it) for itself: `true` once it carries our
/// seal, `false` if its data changed to something else meanwhile.
pub(super) async fn seal_pending(
    client: &zk::Client,
    path: &str,
    inner: &Inner,
    stat: zk::Stat,
) -> Result<bool, zk::Error> {
    metrics::zk("set_data");
    let mark = inner.seal.mark(path, stat.czxid);
    match client.set_data(path, &mark, Some(stat.version)).await {
        Ok(_) => Ok(true),
        // Gone since: raised again by the caller's retry.
        Err(zk::Error::NoNode) => Err(zk::Error::ConnectionLoss),
        // Changed since: sealed by another instance, or not a flag.
        Err(zk::Error::BadVersion) => match read_mark(client, path, inner).await? {
            Some(Mark::Ours) => Ok(true),
            Some(Mark::Stranger) => Ok(false),
            Some(Mark::Pending) | None => Err(zk::Error::ConnectionLoss),
        },
        Err(e) => Err(e),
    }
}

/// What the node at `path` is (`None`: there is no node).
///
/// A flag raised by an older version has no data, the old public mark, or the previous
/// version's seal. One sealed by the previous version is ours (its seal says so): it gets
/// today's seal now. Under `--zk-auth` nobody without our credentials can have made a node
/// here, so one with no data or the old mark and a closed ACL is ours from an older version
/// too. Without auth there is no telling, and it is left out. (An upgrade keeps its flags,
/// and they can be lowered.)
pub(super) async fn read_mark(
    client: &zk::Client,
    path: &str,
    inner: &Inner,
) -> Result<Option<Mark>, zk::Error> {
    let (acls, seal) = (inner.zk.acls(), &inner.seal);
    metrics::zk("get_data");
    let (data, stat) = match client.get_data(path).await {
        Ok(found) => found,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(e),
    };
    if seal.verify(path, &data, stat.czxid) {
        return Ok(Some(Mark::Ours));
    }
    if data == PENDING {
        return Ok(Some(Mark::Pending));
    }
    let older = seal.verify_v2(path, &data, stat.mtime);
    if !older {
        if !(data.is_empty() || data == OLD_MARK) || acls != zk::Acls::creator_all() {
            return Ok(Some(Mark::Stranger));
        }
        metrics::zk("get_acl");
        match client.get_acl(path).await {
            Ok((acl, _)) if acl.iter().any(|entry| entry.scheme() == "world") => {
                return Ok(Some(Mark::Stranger))
            }
            Ok(_) => {}
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    metrics::zk("set_data");
    match client
        .set_data(path, &seal.mark(path, stat.czxid), Some(stat.version))
        .await
    {
        Ok(_) => Ok(Some(Mark::Ours)),
        Err(zk::Error::NoNode) => Ok(None),
        // Changed since we read it: another instance marked it first, or it is not a flag.
        Err(zk::Error::BadVersion) => {
            metrics::zk("get_data");
            match client.get_data(path).await {
                Ok((data, stat)) if seal.verify(path, &data, stat.czxid) => Ok(Some(Mark::Ours)),
                Ok((data, _)) if data == PENDING => Ok(Some(Mark::Pending)),
                Ok(_) => Ok(Some(Mark::Stranger)),
                Err(zk::Error::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}
