//! The agent's home directory at start: the orchestrator mounts an empty, size-limited tmpfs
//! over it (so that nothing an agent writes reaches the host's disk), which hides what the image
//! put there. [`prepare`] puts back what a login would have: what `/etc/skel` holds (the shell's
//! dotfiles, the user site folder of Python) and the workspace folder. It never overwrites a file that is there, so a home
//! that was not replaced (a sandbox started by hand with `docker run`) is left as it is.
//!
//! A sandbox woken from hibernation, or started from a snapshot or with a browser profile,
//! finds its home's archive at a path the orchestrator put it before start ([`restore_saved`]):
//! it is unpacked first, and a browser session in it is restored when Chromium starts.

use std::io;
use std::path::Path;

/// The archive at `path`, `None` when there is none.
fn open_if_there(path: &Path) -> io::Result<Option<std::fs::File>> {
    match std::fs::File::open(path) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Unpacks the archive at `archive`, when there is one, into `home`. `Ok(None)`: no archive.
pub fn restore_saved(
    archive: &Path,
    home: &Path,
) -> io::Result<Option<crate::home_archive::Restored>> {
    let Some(file) = open_if_there(archive)? else {
        return Ok(None);
    };
    std::fs::create_dir_all(home)?;
    crate::home_archive::restore(io::BufReader::with_capacity(1 << 20, file), home).map(Some)
}

/// Puts a saved browser profile (an archive of [`BROWSER_PROFILE`] alone) in place of the
/// home's, when there is one: the folder is emptied first, so the profile wins over what a
/// restored home held, and no session restore is asked for (a profile brings logins, not the
/// last task's tabs). Any entry outside the folder refuses the archive, and a refused archive
/// leaves the folder empty (a fresh browser) rather than half restored. `Ok(None)`: no archive.
pub fn restore_profile(
    archive: &Path,
    home: &Path,
) -> io::Result<Option<crate::home_archive::Restored>> {
    let Some(file) = open_if_there(archive)? else {
        return Ok(None);
    };
    let folder = home.join(BROWSER_PROFILE);
    let empty = || match std::fs::remove_dir_all(&folder) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    };
    empty()?;
    std::fs::create_dir_all(home)?;
    let restored = crate::home_archive::restore_within(
        io::BufReader::with_capacity(1 << 20, file),
        home,
        Some(Path::new(BROWSER_PROFILE)),
    );
    match restored {
        Ok(restored) => {
            match std::fs::remove_file(folder.join(RESTORE_MARKER)) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
            Ok(Some(restored))
        }
        Err(error) => {
            empty()?;
            Err(error)
        }
    }
}

/// The browser profile's folder in the home (`start-chromium`'s default).
pub const BROWSER_PROFILE: &str = ".config/chromium";
/// The file in the profile that tells `start-chromium` to reopen the last session's tabs once
/// (it removes it).
const RESTORE_MARKER: &str = ".agentbox-restore-session";

/// Asks the browser's next start to reopen its last session's tabs, when the profile has a
/// saved session (its `Sessions` folder).
pub fn ask_browser_to_restore(home: &Path) -> io::Result<()> {
    let profile = home.join(BROWSER_PROFILE);
    if profile.join("Default/Sessions").is_dir() {
        std::fs::write(profile.join(RESTORE_MARKER), b"")?;
    }
    Ok(())
}

/// Where `useradd --create-home` copied the home's first files from.
const SKELETON: &str = "/etc/skel";

/// Copies what of `skeleton` is missing from `home` (files and folders; never over anything
/// that is there) and creates `workspace` with its parents.
pub fn prepare(home: &Path, workspace: &Path) -> io::Result<()> {
    prepare_from(Path::new(SKELETON), home, workspace)
}

fn prepare_from(skeleton: &Path, home: &Path, workspace: &Path) -> io::Result<()> {
    std::fs::create_dir_all(home)?;
    match copy_missing(skeleton, home, 0) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        other => other?,
    }
    std::fs::create_dir_all(workspace)
}

