//! The seal on a flag's data: proof that an instance of this deployment raised it.

use hmac::Mac;
use sha2::Digest;

/// What a flag's data starts with; the seal's version.
const SEALED: &str = "seckill-flag:v2:";

/// How far a seal's time may be from the node's own (ZooKeeper's `mtime`): clocks drift, but
/// an old seal copied into a node made later (replayed) is refused.
const MAX_SKEW_MS: u64 = 10 * 60 * 1000;

/// The data of flags an older version raised: a public constant, so anyone able to write to
/// ZooKeeper could have made one. Kept only where `--zk-auth` closes the directory.
pub(super) const OLD_MARK: &[u8] = b"seckill-flag";

/// Seals and checks flags' data. A stranger's node named like a flag would otherwise stop a
/// product's sales on every instance, or arm a demo without the admin token.
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

    /// The MAC of a flag at `path` raised at `at_ms`, ready to finish or to check.
    fn mac(&self, path: &str, at_ms: u64) -> hmac::Hmac<sha2::Sha256> {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(format!("{path}\n{at_ms}").as_bytes());
        mac
    }

    /// The data of a flag raised at `path` now.
    pub fn mark(&self, path: &str) -> Vec<u8> {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mac: String = self
            .mac(path, at_ms)
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{SEALED}{at_ms}:{mac}").into_bytes()
    }

    /// Whether `data` is a seal this deployment made for `path` (compared in constant time),
    /// written when the node was (`mtime_ms`, ZooKeeper's time of the node's last change).
    pub fn verify(&self, path: &str, data: &[u8], mtime_ms: i64) -> bool {
        let Some(rest) = std::str::from_utf8(data)
            .ok()
            .and_then(|d| d.strip_prefix(SEALED))
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
            && self.mac(path, at_ms).verify_slice(&given).is_ok()
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
    fn a_seal_holds_for_its_own_path_key_and_time_only() {
        let seal = Seal::new(Some("the-deployment's-secret"));
        let data = seal.mark("/seckill/soldout/42");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!(seal.verify("/seckill/soldout/42", &data, now));
        assert!(
            !seal.verify("/seckill/soldout/43", &data, now),
            "copied to another product"
        );
        assert!(
            !seal.verify("/seckill/soldout/42", &data, now + 3_600_000),
            "replayed into a node made an hour later"
        );
        let other = Seal::new(Some("another secret"));
        assert!(!other.verify("/seckill/soldout/42", &data, now));
        assert!(
            !seal.verify("/seckill/soldout/42", OLD_MARK, now),
            "the old public mark"
        );
        assert!(!seal.verify("/seckill/soldout/42", b"seckill-flag:v2:1:00", 1));
        assert!(!seal.verify("/seckill/soldout/42", b"", now));
    }
}
