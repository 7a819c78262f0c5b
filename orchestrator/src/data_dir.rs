//! The data directory's permissions: it holds the database (API key hashes, token rows,
//! sandbox records) and the master key, so it is the orchestrator user's alone.
//!
//! At start the process umask becomes 0077 (so the database's journal files and anything else
//! created later are private too), the directory is created with mode 0700, and an existing
//! directory or file that others can read is made private again, with a warning.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Errors preparing the data directory, naming the path.
#[derive(Debug, thiserror::Error)]
#[error("preparing the data directory {path}: {source}")]
pub struct DataDirError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

/// Sets the umask and makes `dir` (and the files directly in it) private.
pub fn prepare(dir: &Path) -> Result<(), DataDirError> {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let error = |path: &Path| {
        let path = path.display().to_string();
        move |source| DataDirError { path, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(error(dir))?;
    make_private(dir, 0o700).map_err(error(dir))?;
    for entry in std::fs::read_dir(dir).map_err(error(dir))? {
        let entry = entry.map_err(error(dir))?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(error(&path))?;
        if file_type.is_file() {
            make_private(&path, 0o600).map_err(error(&path))?;
        }
    }
    Ok(())
}

/// Removes group and other permissions from `path` if it has any.
fn make_private(path: &Path, mode: u32) -> std::io::Result<()> {
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current & 0o077 != 0 {
        tracing::warn!(path = %path.display(), mode = format!("{current:o}"), "readable by other users; making it private");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wider_modes_are_fixed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let db = dir.join("orchestrator.db");
        std::fs::write(&db, b"x").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        prepare(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&db), 0o600);
        let fresh = root.path().join("fresh/nested");
        prepare(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);
        std::fs::write(fresh.join("later"), b"y").unwrap();
        assert_eq!(mode(&fresh.join("later")), 0o600, "umask 0077");
    }
}
