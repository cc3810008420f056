//! Who the caller is: the request's headers as the engine reads them, and the address behind
//! trusted proxies.

use std::net::IpAddr;

use crate::policy::Identity;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn identity(trusted: &[&str]) -> Identity {
        let policy = Policy::from_json(&format!(
            r#"{{"version": 1, "identity": {{"trusted_proxies": {}}},
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
