//! The orchestrator's root secret and the secrets derived from it.
//!
//! One 256-bit **master key** lives in a file outside the database (`<data-dir>/master.key`, or
//! `--master-key-file`), readable by the orchestrator's user only. From it come, by HMAC-SHA256
//! with a distinct label each:
//! - each sandbox's API key (`sbk_...`, from the sandbox id), so the database holds no sandbox
//!   key at all: a copy of the database opens no sandbox;
//! - the key that signs viewer tokens;
//! - a check value stored in the database, so an instance started with another master key
//!   refuses to start instead of issuing keys no sandbox accepts;
//! - the key that seals secrets the database must hold but not reveal (the credentials stored
//!   for remote A2A agents): XChaCha20-Poly1305, a random nonce each, bound to what they
//!   belong to, so a sealed value moved to another row does not open.
//!
//! Instances sharing a database (Postgres) must share the master key file.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Errors loading or creating the master key, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    #[error("reading the master key {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("creating the master key {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the master key {path} is not 32 bytes of base64url: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error(
        "the database was set up with another master key than {path}: start with the master key \
         file it was created with (--master-key-file), or with a new database"
    )]
    Mismatch { path: PathBuf },
}

/// The master key. Debug output does not show it.
#[derive(Clone)]
pub struct Keyring {
    master: [u8; 32],
    path: PathBuf,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyring({})", self.path.display())
    }
}

const SANDBOX_KEY_LABEL: &[u8] = b"agentbox/sandbox-api-key/v1\0";
const TOKEN_SIGNING_LABEL: &[u8] = b"agentbox/viewer-token-signing/v1";
const CHECK_LABEL: &[u8] = b"agentbox/master-key-check/v1";
const SEALING_LABEL: &[u8] = b"agentbox/secret-sealing/v1";

