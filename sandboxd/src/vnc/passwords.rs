//! The VNC server's passwords: one with full access, one view-only, random at every start and
//! written to a file only the sandbox user can read (x11vnc's `-passwdfile` format: the first
//! line is the full-access password, the lines after `__BEGIN_VIEWONLY__` are view-only).
//!
//! VNC authentication uses only the first 8 characters of a password (it is a DES key), so
//! each password is 8 random characters from a 64-symbol alphabet: 48 bits, offered only on
//! loopback inside the container, to a caller that must first get past sandboxd.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The two passwords. Debug output does not show them.
#[derive(Clone)]
pub struct VncPasswords {
    full: String,
    view: String,
}

impl std::fmt::Debug for VncPasswords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VncPasswords(..)")
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn random_password() -> String {
    let mut bytes = [0u8; 8];
    // getrandom only fails where the OS has no entropy source at all; a predictable password
    // would be worse than stopping.
    getrandom::fill(&mut bytes).expect("the kernel's random number generator is unavailable");
    bytes
        .iter()
        .map(|b| ALPHABET[(b & 63) as usize] as char)
        .collect()
}

impl VncPasswords {
    /// Two fresh, distinct passwords.
    pub fn generate() -> Self {
        let full = random_password();
        let mut view = random_password();
        while view == full {
            view = random_password();
        }
        Self { full, view }
    }

    pub fn full(&self) -> &str {
        &self.full
    }

    pub fn view(&self) -> &str {
        &self.view
    }

    /// Writes the password file (mode 0600), replacing any old one atomically.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let temporary = path.with_extension("tmp");
        let _ = std::fs::remove_file(&temporary);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        writeln!(file, "{}\n__BEGIN_VIEWONLY__\n{}", self.full, self.view)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn passwords_are_random_distinct_and_written_privately() {
        let a = VncPasswords::generate();
        let b = VncPasswords::generate();
        assert_ne!(a.full(), a.view());
        assert_ne!(a.full(), b.full());
        assert_eq!(a.full().len(), 8);
        assert!(!format!("{a:?}").contains(a.full()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vnc-passwords");
        a.write(&path).unwrap();
        b.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!("{}\n__BEGIN_VIEWONLY__\n{}\n", b.full(), b.view())
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
