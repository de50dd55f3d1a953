//! Who the client is. Behind a proxy every connection comes from the proxy, so the
//! per-client caps and the rate limit would put every customer in one bucket; a proxy we
//! trust (`--trusted-proxy`) tells us the client in `X-Forwarded-For` / `X-Real-IP`. From
//! anyone else those headers are the client's own words and are ignored: honouring them
//! would let one client pose as many and slip every per-client limit.

use std::net::IpAddr;

use std::convert::Infallible;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use ipnet::IpNet;

/// The client a request is counted against: the peer, or what a trusted proxy names, as a
/// key ([`client_key`]: an IPv6 client is its /64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientIp(pub IpAddr);

/// The key one client is counted under. An IPv4 client on a dual-stack socket arrives as
/// `::ffff:a.b.c.d`: one client, one key. An IPv6 host is normally given a whole /64 and
/// picks addresses in it at will: counted per address, it would be as many clients as it
/// likes, so its key is the /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(std::net::Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// As the connection layer resolved it (`http::server`); the peer where a router is served
/// without it, and the unspecified address where there is no peer at all (one bucket).
impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let extensions = &parts.extensions;
        Ok(extensions.get::<ClientIp>().copied().unwrap_or_else(|| {
            let peer = extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| client_key(addr.ip()));
            ClientIp(peer.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)))
        }))
    }
}

/// The proxies whose forwarding headers we believe.
#[derive(Clone, Debug, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies(nets)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client behind `peer`. `X-Forwarded-For` is read from the right, as each proxy
    /// appends the address it saw: the first address that is not a trusted proxy is the
    /// client (anything left of it the client could have written). Without the header,
    /// `X-Real-IP`; with neither, or a malformed one, the peer itself.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> ClientIp {
        let peer = canonical(peer);
        if !self.contains(peer) {
            return ClientIp(client_key(peer));
        }
        let forwarded: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        if !forwarded.is_empty() {
            let mut client = peer;
            for hop in forwarded.iter().rev() {
                let Ok(ip) = hop.parse::<IpAddr>() else {
                    // A hop we cannot read: stop at the last one we could.
                    break;
                };
                client = canonical(ip);
                if !self.contains(client) {
                    break;
                }
            }
            return ClientIp(client_key(client));
        }
        let real = headers
            .get("x-real-ip")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<IpAddr>().ok());
        ClientIp(client_key(real.unwrap_or(peer)))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_trusted;

    fn trusted(nets: &[&str]) -> TrustedProxies {
        TrustedProxies::new(nets.iter().map(|n| parse_trusted(n).unwrap()).collect())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let proxies = trusted(&["10.0.0.0/8"]);
        let claims = headers(&[("x-forwarded-for", "1.2.3.4"), ("x-real-ip", "5.6.7.8")]);
        assert_eq!(proxies.client(ip("192.0.2.1"), &claims).0, ip("192.0.2.1"));
        assert_eq!(
            TrustedProxies::default().client(ip("10.1.1.1"), &claims).0,
            ip("10.1.1.1")
        );
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
        let proxies = trusted(&["10.0.0.0/8", "127.0.0.2"]);
        // The client wrote 6.6.6.6 itself; 198.51.100.7 is what our first proxy saw.
        let chain = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.3")]);
        assert_eq!(
            proxies.client(ip("127.0.0.2"), &chain).0,
            ip("198.51.100.7")
        );
        // Headers repeated are one list, in order.
        let split = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.8"),
        ]);
        assert_eq!(proxies.client(ip("10.9.9.9"), &split).0, ip("198.51.100.8"));
    }

    #[test]
    fn x_real_ip_counts_only_without_x_forwarded_for_and_garbage_falls_back_to_the_peer() {
        let proxies = trusted(&["127.0.0.0/8"]);
        let real = headers(&[("x-real-ip", "203.0.113.9")]);
        assert_eq!(proxies.client(ip("127.0.0.1"), &real).0, ip("203.0.113.9"));
        let garbage = headers(&[("x-real-ip", "not an address")]);
        assert_eq!(proxies.client(ip("127.0.0.1"), &garbage).0, ip("127.0.0.1"));
        let unreadable = headers(&[("x-forwarded-for", "junk")]);
        assert_eq!(
            proxies.client(ip("127.0.0.1"), &unreadable).0,
            ip("127.0.0.1")
        );
        // Every hop a trusted proxy: the leftmost is as far as we can see.
        let all_ours = headers(&[("x-forwarded-for", "127.0.0.5, 127.0.0.6")]);
        assert_eq!(
            proxies.client(ip("127.0.0.1"), &all_ours).0,
            ip("127.0.0.5")
        );
    }

    #[test]
    fn ipv4_mapped_addresses_are_their_ipv4_client() {
        let proxies = trusted(&["127.0.0.1/32"]);
        assert!(proxies.contains(ip("::ffff:127.0.0.1")));
        assert_eq!(
            TrustedProxies::default()
                .client(ip("::ffff:192.0.2.4"), &HeaderMap::new())
                .0,
            ip("192.0.2.4")
        );
    }

    #[test]
    fn an_ipv6_client_is_its_64_and_an_ipv4_client_its_address() {
        assert_eq!(
            client_key(ip("2001:db8:1:2:aaaa::1")),
            client_key(ip("2001:db8:1:2:ffff::9")),
            "one /64, one client"
        );
        assert_ne!(
            client_key(ip("2001:db8:1:2::1")),
            client_key(ip("2001:db8:1:3::1"))
        );
        assert_eq!(client_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(client_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        let proxies = trusted(&["::1"]);
        let named = headers(&[("x-forwarded-for", "2001:db8:5:6::42")]);
        assert_eq!(proxies.client(ip("::1"), &named).0, ip("2001:db8:5:6::"));
    }

    #[test]
    fn trusted_proxies_parse_as_addresses_or_blocks() {
        assert!(parse_trusted("10.0.0.0/8").is_ok());
        assert!(parse_trusted("127.0.0.2").is_ok());
        assert!(parse_trusted("::1").is_ok());
        assert!(parse_trusted("fd00::/8").is_ok());
        assert!(parse_trusted("10.0.0.0/33").is_err());
        assert!(parse_trusted("nginx").is_err());
    }
}
