//! The seal on a flag's data: proof that an instance of this deployment raised it, bound to
//! the node itself.

use hmac::Mac;
use sha2::Digest;

/// What a flag's data starts with; the seal's version.
const SEALED: &str = "seckill-flag:v3:";

/// The data of a flag being raised: the node is made first, and sealed once ZooKeeper has
/// given it its creation zxid (`czxid`), which the seal covers. A node still pending is no
/// flag.
pub(super) const PENDING: &[u8] = b"seckill-flag:v3:pending";

/// The previous version's seals (path and time, checked against the node's `mtime`): kept
/// only to re-seal an upgraded deployment's flags.
const SEALED_V2: &str = "seckill-flag:v2:";

/// How far a v2 seal's time may be from the node's own.
const MAX_SKEW_MS: u64 = 10 * 60 * 1000;

/// The data of flags an older version raised: a public constant, so anyone able to write to
/// ZooKeeper could have made one. Kept only where `--zk-auth` closes the directory.
pub(super) const OLD_MARK: &[u8] = b"seckill-flag";

/// Seals and checks flags' data. A stranger's node named like a flag would otherwise stop a
/// product's sales on every instance, or arm a demo without the admin token.
///
/// The seal covers the node's path and its creation zxid, which ZooKeeper gives each node
/// once and never again: the data copied to another path, or into a node made again under
/// the same name (a replay), or swapped for another node's, seals nothing.
#[derive(Clone)]
pub struct Seal {
    key: [u8; 32],
}

impl Seal {
    /// The key every instance of a deployment derives alike from its secret (none: a demo).
    pub fn new(secret: Option<&str>) -> Seal {
        let mut hash = sha2::Sha256::new();
        hash.update(b"seckill flags v2\0");
        hash.update(secret.unwrap_or_default().as_bytes());
        Seal {
            key: hash.finalize().into(),
        }
    }

    fn mac(&self, text: &str) -> hmac::Hmac<sha2::Sha256> {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(text.as_bytes());
        mac
    }

    /// The data that seals the node at `path` made with creation zxid `czxid`.
    pub fn mark(&self, path: &str, czxid: i64) -> Vec<u8> {
        let mac: String = self
            .mac(&format!("{path}\n{czxid}"))
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{SEALED}{mac}").into_bytes()
    }

    /// Whether `data` is this deployment's seal for the node at `path` made at `czxid`
    /// (compared in constant time).
    pub fn verify(&self, path: &str, data: &[u8], czxid: i64) -> bool {
        let Some(given) = std::str::from_utf8(data)
            .ok()
            .and_then(|d| d.strip_prefix(SEALED))
            .and_then(unhex)
        else {
            return false;
        };
        self.mac(&format!("{path}\n{czxid}"))
            .verify_slice(&given)
            .is_ok()
    }

    /// Whether `data` is a seal of the previous version for `path`, written near the node's
    /// last change (`mtime_ms`): a flag this deployment raised before an upgrade.
    pub fn verify_v2(&self, path: &str, data: &[u8], mtime_ms: i64) -> bool {
        let Some(rest) = std::str::from_utf8(data)
            .ok()
            .and_then(|d| d.strip_prefix(SEALED_V2))
        else {
            return false;
        };
        let Some((at_ms, mac)) = rest.split_once(':') else {
            return false;
        };
        let (Ok(at_ms), Some(given)) = (at_ms.parse::<u64>(), unhex(mac)) else {
            return false;
        };
        at_ms.abs_diff(u64::try_from(mtime_ms).unwrap_or(0)) <= MAX_SKEW_MS
            && self
                .mac(&format!("{path}\n{at_ms}"))
                .verify_slice(&given)
                .is_ok()
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_holds_for_its_own_node_and_key_only() {
        let seal = Seal::new(Some("the-deployment's-secret"));
        let data = seal.mark("/seckill/soldout/42", 1001);
        assert!(seal.verify("/seckill/soldout/42", &data, 1001));
        assert!(
            !seal.verify("/seckill/soldout/43", &data, 1001),
            "copied to another product"
        );
        assert!(
            !seal.verify("/seckill/soldout/42", &data, 1002),
            "copied into a node made again under the same name"
        );
        let other = Seal::new(Some("another secret"));
        assert!(!other.verify("/seckill/soldout/42", &data, 1001));
        assert!(
            !seal.verify("/seckill/soldout/42", OLD_MARK, 1001),
            "the old public mark"
        );
        assert!(
            !seal.verify("/seckill/soldout/42", PENDING, 1001),
            "pending"
        );
        assert!(!seal.verify("/seckill/soldout/42", b"", 1001));
    }

    #[test]
    fn a_v2_seal_is_recognised_near_its_nodes_time_only() {
        let seal = Seal::new(Some("s"));
        let at_ms = 1_700_000_000_000u64;
        let mac: String = seal
            .mac(&format!("/r/soldout/1\n{at_ms}"))
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let v2 = format!("{SEALED_V2}{at_ms}:{mac}").into_bytes();
        assert!(seal.verify_v2("/r/soldout/1", &v2, at_ms as i64));
        assert!(!seal.verify_v2("/r/soldout/1", &v2, at_ms as i64 + 3_600_000));
        assert!(!seal.verify("/r/soldout/1", &v2, 5), "not a v3 seal");
    }
}
