//! The agent's home as one tar archive: what hibernation, snapshots and browser profiles keep of
//! a sandbox. The home is a tmpfs (the orchestrator's disk limit), so a sandbox's files live
//! nowhere else; [`write`] streams them out, [`restore`] puts them back into a new sandbox's
//! empty home before any program starts there.
//!
//! What is left out ([`is_left_out`]): caches (`.cache`), the history files of interactive
//! shells and REPLs (an agent may have typed a key there), Jupyter's runtime folder (kernel
//! connection files carry HMAC keys of kernels that will not exist) and Chromium's singleton
//! lock, socket and cookie. Nothing sandboxd writes that is secret lives in the home: its key
//! arrives on standard input, the VNC passwords and tickets are in `/run/sandboxd` and memory.
//! Only directories, regular files and symbolic links are kept (no sockets or FIFOs).
//!
//! **Invariant:** every entry's path is relative and inside the home (the walk never follows a
//! symbolic link), and [`restore`] refuses any other (the archive may come from an agent).

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

/// How deep the walk goes; deeper folders are left out (and counted).
const MAX_DEPTH: usize = 64;

/// Names left out wherever they are.
const LEFT_OUT_NAMES: &[&str] = &[
    ".bash_history",
    ".python_history",
    ".node_repl_history",
    ".sqlite_history",
    ".lesshst",
    ".wget-hsts",
    "SingletonLock",
    "SingletonSocket",
    "SingletonCookie",
];

/// Paths (relative to the home) left out with everything under them: caches, Jupyter's
/// runtime folder, and what Chromium rebuilds by itself (its metrics files, 4 MiB a run, which
/// would pile up with every wake; its GPU shader caches; crash reports).
const LEFT_OUT_PATHS: &[&str] = &[
    ".cache",
    ".local/share/jupyter/runtime",
    ".config/chromium/BrowserMetrics",
    ".config/chromium/Crash Reports",
    ".config/chromium/GrShaderCache",
    ".config/chromium/ShaderCache",
    ".config/chromium/GraphiteDawnCache",
    ".config/chromium/Default/GPUCache",
    ".config/chromium/Default/DawnWebGPUCache",
    ".config/chromium/Default/DawnGraphiteCache",
];

/// Whether the entry at `relative` (a path inside the home) is never archived.
pub fn is_left_out(relative: &Path) -> bool {
    if relative
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|name| LEFT_OUT_NAMES.contains(&name))
    {
        return true;
    }
    LEFT_OUT_PATHS.iter().any(|p| relative == Path::new(p))
}

/// What [`write`] put in the archive.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    pub entries: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Entries skipped: sockets, FIFOs, devices, folders deeper than the limit, files that
    /// vanished during the walk.
    pub skipped: u64,
}

/// Writes the home's `only` folder (all of it when `None`), paths relative to `home`, as a
/// tar archive into `out`. Returns what went in.
pub fn write(home: &Path, only: Option<&Path>, out: impl Write) -> io::Result<Written> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Complete);
    let mut written = Written::default();
    let start = match only {
        Some(relative) => {
            check_relative(relative)?;
            if let Err(e) = fs::symlink_metadata(home.join(relative)) {
                if e.kind() != io::ErrorKind::NotFound {
                    return Err(e);
                }
                // Nothing there yet (a browser that never ran): an empty archive.
                builder.into_inner()?.flush()?;
                return Ok(written);
            }
            // The folders leading to it go first, so that the restore makes them with their
            // modes.
            let mut leading = PathBuf::new();
            for component in relative.parent().into_iter().flat_map(Path::components) {
                leading.push(component);
                builder.append_path_with_name(home.join(&leading), &leading)?;
            }
            relative.to_path_buf()
        }
        None => PathBuf::new(),
    };
    if start.as_os_str().is_empty() {
        walk(home, &start, 0, &mut builder, &mut written)?;
    } else {
        match fs::symlink_metadata(home.join(&start)) {
            Ok(meta) if meta.is_dir() => {
                builder.append_path_with_name(home.join(&start), &start)?;
                written.entries += 1;
                walk(home, &start, 1, &mut builder, &mut written)?;
            }
            // Removed between the two looks: nothing of it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a folder", start.display()),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    builder.into_inner()?.flush()?;
    Ok(written)
}

fn walk<W: Write>(
    home: &Path,
    relative: &Path,
    depth: usize,
    builder: &mut tar::Builder<W>,
    written: &mut Written,
) -> io::Result<()> {
    let entries = match fs::read_dir(home.join(relative)) {
        Ok(entries) => entries,
        // Removed while we walked: it is simply not in the archive.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut names: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let child = relative.join(&name);
        if is_left_out(&child) {
            continue;
        }
        let path = home.join(&child);
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                written.skipped += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            if depth + 1 > MAX_DEPTH {
                written.skipped += 1;
                continue;
            }
            builder.append_path_with_name(&path, &child)?;
            written.entries += 1;
            walk(home, &child, depth + 1, builder, written)?;
        } else if kind.is_file() {
            match append_file(builder, &path, &child, &meta) {
                Ok(bytes) => {
                    written.entries += 1;
                    written.bytes += bytes;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => written.skipped += 1,
                Err(e) => return Err(e),
            }
        } else if kind.is_symlink() {
            builder.append_path_with_name(&path, &child)?;
            written.entries += 1;
        } else {
            written.skipped += 1;
        }
    }
    Ok(())
}

/// Appends a regular file with the size it had when it was opened: a file that grows while it
/// is read is cut at that size, one that shrinks is padded with zeros, so the archive is
/// always well formed (the agent's processes are held still while the archive is made, see
/// `quiesce`, so neither happens in practice).
fn append_file<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &Path,
    name: &Path,
    meta: &fs::Metadata,
) -> io::Result<u64> {
    let file = fs::File::open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(meta.len());
    let mut header = tar::Header::new_gnu();
    header.set_metadata_in_mode(meta, tar::HeaderMode::Complete);
    header.set_size(size);
    let reader = file.take(size).chain(io::repeat(0).take(size));
    builder.append_data(&mut header, name, reader.take(size))?;
    Ok(size)
}