/// How deep the skeleton's folders go at most (it holds dotfiles and a user site folder).
const MAX_DEPTH: usize = 8;

fn copy_missing(from: &Path, to: &Path, depth: usize) -> io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() && depth < MAX_DEPTH {
            if target.symlink_metadata().is_err() {
                std::fs::create_dir(&target)?;
            }
            if target.is_dir() {
                copy_missing(&entry.path(), &target, depth + 1)?;
            }
        } else if kind.is_file() && target.symlink_metadata().is_err() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_home_gets_the_dotfiles_and_the_workspace_and_a_full_one_keeps_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let skeleton = dir.path().join("skel");
        std::fs::create_dir(&skeleton).unwrap();
        std::fs::write(skeleton.join(".bashrc"), "skeleton bashrc").unwrap();
        std::fs::write(skeleton.join(".profile"), "skeleton profile").unwrap();
        std::fs::create_dir_all(skeleton.join(".local/lib/site-packages")).unwrap();
        let home = dir.path().join("home");
        let workspace = home.join("workspace");

        prepare_from(&skeleton, &home, &workspace).unwrap();
        assert_eq!(
            std::fs::read_to_string(home.join(".bashrc")).unwrap(),
            "skeleton bashrc"
        );
        assert!(workspace.is_dir());
        assert!(home.join(".local/lib/site-packages").is_dir());

        std::fs::write(home.join(".bashrc"), "the agent's own").unwrap();
        prepare_from(&skeleton, &home, &workspace).unwrap();
        assert_eq!(
            std::fs::read_to_string(home.join(".bashrc")).unwrap(),
            "the agent's own"
        );
    }

    #[test]
    fn a_profile_takes_the_place_of_the_homes_and_asks_for_no_session() {
        let dir = tempfile::tempdir().unwrap();
        // The profile as saved: its cookies, a session, and a marker left by mistake.
        let saved = dir.path().join("saved");
        let profile = saved.join(BROWSER_PROFILE);
        std::fs::create_dir_all(profile.join("Default/Sessions")).unwrap();
        std::fs::write(profile.join("Default/Cookies"), "login=alice").unwrap();
        std::fs::write(profile.join(RESTORE_MARKER), "").unwrap();
        let archive = dir.path().join("profile.tar");
        let file = std::fs::File::create(&archive).unwrap();
        crate::home_archive::write(&saved, Some(Path::new(BROWSER_PROFILE)), file).unwrap();

        // A home restored from a snapshot, with its own browser profile and session marker.
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(BROWSER_PROFILE).join("Default/Sessions")).unwrap();
        std::fs::write(home.join(BROWSER_PROFILE).join("Default/Bookmarks"), "{}").unwrap();
        ask_browser_to_restore(&home).unwrap();
        std::fs::write(home.join("notes.txt"), "kept").unwrap();

        let restored = restore_profile(&archive, &home).unwrap().unwrap();
        assert!(restored.entries > 3, "{restored:?}");
        let folder = home.join(BROWSER_PROFILE);
        assert_eq!(
            std::fs::read_to_string(folder.join("Default/Cookies")).unwrap(),
            "login=alice"
        );
        assert!(
            !folder.join("Default/Bookmarks").exists(),
            "the home's profile went"
        );
        assert!(!folder.join(RESTORE_MARKER).exists(), "no session restore");
        assert_eq!(
            std::fs::read_to_string(home.join("notes.txt")).unwrap(),
            "kept"
        );

        // No archive: nothing touched. A whole home's archive: refused, and an empty profile.
        assert!(
            restore_profile(&dir.path().join("none.tar"), &home)
                .unwrap()
                .is_none()
        );
        assert!(folder.join("Default/Cookies").exists());
        std::fs::write(saved.join(".bashrc"), "evil").unwrap();
        let file = std::fs::File::create(&archive).unwrap();
        crate::home_archive::write(&saved, None, file).unwrap();
        assert!(restore_profile(&archive, &home).is_err());
        assert!(!folder.exists(), "a refused profile leaves an empty one");
        assert!(!home.join(".bashrc").exists());
    }
}
