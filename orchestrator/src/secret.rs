//! Random secrets, identifiers and hashes.
//!
//! Every secret (API keys, per-sandbox keys, signing keys) is 32 bytes from the kernel's CSPRNG,
//! written as unpadded base64url. Identifiers are shorter and lowercase so they read well in
//! URLs and container names.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// `n` random bytes from the kernel.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // getrandom only fails where the OS has no entropy source at all; nothing sensible can run
    // there, and a predictable secret would be worse than stopping.
    getrandom::fill(&mut bytes).expect("the kernel's random number generator is unavailable");
    bytes
}

/// A 256-bit secret as base64url, with a readable prefix (`abk_` for API keys, ...).
pub fn new_secret(prefix: &str) -> String {
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(random_bytes::<32>()))
}

/// A lowercase identifier: `prefix` + 20 base32 characters (100 bits).
pub fn new_id(prefix: &str) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let bytes = random_bytes::<20>();
    let mut id = String::with_capacity(prefix.len() + 20);
    id.push_str(prefix);
    for byte in bytes {
        id.push(ALPHABET[(byte & 31) as usize] as char);
    }
    id
}

/// Hex SHA-256 of a secret, as stored in the database.
pub fn sha256_hex(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_ids_are_distinct_and_well_formed() {
        let a = new_secret("abk_");
        let b = new_secret("abk_");
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + 43);
        let id = new_id("sbx-");
        assert_eq!(id.len(), 24);
        assert!(
            id[4..]
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_eq!(sha256_hex("abc").len(), 64);
    }
}
