//! Whole-file transfers. Uploads stream into a hidden temporary file next to the destination,
//! counting bytes against the upload limit, and are renamed into place only when complete: an
//! upload that fails or goes past the limit leaves nothing behind. Downloads hand out an open
//! regular file.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::{ConfineError, FileError, Files, LimitKind};

/// The name given to an upload that arrives without a usable file name.
pub const DEFAULT_UPLOAD_NAME: &str = "upload";

static UPLOAD_COUNTER: AtomicU64 = AtomicU64::new(0);

/// An upload in progress. Dropping it before [`Upload::finish`] removes the temporary file.
#[derive(Debug)]
pub struct Upload {
    dir: OwnedFd,
    temp: OsString,
    name: OsString,
    file: Option<std::fs::File>,
    path: PathBuf,
    written: u64,
    limit: u64,
}

#[derive(Debug, Clone)]
pub struct UploadOutcome {
    pub path: PathBuf,
    pub size: u64,
}

/// A file ready to be streamed out.
#[derive(Debug)]
pub struct Download {
    pub file: std::fs::File,
    pub path: PathBuf,
    pub size: u64,
}

impl Files {
    /// Prepares an upload. `path` is the destination file, or a directory (existing, or written
    /// with a trailing `/`) to put `filename` in; without `path`, the file goes to the workspace
    /// under `filename`. The file name is reduced to its last component, without control
    /// characters.
    pub fn begin_upload(
        &self,
        path: Option<&OsStr>,
        filename: Option<&str>,
    ) -> Result<Upload, FileError> {
        let name = sanitize_file_name(filename.unwrap_or(DEFAULT_UPLOAD_NAME));
        let target: PathBuf = match path {
            None => self.confine.workspace().join(&name),
            Some(path) => {
                let absolute = self.confine.absolute(path)?;
                let names_a_dir = path.as_encoded_bytes().ends_with(b"/")
                    || self
                        .confine
                        .resolve(path)
                        .is_ok_and(|r| r.exists() && self.open_directory(&r).is_ok());
                if names_a_dir {
                    absolute.join(&name)
                } else {
                    absolute
                }
            }
        };
        let r = self.confine.resolve(target.as_os_str())?;
        if r.exists() && self.open_directory(&r).is_ok() {
            return Err(ConfineError::IsADirectory { path: r.requested }.into());
        }
        self.confine.create_parent_dirs(&r)?;
        let (dir, name) = self.confine.open_parent(&r)?;
        let temp = OsString::from(format!(
            ".upload-{}-{}.part",
            std::process::id(),
            UPLOAD_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let fd = openat(
            &dir,
            temp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )
        .map_err(|errno| FileError::Io {
            op: "creating the upload file next to",
            path: r.requested.clone(),
            source: errno.into(),
        })?;
        Ok(Upload {
            dir,
            temp,
            name,
            file: Some(std::fs::File::from(fd)),
            path: r.requested,
            written: 0,
            limit: self.limits.max_upload_bytes,
        })
    }

    /// Creates (or empties) a regular file for a program to write into, creating its missing
    /// parent directories; the file is opened through the confinement like every other.
    pub fn create_output(&self, path: &OsStr) -> Result<Download, FileError> {
        let r = self.confine.resolve(path)?;
        if r.is_root() || (r.exists() && self.open_directory(&r).is_ok()) {
            return Err(ConfineError::IsADirectory { path: r.requested }.into());
        }
        self.confine.create_parent_dirs(&r)?;
        let fd = self.confine.open(
            &r,
            OFlag::O_WRONLY
                | OFlag::O_CREAT
                | OFlag::O_TRUNC
                | OFlag::O_NONBLOCK
                | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )?;
        let file = std::fs::File::from(fd);
        let meta = file
            .metadata()
            .map_err(FileError::io("inspecting", &r.requested))?;
        if !meta.is_file() {
            return Err(FileError::NotAFile { path: r.requested });
        }
        Ok(Download {
            file,
            path: r.requested,
            size: 0,
        })
    }

    /// Opens a regular file for download.
    pub fn open_download(&self, path: &OsStr) -> Result<Download, FileError> {
        let r = self.confine.resolve(path)?;
        let file = self.open_regular(&r)?;
        let size = file
            .metadata()
            .map_err(FileError::io("inspecting", &r.requested))?
            .len();
        Ok(Download {
            file,
            path: r.requested,
            size,
        })
    }
}

impl Upload {
    /// Where the upload will land.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Appends a chunk; fails (and the upload should be dropped) past the limit.
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), FileError> {
        let total = self.written.saturating_add(chunk.len() as u64);
        if total > self.limit {
            return Err(FileError::TooLarge {
                kind: LimitKind::Upload,
                path: self.path.clone(),
                size: None,
                limit: self.limit,
            });
        }
        let file = self.file.as_mut().ok_or_else(|| FileError::Io {
            op: "writing",
            path: self.path.clone(),
            source: std::io::Error::other("the upload is already finished"),
        })?;
        file.write_all(chunk)
            .map_err(FileError::io("writing", &self.path))?;
        self.written = total;
        Ok(())
    }

    /// Moves the complete file into place.
    pub fn finish(mut self) -> Result<UploadOutcome, FileError> {
        if let Some(file) = self.file.take() {
            file.sync_data()
                .map_err(FileError::io("writing", &self.path))?;
        }
        renameat(
            &self.dir,
            self.temp.as_os_str(),
            &self.dir,
            self.name.as_os_str(),
        )
        .map_err(|errno| FileError::Io {
            op: "moving the upload into place at",
            path: self.path.clone(),
            source: errno.into(),
        })?;
        self.temp.clear();
        Ok(UploadOutcome {
            path: self.path.clone(),
            size: self.written,
        })
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.temp.is_empty() {
            self.file.take();
            if let Err(errno) =
                unlinkat(&self.dir, self.temp.as_os_str(), UnlinkatFlags::NoRemoveDir)
            {
                tracing::warn!(path = %self.path.display(), %errno, "could not remove an unfinished upload");
            }
        }
    }
}

/// The last component of a client's file name, without control characters; `upload` when
/// nothing usable is left.
pub fn sanitize_file_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or("");
    let cleaned: String = last.chars().filter(|c| !c.is_control()).collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() || cleaned == "." || cleaned == ".." {
        return DEFAULT_UPLOAD_NAME.to_string();
    }
    // File names are at most 255 bytes.
    let mut end = cleaned.len().min(255);
    while !cleaned.is_char_boundary(end) {
        end -= 1;
    }
    cleaned[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::sanitize_file_name;

    #[test]
    fn file_names_are_sanitized() {
        assert_eq!(sanitize_file_name("report.pdf"), "report.pdf");
        assert_eq!(sanitize_file_name("../../etc/passwd"), "passwd");
        assert_eq!(sanitize_file_name("C:\\Users\\x\\a.txt"), "a.txt");
        assert_eq!(sanitize_file_name("a\0b\nc"), "abc");
        assert_eq!(sanitize_file_name(".."), "upload");
        assert_eq!(sanitize_file_name("dir/"), "upload");
        assert_eq!(sanitize_file_name(""), "upload");
        assert_eq!(sanitize_file_name(&"é".repeat(200)).len(), 254);
    }
}