impl Keyring {
    /// Reads the master key from `path`, creating it (mode 0600) when it does not exist. A file
    /// readable by others is made private again, with a warning: the secrets it protects may
    /// have been read.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyringError> {
        let read_error = |source| KeyringError::Read {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::metadata(path) {
            Ok(metadata) => {
                let mode = metadata.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "the master key was readable by other users; setting mode 0600 (rotate it if others may have read it)");
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                        .map_err(read_error)?;
                }
                let text = std::fs::read_to_string(path).map_err(read_error)?;
                Self::parse(text.trim(), path)
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Self::create(path),
            Err(error) => Err(read_error(error)),
        }
    }

    fn parse(text: &str, path: &Path) -> Result<Self, KeyringError> {
        let malformed = |message: String| KeyringError::Malformed {
            path: path.to_path_buf(),
            message,
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|e| malformed(e.to_string()))?;
        let master: [u8; 32] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| malformed(format!("{} bytes", b.len())))?;
        Ok(Self {
            master,
            path: path.to_path_buf(),
        })
    }

    fn create(path: &Path) -> Result<Self, KeyringError> {
        let create_error = |source| KeyringError::Create {
            path: path.to_path_buf(),
            source,
        };
        let master = crate::secret::random_bytes::<32>();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(create_error)?;
        writeln!(file, "{}", URL_SAFE_NO_PAD.encode(master)).map_err(create_error)?;
        file.sync_all().map_err(create_error)?;
        tracing::info!(path = %path.display(), "created the master key (back it up with the database)");
        Ok(Self {
            master,
            path: path.to_path_buf(),
        })
    }

    /// A keyring from raw bytes (tests).
    pub fn from_bytes(master: [u8; 32]) -> Self {
        Self {
            master,
            path: PathBuf::from("(memory)"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn derive(&self, label: &[u8], data: &[u8]) -> [u8; 32] {
        // HMAC accepts keys of any length.
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.master).expect("HMAC takes keys of any size");
        mac.update(label);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// The API key of sandbox `sandbox_id`.
    pub fn sandbox_key(&self, sandbox_id: &str) -> String {
        format!(
            "sbk_{}",
            URL_SAFE_NO_PAD.encode(self.derive(SANDBOX_KEY_LABEL, sandbox_id.as_bytes()))
        )
    }

    /// The key viewer tokens are signed with.
    pub fn token_signing_key(&self) -> [u8; 32] {
        self.derive(TOKEN_SIGNING_LABEL, b"")
    }

    /// Seals `secret` for storage, bound to `context` (what it belongs to): base64url of
    /// nonce and ciphertext.
    pub fn seal(&self, context: &str, secret: &str) -> String {
        use chacha20poly1305::aead::{Aead, KeyInit, Payload};
        let cipher =
            chacha20poly1305::XChaCha20Poly1305::new(&self.derive(SEALING_LABEL, b"").into());
        let nonce: [u8; 24] = crate::secret::random_bytes();
        let payload = Payload {
            msg: secret.as_bytes(),
            aad: context.as_bytes(),
        };
        // Encryption fails only for messages past the cipher's limit (256 GiB).
        let sealed = cipher.encrypt(&nonce.into(), payload).unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// Opens what [`seal`](Self::seal) made for the same `context`; `None` when it was made
    /// for another context, by another master key, or altered.
    pub fn open(&self, context: &str, sealed: &str) -> Option<String> {
        use chacha20poly1305::aead::{Aead, KeyInit, Payload};
        let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        if bytes.len() < 24 {
            return None;
        }
        let (nonce, ciphertext) = bytes.split_at(24);
        let cipher =
            chacha20poly1305::XChaCha20Poly1305::new(&self.derive(SEALING_LABEL, b"").into());
        let nonce: [u8; 24] = nonce.try_into().ok()?;
        let plain = cipher
            .decrypt(
                &nonce.into(),
                Payload {
                    msg: ciphertext,
                    aad: context.as_bytes(),
                },
            )
            .ok()?;
        String::from_utf8(plain).ok()
    }

    /// A value that identifies the master key without revealing it (stored in the database).
    pub fn check_value(&self) -> String {
        hex::encode(self.derive(CHECK_LABEL, b""))
    }

    /// Compares the stored check value with this key's.
    pub fn verify_check(&self, stored: &str) -> Result<(), KeyringError> {
        use subtle::ConstantTimeEq;
        if bool::from(stored.as_bytes().ct_eq(self.check_value().as_bytes())) {
            Ok(())
        } else {
            Err(KeyringError::Mismatch {
                path: self.path.clone(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_in_their_context_under_the_same_master_key() {
        let keyring = Keyring::from_bytes([1; 32]);
        let sealed = keyring.seal("key_a|http://remote:1", "tok-secret");
        assert!(!sealed.contains("tok-secret"));
        assert_ne!(
            sealed,
            keyring.seal("key_a|http://remote:1", "tok-secret"),
            "random nonce"
        );
        assert_eq!(
            keyring.open("key_a|http://remote:1", &sealed).as_deref(),
            Some("tok-secret")
        );
        assert_eq!(keyring.open("key_b|http://remote:1", &sealed), None);
        assert_eq!(
            Keyring::from_bytes([2; 32]).open("key_a|http://remote:1", &sealed),
            None
        );
        let mut altered = sealed.into_bytes();
        let last = altered.len() - 2;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            keyring.open(
                "key_a|http://remote:1",
                &String::from_utf8(altered).unwrap()
            ),
            None
        );
    }

    #[test]
    fn keys_are_derived_per_sandbox_and_stable_across_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let first = Keyring::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = Keyring::load_or_create(&path).unwrap();
        assert_eq!(first.sandbox_key("sbx-a"), again.sandbox_key("sbx-a"));
        assert_ne!(first.sandbox_key("sbx-a"), first.sandbox_key("sbx-b"));
        assert!(first.sandbox_key("sbx-a").starts_with("sbk_"));
        assert_ne!(first.token_signing_key(), first.master);
        assert!(again.verify_check(&first.check_value()).is_ok());
        let other = Keyring::from_bytes([7; 32]);
        assert!(matches!(
            other.verify_check(&first.check_value()),
            Err(KeyringError::Mismatch { .. })
        ));
        assert_ne!(other.sandbox_key("sbx-a"), first.sandbox_key("sbx-a"));
        assert!(!format!("{first:?}").contains(&URL_SAFE_NO_PAD.encode(first.master)));
    }

    #[test]
    fn a_readable_key_file_is_made_private_and_a_bad_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        std::fs::write(&path, format!("{}\n", URL_SAFE_NO_PAD.encode([1u8; 32]))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Keyring::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::write(&path, "short").unwrap();
        assert!(matches!(
            Keyring::load_or_create(&path),
            Err(KeyringError::Malformed { .. })
        ));
    }
}
