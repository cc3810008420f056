//! Where a request's identity comes from: the policy's `identity` section as validated.

use std::net::IpAddr;

use super::hash::IdentityHash;

/// Where a request's identity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Header naming the user, if the policy keys anything by user.
    pub user: Option<String>,
    pub tenant: Option<String>,
    /// Header naming the caller's plan (section 8.1).
    pub plan: Option<String>,
    pub trusted_proxies: Vec<IpNet>,
    /// `${ip}` is the caller's network of these many bits (section 8.5): 32 and 64 unless the
    /// policy says otherwise, since one IPv6 host owns a /64.
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// `identity.hash`: identities enter keys as their keyed hash, never raw.
    pub hash: Option<IdentityHash>,
}

impl Identity {
    /// Whether a peer address is a trusted proxy, whose forwarding header may name the client.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(peer))
    }
}

/// An address or a CIDR block (`10.0.0.0/8`, `::1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    pub(crate) fn parse(text: &str) -> Option<IpNet> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a.parse::<IpAddr>().ok()?, Some(p.parse::<u8>().ok()?)),
            None => (text.parse::<IpAddr>().ok()?, None),
        };
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(bits);
        if prefix > bits {
            return None;
        }
        // Addresses are compared as IPv4 when they map one (`::ffff:10.0.0.1`), so a block
        // written in the mapped form is the IPv4 block it maps.
        match addr.to_canonical() {
            IpAddr::V4(v4) if addr.is_ipv6() && prefix >= 96 => Some(IpNet {
                addr: IpAddr::V4(v4),
                prefix: prefix - 96,
            }),
            _ => Some(IpNet { addr, prefix }),
        }
    }

    pub fn contains(&self, peer: IpAddr) -> bool {
        let (net, peer, bits) = match (self.addr, peer) {
            (IpAddr::V4(n), IpAddr::V4(p)) => {
                (u128::from(u32::from(n)), u128::from(u32::from(p)), 32u32)
            }
            (IpAddr::V6(n), IpAddr::V6(p)) => (u128::from(n), u128::from(p), 128u32),
            _ => return false,
        };
        let host_bits = bits.saturating_sub(u32::from(self.prefix));
        // A /0 has every host bit free; shifting a u128 by 128 would overflow.
        let shift = |v: u128| v.checked_shr(host_bits).unwrap_or(0);
        shift(net) == shift(peer)
    }
}
