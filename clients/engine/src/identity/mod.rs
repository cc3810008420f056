//! Who the caller is: the request's headers as the engine reads them, and the address behind
//! trusted proxies; where the policy says identities come from (`source`), and the keyed hash
//! they enter keys as (`hash`).

mod hash;
mod source;

pub use hash::{IdentityHash, MIN_HASH_KEY};
pub use source::{Identity, IpNet};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A request's headers as the engine reads them; each driver adapts its framework's map. Names
/// are asked in lower case; values are the bytes received.
pub trait Headers {
    /// The first value of the header, if any.
    fn first(&self, name: &str) -> Option<&[u8]>;

    /// Every value of the header, in the order received.
    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8]));
}

/// Headers as pairs (name, value), names in any case: what a binding or a test hands over.
impl<N: AsRef<str>, V: AsRef<[u8]>> Headers for [(N, V)] {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        for (n, v) in self {
            if n.as_ref().eq_ignore_ascii_case(name) {
                f(v.as_ref());
            }
        }
    }
}

impl<N: AsRef<str>, V: AsRef<[u8]>> Headers for Vec<(N, V)> {
    fn first(&self, name: &str) -> Option<&[u8]> {
        Headers::first(self.as_slice(), name)
    }

    fn each(&self, name: &str, f: &mut dyn FnMut(&[u8])) {
        Headers::each(self.as_slice(), name, f)
    }
}

pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// The caller's address: the peer, unless the peer is a trusted proxy; then `X-Forwarded-For`
/// is read from the right, skipping trusted proxies, and the first untrusted hop is the client
/// (entries left of it were written by the caller and prove nothing). An IPv4-mapped IPv6
/// address (`::ffff:10.0.0.1`, the peer of a dual-stack socket) is the IPv4 address it maps:
/// trusted by that address's entries and keyed as it, whichever socket the client came on.
pub fn client_ip(
    identity: &Identity,
    headers: &dyn Headers,
    peer: Option<IpAddr>,
) -> Option<IpAddr> {
    let mut client = peer?.to_canonical();
    if !identity.trusts(client) {
        return Some(client);
    }
    let mut hops: Vec<Option<IpAddr>> = Vec::new();
    headers.each(FORWARDED_FOR, &mut |value| {
        let text = std::str::from_utf8(value).ok();
        match text {
            Some(text) => hops.extend(
                text.split(',')
                    .map(|h| h.trim().parse::<IpAddr>().ok().map(|ip| ip.to_canonical())),
            ),
            None => hops.push(None),
        }
    });
    for hop in hops.iter().rev() {
        // A malformed hop ends the chain: nothing left of it can be trusted.
        let Some(ip) = *hop else {
            break;
        };
        client = ip;
        if !identity.trusts(ip) {
            break;
        }
    }
    Some(client)
}

/// The caller's network as `${ip}` renders it (section 8.5): the address's first
/// `ipv4_prefix` or `ipv6_prefix` bits in CIDR form (`203.0.113.0/24`, `2001:db8:0:1::/64`),
/// and a full-length prefix as the bare address, which is the network it names (and the key
/// `${ip}` gave before prefixes existed).
pub fn network(identity: &Identity, ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) if identity.ipv4_prefix < 32 => {
            let p = u32::from(identity.ipv4_prefix);
            let mask = u32::MAX.checked_shl(32 - p).unwrap_or(0);
            format!("{}/{p}", Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) if identity.ipv6_prefix < 128 => {
            let p = u32::from(identity.ipv6_prefix);
            let mask = u128::MAX.checked_shl(128 - p).unwrap_or(0);
            format!("{}/{p}", Ipv6Addr::from(u128::from(v6) & mask))
        }
        ip => ip.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn identity(trusted: &[&str]) -> Identity {
        let policy = Policy::from_json(&format!(
            r#"{{"version": 1, "default": {{"rules": []}}, "identity": {{"trusted_proxies": {}}},
                "rules": {{"r": {{"key": "k", "limit": 1, "period": "1s"}}}},
                "routes": [{{"method": "GET", "path": "/", "rules": ["r"]}}]}}"#,
            serde_json::to_string(trusted).unwrap()
        ))
        .unwrap();
        policy.identity
    }

    fn xff(value: &str) -> Vec<(&'static str, Vec<u8>)> {
        vec![("X-Forwarded-For", value.as_bytes().to_vec())]
    }

    #[test]
    fn networks_are_rendered_in_cidr_form() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut id = identity(&[]);
        assert_eq!(network(&id, ip("203.0.113.77")), "203.0.113.77");
        assert_eq!(
            network(&id, ip("2001:db8:0:1:aa:bb:cc:dd")),
            "2001:db8:0:1::/64"
        );
        id.ipv4_prefix = 24;
        id.ipv6_prefix = 48;
        assert_eq!(network(&id, ip("203.0.113.77")), "203.0.113.0/24");
        assert_eq!(network(&id, ip("2001:db8:7:1::dd")), "2001:db8:7::/48");
        id.ipv4_prefix = 0;
        id.ipv6_prefix = 0;
        assert_eq!(network(&id, ip("203.0.113.77")), "0.0.0.0/0");
        assert_eq!(network(&id, ip("2001:db8::1")), "::/0");
        id.ipv6_prefix = 128;
        assert_eq!(network(&id, ip("2001:db8::1")), "2001:db8::1");
    }

    #[test]
    fn forwarded_for_is_read_only_from_trusted_proxies() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let none = identity(&[]);
        // An untrusted peer cannot name someone else.
        assert_eq!(
            client_ip(&none, &xff("9.9.9.9"), Some(ip("127.0.0.5"))),
            Some(ip("127.0.0.5"))
        );
        let proxies = identity(&["127.0.0.0/8"]);
        let walk = |v: &str| client_ip(&proxies, &xff(v), Some(ip("127.0.0.5")));
        assert_eq!(walk("1.1.1.1, 2.2.2.2, 127.0.0.9"), Some(ip("2.2.2.2")));
        // A malformed hop stops the walk at the last address read.
        assert_eq!(walk("1.1.1.1, junk, 127.0.0.9"), Some(ip("127.0.0.9")));
        let empty: Vec<(&str, Vec<u8>)> = Vec::new();
        assert_eq!(client_ip(&proxies, &empty, None), None);
        // An IPv4-mapped peer or hop is its IPv4 address.
        let mapped = identity(&["10.0.0.1"]);
        assert_eq!(
            client_ip(&mapped, &xff("::ffff:2.2.2.2"), Some(ip("::ffff:10.0.0.1"))),
            Some(ip("2.2.2.2"))
        );
        // An entry in the mapped form is the IPv4 address or block it maps.
        let written_mapped = identity(&["::ffff:10.0.0.0/104"]);
        assert_eq!(
            client_ip(&written_mapped, &xff("2.2.2.2"), Some(ip("10.9.9.9"))),
            Some(ip("2.2.2.2"))
        );
        // Two header lines are one list, in order.
        let two = vec![
            ("x-forwarded-for", "1.1.1.1"),
            ("X-Forwarded-For", "2.2.2.2"),
        ];
        assert_eq!(
            client_ip(&proxies, &two, Some(ip("127.0.0.5"))),
            Some(ip("2.2.2.2"))
        );
    }
}
