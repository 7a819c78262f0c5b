//! Kept homes on disk: the archives of hibernated sandboxes (`<data>/homes/<sandbox id>.tar`),
//! of snapshots (`<data>/snapshots/<snapshot id>.tar`) and of browser profiles
//! (`<data>/profiles/<profile id>.tar`, Chromium's profile folder alone), as sandboxd's
//! `/v1/sandbox/home/archive` wrote them.
//!
//! **Invariant:** an archive is whole or absent. It is written to `<name>.tar.part` and renamed
//! into place (after an fsync) only once the transfer ended well; a `.part` file is never read,
//! is removed when its writer is dropped, and [`HomeStore::collect_parts`] removes those a
//! crash left. Names are ids the orchestrator made, checked again here.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;

#[derive(Debug, thiserror::Error)]
pub enum HomeStoreError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{0}` is not an id")]
    BadId(String),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> HomeStoreError {
    let path = path.display().to_string();
    move |source| HomeStoreError::Io { what, path, source }
}

/// What a kept archive is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A hibernated sandbox's home (named by the sandbox id).
    Hibernated,
    /// A snapshot (named by the snapshot id).
    Snapshot,
    /// A browser profile: Chromium's profile folder alone (named by the profile id).
    Profile,
}

impl Kind {
    fn folder(self) -> &'static str {
        match self {
            Self::Hibernated => "homes",
            Self::Snapshot => "snapshots",
            Self::Profile => "profiles",
        }
    }
}

/// The kept archives under the data directory.
#[derive(Debug, Clone)]
pub struct HomeStore {
    root: PathBuf,
}

/// An archive being written. Dropped without [`commit`](Self::commit), its file is removed.
pub struct PartFile {
    pub file: tokio::fs::File,
    part: PathBuf,
    done: PathBuf,
    committed: bool,
}

impl HomeStore {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.to_path_buf(),
        }
    }

    /// Where the archive `id` of `kind` is (or would be).
    pub fn path(&self, kind: Kind, id: &str) -> Result<PathBuf, HomeStoreError> {
        let fine = !id.is_empty()
            && id.len() <= 64
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !fine {
            return Err(HomeStoreError::BadId(id.to_string()));
        }
        Ok(self.root.join(kind.folder()).join(format!("{id}.tar")))
    }

    /// Opens `<archive>.part` for writing (its folder made if needed).
    pub async fn create(&self, kind: Kind, id: &str) -> Result<PartFile, HomeStoreError> {
        let done = self.path(kind, id)?;
        let folder = self.root.join(kind.folder());
        tokio::fs::create_dir_all(&folder)
            .await
            .map_err(io("making", &folder))?;
        let part = done.with_extension("tar.part");
        let file = tokio::fs::File::create(&part)
            .await
            .map_err(io("creating", &part))?;
        Ok(PartFile {
            file,
            part,
            done,
            committed: false,
        })
    }

    /// The archive's size, `None` when it is not there.
    pub async fn size(&self, kind: Kind, id: &str) -> Result<Option<u64>, HomeStoreError> {
        let path = self.path(kind, id)?;
        match tokio::fs::metadata(&path).await {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("reading", &path)(e)),
        }
    }

    /// Removes an archive; one that is not there is not an error.
    pub async fn remove(&self, kind: Kind, id: &str) -> Result<(), HomeStoreError> {
        let path = self.path(kind, id)?;
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("removing", &path)(e)),
        }
    }

    /// The ids of the whole archives of `kind`.
    pub fn ids(&self, kind: Kind) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.root.join(kind.folder())) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".tar")
                    .map(str::to_string)
            })
            .collect()
    }

    /// Removes the `.part` files a crash left (at start, before anything writes one).
    pub fn collect_parts(&self) -> usize {
        let mut removed = 0;
        for kind in [Kind::Hibernated, Kind::Snapshot, Kind::Profile] {
            let Ok(entries) = std::fs::read_dir(self.root.join(kind.folder())) else {
                continue;
            };
            for entry in entries.filter_map(Result::ok) {
                if entry.file_name().to_string_lossy().ends_with(".part")
                    && std::fs::remove_file(entry.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }
}

impl HomeStore {
    /// Writes the entries of the archive `from` that are `folder` (a relative path) or under
    /// it, with the folders leading to it, as the archive `to`: a browser profile kept from a
    /// hibernated sandbox's home. Entries are copied from one tar stream to the other, never
    /// unpacked on this host. Returns the new archive's size.
    pub async fn copy_folder(
        &self,
        from: (Kind, &str),
        folder: &str,
        to: (Kind, &str),
    ) -> Result<u64, HomeStoreError> {
        let source = self.path(from.0, from.1)?;
        let part = self.create(to.0, to.1).await?;
        let out = part
            .file
            .try_clone()
            .await
            .map_err(io("opening", &part.part))?
            .into_std()
            .await;
        let folder = PathBuf::from(folder);
        let reading = source.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut archive =
                tar::Archive::new(std::io::BufReader::new(std::fs::File::open(&reading)?));
            let mut builder = tar::Builder::new(std::io::BufWriter::new(out));
            for entry in archive.entries()? {
                let mut entry = entry?;
                let path = entry.path()?.into_owned();
                let leading = entry.header().entry_type() == tar::EntryType::Directory
                    && folder.starts_with(&path);
                if !leading && !path.starts_with(&folder) {
                    continue;
                }
                let mut header = entry.header().clone();
                match entry.link_name()? {
                    Some(target) => {
                        let target = target.into_owned();
                        builder.append_link(&mut header, &path, target)?;
                    }
                    None => builder.append_data(&mut header, &path, &mut entry)?,
                }
            }
            builder
                .into_inner()?
                .into_inner()
                .map_err(|e| e.into_error())?;
            Ok(())
        })
        .await
        .map_err(|e| io("copying from", &source)(std::io::Error::other(e)))?
        .map_err(io("copying from", &source))?;
        part.commit().await
    }
}

impl PartFile {
    /// Makes the archive whole: flushed, synced, renamed into place. Returns its size.
    pub async fn commit(mut self) -> Result<u64, HomeStoreError> {
        self.file.flush().await.map_err(io("writing", &self.part))?;
        self.file
            .sync_all()
            .await
            .map_err(io("syncing", &self.part))?;
        let size = self
            .file
            .metadata()
            .await
            .map_err(io("reading", &self.part))?
            .len();
        tokio::fs::rename(&self.part, &self.done)
            .await
            .map_err(io("renaming", &self.part))?;
        self.committed = true;
        Ok(size)
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.part);
        }
    }
}

/// A tar stream holding one file, `name`, with the bytes of the archive at `path`: how an
/// archive is put into a container (Docker's archive upload unpacks a tar at a path; the
/// archive must arrive as a file, not unpacked into the container's layer).
pub async fn wrapped_in_tar(
    path: &Path,
    name: &str,
) -> Result<
    impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static,
    HomeStoreError,
> {
    use futures_util::StreamExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(io("opening", path))?;
    let size = file.metadata().await.map_err(io("reading", path))?.len();
    let mut header = tar::Header::new_gnu();
    header
        .set_path(name)
        .map_err(io("naming the entry for", path))?;
    header.set_size(size);
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    let head = bytes::Bytes::copy_from_slice(header.as_bytes());
    // The entry's padding to a 512-byte block, then the two zero blocks that end an archive.
    let padding = (512 - (size % 512) as usize) % 512;
    let tail = bytes::Bytes::from(vec![0u8; padding + 1024]);
    let body = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    Ok(futures_util::stream::once(async move { Ok(head) })
        .chain(body)
        .chain(futures_util::stream::once(async move { Ok(tail) })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_archive_is_whole_or_absent_and_ids_stay_in_their_folder() {
        let dir = tempfile::tempdir().unwrap();
        let store = HomeStore::new(dir.path());
        let mut part = store.create(Kind::Snapshot, "snp-1").await.unwrap();
        part.file.write_all(b"half").await.unwrap();
        drop(part);
        assert_eq!(store.size(Kind::Snapshot, "snp-1").await.unwrap(), None);
        assert!(store.ids(Kind::Snapshot).is_empty());

        let mut part = store.create(Kind::Snapshot, "snp-1").await.unwrap();
        part.file.write_all(b"whole").await.unwrap();
        assert_eq!(part.commit().await.unwrap(), 5);
        assert_eq!(store.size(Kind::Snapshot, "snp-1").await.unwrap(), Some(5));
        assert_eq!(store.ids(Kind::Snapshot), ["snp-1"]);

        // A crash's leftover.
        std::fs::write(dir.path().join("homes.tar.part"), "x").unwrap();
        std::fs::create_dir_all(dir.path().join("homes")).unwrap();
        std::fs::write(dir.path().join("homes/sbx-2.tar.part"), "x").unwrap();
        assert_eq!(store.collect_parts(), 1);

        for bad in ["", "../x", "a/b", "x.tar", &"a".repeat(65)] {
            assert!(store.path(Kind::Hibernated, bad).is_err(), "{bad}");
        }
        store.remove(Kind::Snapshot, "snp-1").await.unwrap();
        store.remove(Kind::Snapshot, "snp-1").await.unwrap();
    }

    #[tokio::test]
    async fn a_folder_is_copied_out_of_an_archive_with_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = HomeStore::new(dir.path());
        let mut home = tar::Builder::new(Vec::new());
        let mut add = |path: &str, data: Option<&[u8]>| {
            let mut header = tar::Header::new_gnu();
            match data {
                Some(data) => {
                    header.set_size(data.len() as u64);
                    header.set_mode(0o600);
                    home.append_data(&mut header, path, data).unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    header.set_mode(0o700);
                    home.append_data(&mut header, path, &[][..]).unwrap();
                }
            }
        };
        add(".config", None);
        add(".config/chromium", None);
        add(".config/chromium/Default", None);
        add(".config/chromium/Default/Cookies", Some(b"login=alice"));
        add(".config/other", None);
        add(".config/other/x", Some(b"x"));
        add("workspace", None);
        add("workspace/notes.txt", Some(b"notes"));
        let home = home.into_inner().unwrap();
        let mut part = store.create(Kind::Hibernated, "sbx-1").await.unwrap();
        part.file.write_all(&home).await.unwrap();
        part.commit().await.unwrap();

        let size = store
            .copy_folder(
                (Kind::Hibernated, "sbx-1"),
                ".config/chromium",
                (Kind::Profile, "prf-1"),
            )
            .await
            .unwrap();
        let copied = std::fs::read(store.path(Kind::Profile, "prf-1").unwrap()).unwrap();
        assert_eq!(copied.len() as u64, size);
        let mut archive = tar::Archive::new(copied.as_slice());
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            if name.ends_with("Cookies") {
                let mut read = String::new();
                std::io::Read::read_to_string(&mut entry, &mut read).unwrap();
                assert_eq!(read, "login=alice");
            }
            names.push(name);
        }
        assert_eq!(
            names,
            [
                ".config",
                ".config/chromium",
                ".config/chromium/Default",
                ".config/chromium/Default/Cookies"
            ]
        );
    }

    #[tokio::test]
    async fn the_wrapped_archive_unpacks_to_the_one_file() {
        use futures_util::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner.tar");
        let content: Vec<u8> = (0..1500u32).map(|i| i as u8).collect();
        std::fs::write(&inner, &content).unwrap();
        let mut stream = Box::pin(wrapped_in_tar(&inner, "home.tar").await.unwrap());
        let mut outer = Vec::new();
        while let Some(chunk) = stream.next().await {
            outer.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(outer.len() % 512, 0);
        let mut archive = tar::Archive::new(outer.as_slice());
        let mut entries = archive.entries().unwrap();
        let mut entry = entries.next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str(), Some("home.tar"));
        let mut read = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut read).unwrap();
        assert_eq!(read, content);
        drop(entry);
        assert!(entries.next().is_none());
    }
}
