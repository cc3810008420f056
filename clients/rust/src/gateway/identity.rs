//! Who the caller is: the address behind trusted proxies.

use std::net::IpAddr;

use http::HeaderMap;

use crate::policy::Identity;

/// The caller's address: the peer, unless the peer is a trusted proxy; then `X-Forwarded-For`
/// is read from the right, skipping trusted proxies, and the first untrusted hop is the client
/// (entries left of it were written by the caller and prove nothing).
pub fn client_ip(identity: &Identity, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<IpAddr> {
    let mut client = peer?;
    if !identity.trusts(client) {
        return Some(client);
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.iter().rev() {
        // A malformed hop ends the chain: nothing left of it can be trusted.
        let Ok(ip) = hop.parse::<IpAddr>() else {
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

    fn xff(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", value.parse().unwrap());
        h
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
        assert_eq!(
            client_ip(
                &proxies,
                &xff("1.1.1.1, 2.2.2.2, 127.0.0.9"),
                Some(ip("127.0.0.5"))
            ),
            Some(ip("2.2.2.2"))
        );
        // A malformed hop stops the walk at the last address read.
        assert_eq!(
            client_ip(
                &proxies,
                &xff("1.1.1.1, junk, 127.0.0.9"),
                Some(ip("127.0.0.5"))
            ),
            Some(ip("127.0.0.9"))
        );
        assert_eq!(client_ip(&proxies, &HeaderMap::new(), None), None);
    }
}
