//! Where a run's artifacts (files the agent saved under `~/outputs`, each step's screenshot)
//! are kept after the sandbox is gone: [`ArtifactStore`], with [`FsArtifacts`], a folder under
//! the data directory. An S3-compatible store would implement the same trait.
//!
//! Names are relative paths (`outputs/report.pdf`, `screenshots/obs-1.png`) made only of
//! safe segments ([`artifact_name`]); sizes are bounded by the caller ([`MAX_ARTIFACT_BYTES`]).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;

/// Largest single artifact.
pub const MAX_ARTIFACT_BYTES: u64 = 64 * 1024 * 1024;
/// Most files copied from `~/outputs` per run.
pub const MAX_OUTPUT_FILES: usize = 200;
/// Longest artifact name.
const MAX_NAME_CHARS: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("artifact name {0:?} is not a safe relative path")]
    BadName(String),
    #[error("artifact {name}: {size} bytes is over the limit of {MAX_ARTIFACT_BYTES}")]
    TooLarge { name: String, size: u64 },
    #[error("artifact store ({what}) at {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Keeps artifact bytes.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Stores (or replaces) `name` of `run_id`.
    async fn put(&self, run_id: &str, name: &str, bytes: Bytes) -> Result<(), ArtifactError>;
    /// The bytes, `None` when there are none.
    async fn get(&self, run_id: &str, name: &str) -> Result<Option<Bytes>, ArtifactError>;
    /// Removes every artifact of `run_id` (none is fine).
    async fn remove_run(&self, run_id: &str) -> Result<(), ArtifactError>;
}

/// Artifacts as files: `<root>/<run id>/<name>`.
#[derive(Debug, Clone)]
pub struct FsArtifacts {
    root: PathBuf,
}

impl FsArtifacts {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, run_id: &str, name: &str) -> Result<PathBuf, ArtifactError> {
        if !is_safe_segment(run_id) || artifact_name(name).as_deref() != Some(name) {
            return Err(ArtifactError::BadName(format!("{run_id}/{name}")));
        }
        Ok(self.root.join(run_id).join(name))
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ArtifactError + 'a {
    move |source| ArtifactError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

#[async_trait]
impl ArtifactStore for FsArtifacts {
    async fn put(&self, run_id: &str, name: &str, bytes: Bytes) -> Result<(), ArtifactError> {
        let size = bytes.len() as u64;
        if size > MAX_ARTIFACT_BYTES {
            return Err(ArtifactError::TooLarge {
                name: name.to_string(),
                size,
            });
        }
        let path = self.path(run_id, name)?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(io("create directory", parent))?;
        }
        // Written aside and renamed, so a reader never sees half a file.
        let partial = path.with_extension("partial~");
        tokio::fs::write(&partial, &bytes)
            .await
            .map_err(io("write", &partial))?;
        tokio::fs::rename(&partial, &path)
            .await
            .map_err(io("rename", &path))?;
        Ok(())
    }

    async fn get(&self, run_id: &str, name: &str) -> Result<Option<Bytes>, ArtifactError> {
        let path = self.path(run_id, name)?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(Some(Bytes::from(bytes))),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io("read", &path)(error)),
        }
    }

    async fn remove_run(&self, run_id: &str) -> Result<(), ArtifactError> {
        if !is_safe_segment(run_id) {
            return Err(ArtifactError::BadName(run_id.to_string()));
        }
        let path = self.root.join(run_id);
        match tokio::fs::remove_dir_all(&path).await {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(io("remove", &path)(error)),
        }
    }
}

/// A segment that is safe as a file name: letters, digits, `.`, `_`, `-`, not starting with a
/// dot, at most 100 characters.
fn is_safe_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment.len() <= 100
        && !segment.starts_with('.')
        && segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The sanitised form of a relative path: each segment's unsafe characters become `_`, a
/// leading dot becomes `_`, empty, `.` and `..` segments are refused. `None` when nothing safe
/// is left or it is too long.
pub fn artifact_name(raw: &str) -> Option<String> {
    let mut segments = Vec::new();
    for segment in raw.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return None;
        }
        let mut clean: String = segment
            .chars()
            .take(100)
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if clean.starts_with('.') {
            clean.replace_range(0..1, "_");
        }
        segments.push(clean);
    }
    let name = segments.join("/");
    (!name.is_empty() && name.len() <= MAX_NAME_CHARS).then_some(name)
}

/// The record of `bytes` kept as `name` of run `run_id`: its size and SHA-256 computed here.
pub fn describe(
    run_id: &str,
    name: &str,
    kind: &str,
    content_type: &str,
    bytes: &[u8],
    created_at: i64,
) -> crate::db::ArtifactRecord {
    use sha2::{Digest, Sha256};
    crate::db::ArtifactRecord {
        run_id: run_id.to_string(),
        name: name.to_string(),
        kind: kind.to_string(),
        size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
        content_type: content_type.to_string(),
        sha256: hex::encode(Sha256::digest(bytes)),
        created_at,
    }
}

/// What an artifact's bytes are, judged by their first bytes only: the image types a browser
/// may show inline, everything else a download.
pub fn sniff_content_type(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        "image/jpeg"
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        "image/gif"
    } else if bytes.len() >= 12 && &bytes[0..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        "image/webp"
    } else {
        "application/octet-stream"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_or_refused() {
        assert_eq!(
            artifact_name("outputs/red-triangle.png").as_deref(),
            Some("outputs/red-triangle.png")
        );
        assert_eq!(
            artifact_name("outputs/a b<script>.html").as_deref(),
            Some("outputs/a_b_script_.html")
        );
        assert_eq!(
            artifact_name("outputs/.bashrc").as_deref(),
            Some("outputs/_bashrc")
        );
        for bad in [
            "",
            "/etc/passwd",
            "outputs/../../x",
            "a//b",
            "./a",
            "outputs/",
        ] {
            assert_eq!(artifact_name(bad), None, "{bad:?}");
        }
        assert_eq!(artifact_name(&"a/".repeat(150)), None);
    }

    #[tokio::test]
    async fn store_round_trips_and_confines() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = FsArtifacts::new(dir.path());
        store
            .put("run_1", "outputs/x.png", Bytes::from_static(b"abc"))
            .await
            .expect("put");
        assert_eq!(
            store.get("run_1", "outputs/x.png").await.expect("get"),
            Some(Bytes::from_static(b"abc"))
        );
        assert_eq!(
            store.get("run_1", "outputs/y.png").await.expect("get"),
            None
        );
        assert!(matches!(
            store.get("run_1", "../run_2/outputs/x.png").await,
            Err(ArtifactError::BadName(_))
        ));
        assert!(matches!(
            store.get("../x", "outputs/x.png").await,
            Err(ArtifactError::BadName(_))
        ));
    }

    #[test]
    fn only_images_are_inline() {
        assert_eq!(sniff_content_type(b"\x89PNG\r\n\x1a\nrest"), "image/png");
        assert_eq!(
            sniff_content_type(b"<svg xmlns='http://www.w3.org/2000/svg'>"),
            "application/octet-stream"
        );
        assert_eq!(sniff_content_type(b"<html>"), "application/octet-stream");
    }
}