fn check_relative(path: &Path) -> io::Result<()> {
    if path.as_os_str().is_empty() || !path.components().all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a relative path inside the home", path.display()),
        ));
    }
    Ok(())
}

/// What [`restore`] put back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Restored {
    pub entries: u64,
    pub bytes: u64,
}

/// Unpacks an archive made by [`write`] into `home`, over what is there. Entries whose path is
/// absolute or leaves the home (`..`), hard links and device files are refused, and so is the
/// whole archive with them (an archive from an agent is not trusted to be well formed).
pub fn restore(archive: impl Read, home: &Path) -> io::Result<Restored> {
    restore_within(archive, home, None)
}

/// [`restore`], refusing (with the rest of the archive) every entry that is not `within` (a
/// relative path in the home) or under it, but for the folders leading to it: what an archive
/// of one folder (`write` with `only`) holds.
pub fn restore_within(
    archive: impl Read,
    home: &Path,
    within: Option<&Path>,
) -> io::Result<Restored> {
    if let Some(within) = within {
        check_relative(within)?;
    }
    let mut archive = tar::Archive::new(archive);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    let mut restored = Restored::default();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if !matches!(
            kind,
            tar::EntryType::Regular
                | tar::EntryType::Directory
                | tar::EntryType::Symlink
                | tar::EntryType::GNUSparse
        ) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the archive holds an entry of a kind not restored: {kind:?}"),
            ));
        }
        let path = entry.path()?.into_owned();
        check_relative(&path)?;
        if let Some(within) = within {
            let leading = kind == tar::EntryType::Directory && within.starts_with(&path);
            if !leading && !path.starts_with(within) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is not in {}, the only folder this archive may hold",
                        path.display(),
                        within.display()
                    ),
                ));
            }
        }
        // `unpack_in` refuses paths that would land outside `home`, through `..` or a
        // symbolic link met on the way.
        if !entry.unpack_in(home)? {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} would land outside the home", path.display()),
            ));
        }
        restored.entries += 1;
        if kind == tar::EntryType::Regular {
            restored.bytes += entry.header().size().unwrap_or(0);
        }
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn home_with_files() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        fs::create_dir_all(home.join("workspace/deep/er")).unwrap();
        fs::write(home.join("workspace/deep/er/notes.txt"), "kept").unwrap();
        fs::write(home.join("run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(home.join("run.sh"), fs::Permissions::from_mode(0o750)).unwrap();
        symlink("workspace/deep", home.join("shortcut")).unwrap();
        fs::write(
            home.join(".bash_history"),
            "export OPENAI_API_KEY=sk-secret",
        )
        .unwrap();
        fs::create_dir_all(home.join(".cache/chromium")).unwrap();
        fs::write(home.join(".cache/chromium/blob"), "cache").unwrap();
        fs::create_dir_all(home.join(".config/chromium/Default")).unwrap();
        fs::create_dir_all(home.join(".config/chromium/BrowserMetrics")).unwrap();
        fs::write(
            home.join(".config/chromium/BrowserMetrics/run.pma"),
            "metrics",
        )
        .unwrap();
        fs::write(home.join(".config/chromium/Default/Cookies"), "cookies").unwrap();
        symlink("host-1234", home.join(".config/chromium/SingletonLock")).unwrap();
        fs::create_dir_all(home.join(".local/share/jupyter/runtime")).unwrap();
        fs::write(
            home.join(".local/share/jupyter/runtime/kernel-1.json"),
            "{\"key\": \"hmac\"}",
        )
        .unwrap();
        nix::unistd::mkfifo(&home.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        dir
    }

    #[test]
    fn a_home_comes_back_whole_but_for_what_is_left_out() {
        let source = home_with_files();
        let mut archive = Vec::new();
        let written = write(source.path(), None, &mut archive).unwrap();
        assert_eq!(written.skipped, 1, "the FIFO");

        let target = tempfile::tempdir().unwrap();
        let restored = restore(archive.as_slice(), target.path()).unwrap();
        assert_eq!(restored.entries, written.entries);
        let home = target.path();
        assert_eq!(
            fs::read_to_string(home.join("workspace/deep/er/notes.txt")).unwrap(),
            "kept"
        );
        assert_eq!(
            fs::metadata(home.join("run.sh"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o750
        );
        assert_eq!(
            fs::read_link(home.join("shortcut")).unwrap(),
            Path::new("workspace/deep")
        );
        assert_eq!(
            fs::read_to_string(home.join(".config/chromium/Default/Cookies")).unwrap(),
            "cookies"
        );
        for gone in [
            ".bash_history",
            ".cache",
            ".config/chromium/SingletonLock",
            ".config/chromium/BrowserMetrics",
            ".local/share/jupyter/runtime",
            "pipe",
        ] {
            assert!(
                fs::symlink_metadata(home.join(gone)).is_err(),
                "{gone} was archived"
            );
        }
        let text = String::from_utf8_lossy(&archive);
        assert!(!text.contains("sk-secret") && !text.contains("hmac"));
    }

    #[test]
    fn only_a_folder_is_archived_with_the_folders_leading_to_it() {
        let source = home_with_files();
        let mut archive = Vec::new();
        write(
            source.path(),
            Some(Path::new(".config/chromium")),
            &mut archive,
        )
        .unwrap();
        let target = tempfile::tempdir().unwrap();
        restore(archive.as_slice(), target.path()).unwrap();
        assert!(
            target
                .path()
                .join(".config/chromium/Default/Cookies")
                .is_file()
        );
        assert!(!target.path().join("workspace").exists());

        // A profile that was never used: an archive that restores to nothing.
        let empty = tempfile::tempdir().unwrap();
        let mut archive = Vec::new();
        write(
            empty.path(),
            Some(Path::new(".config/chromium")),
            &mut archive,
        )
        .unwrap();
        restore(archive.as_slice(), target.path()).unwrap();

        // Restored only within the folder it is of: the whole home's archive is refused there,
        // and so is one folder's archive with an entry slipped in beside it.
        let within = Some(Path::new(".config/chromium"));
        let profile = tempfile::tempdir().unwrap();
        restore_within(archive.as_slice(), profile.path(), within).unwrap();
        let mut whole = Vec::new();
        write(source.path(), None, &mut whole).unwrap();
        let error = restore_within(whole.as_slice(), profile.path(), within).unwrap_err();
        assert!(
            error.to_string().contains("not in .config/chromium"),
            "{error}"
        );
        let slipped_in = archive_of(|b| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            header.set_mode(0o755);
            b.append_data(&mut header, ".config", &[][..]).unwrap();
            let mut header = tar::Header::new_gnu();
            header.set_size(4);
            header.set_mode(0o644);
            b.append_data(
                &mut header,
                ".config/chromium/Default/Prefs",
                &b"{}\n\n"[..4],
            )
            .unwrap();
            let mut header = tar::Header::new_gnu();
            header.set_size(4);
            header.set_mode(0o644);
            b.append_data(&mut header, ".config/autostart/evil.desktop", &b"evil"[..])
                .unwrap();
        });
        let target = tempfile::tempdir().unwrap();
        assert!(restore_within(slipped_in.as_slice(), target.path(), within).is_err());
        assert!(!target.path().join(".config/autostart").exists());

        for bad in ["", "/etc", "../x", ".config/../.."] {
            assert!(
                write(source.path(), Some(Path::new(bad)), Vec::new()).is_err(),
                "{bad:?}"
            );
        }
    }

    fn archive_of(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        build(&mut builder);
        builder.into_inner().unwrap()
    }

    #[test]
    fn an_archive_reaching_out_of_the_home_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        // A symbolic link out of the home, then a file written through it.
        let through_link = archive_of(|b| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            b.append_link(&mut header, "escape", outside.path())
                .unwrap();
            let mut header = tar::Header::new_gnu();
            header.set_size(4);
            header.set_mode(0o644);
            b.append_data(&mut header, "escape/owned", &b"evil"[..])
                .unwrap();
        });
        assert!(restore(through_link.as_slice(), target.path()).is_err());
        assert!(!outside.path().join("owned").exists());

        let hard_link = archive_of(|b| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Link);
            header.set_size(0);
            b.append_link(&mut header, "passwd", "/etc/passwd").unwrap();
        });
        assert!(restore(hard_link.as_slice(), target.path()).is_err());
        assert!(!target.path().join("passwd").exists());
    }
}
