//! The keyed hash identities enter keys as, when the policy asks for it.

use std::fmt::{self, Write as _};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// `identity.hash` (section 8.5): each identity enters keys as the first 16 hex digits of
/// HMAC-SHA256 under a secret key, so neither the store nor anything that prints keys holds a
/// raw identity, and nobody without the key can tell whose key is whose. 64 bits keep keys short
/// while two identities share one only once in about 2^32 identities of one rule.
#[derive(Clone)]
pub struct IdentityHash {
    /// The environment variable the key was read from, and the hash of nothing under the key:
    /// what two policies compare, never the key itself.
    key_env: String,
    fingerprint: String,
    // Keyed once: each use clones the state with the key already absorbed.
    mac: Hmac<Sha256>,
}

/// The shortest key accepted: a shorter one is guessable, and with it every identity.
pub const MIN_HASH_KEY: usize = 16;

impl IdentityHash {
    /// A key of at least [`MIN_HASH_KEY`] bytes, named by the variable it came from.
    pub fn new(key_env: &str, key: &[u8]) -> Option<IdentityHash> {
        if key.len() < MIN_HASH_KEY {
            return None;
        }
        let mut hash = IdentityHash {
            key_env: key_env.to_string(),
            fingerprint: String::new(),
            mac: <Hmac<Sha256> as Mac>::new_from_slice(key).ok()?,
        };
        let mut fingerprint = String::with_capacity(16);
        hash.write(b"", &mut fingerprint);
        hash.fingerprint = fingerprint;
        Some(hash)
    }

    /// Appends the hash of `value` to `out`, as 16 lower-case hex digits.
    pub fn write(&self, value: &[u8], out: &mut String) {
        let mut mac = self.mac.clone();
        mac.update(value);
        for b in mac.finalize().into_bytes().iter().take(8) {
            let _ = write!(out, "{b:02x}");
        }
    }
}

impl fmt::Debug for IdentityHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityHash")
            .field("key_env", &self.key_env)
            .finish_non_exhaustive()
    }
}

impl PartialEq for IdentityHash {
    fn eq(&self, other: &IdentityHash) -> bool {
        self.key_env == other.key_env && self.fingerprint == other.fingerprint
    }
}

impl Eq for IdentityHash {}
