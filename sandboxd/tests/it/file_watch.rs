//! File watches (`sandboxd::files::watch`) on real inotify in temporary directories: what each
//! change is reported as, coalescing, the bounded queue and its overflow notice, the directory
//! limit, confinement (paths outside the roots, symlinks out), the bound on watchers and the
//! one-shot wait.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sandboxd::files::watch::{
    ChangeKind, FileEvent, OverflowReason, Record, WatchError, WatchLimits, WatchSpec, Watcher,
    Watches,
};
use sandboxd::files::{ConfineError, Confinement, FileError};
use tempfile::TempDir;

struct Fixture {
    root: TempDir,
    outside: TempDir,
    watches: Watches,
}

impl Fixture {
    fn new(limits: WatchLimits) -> Self {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let confine = Confinement::new(&[root.path().to_path_buf()], root.path());
        Self {
            watches: Watches::new(confine, limits),
            root,
            outside,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    async fn watch(&self, rel: &str, recursive: bool) -> Arc<Watcher> {
        self.watches
            .create(spec(&self.path(rel), recursive))
            .await
            .unwrap()
    }
}

fn spec(path: &Path, recursive: bool) -> WatchSpec {
    WatchSpec {
        path: path.as_os_str().to_owned(),
        recursive,
        exclude: vec!["*.swp".into(), "node_modules".into()],
        include: Vec::new(),
        debounce: Duration::from_millis(50),
    }
}

/// Reads the watcher until `done` holds for the changes seen, or fails after 5 s.
async fn changes_until(
    watcher: &Watcher,
    done: impl Fn(&[FileEvent]) -> bool,
) -> (Vec<FileEvent>, Vec<Record>) {
    let mut seen = Vec::new();
    let mut all = Vec::new();
    let mut cursor = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !done(&seen) {
        let batch = tokio::time::timeout_at(deadline, watcher.next_batch(cursor, 1000))
            .await
            .unwrap_or_else(|_| panic!("timed out; seen so far: {seen:#?}"));
        cursor = batch.cursor;
        for record in batch.records {
            if let Record::Change(event) = &record {
                seen.push(event.clone());
            }
            all.push(record);
        }
    }
    (seen, all)
}

fn summary(events: &[FileEvent]) -> Vec<(ChangeKind, String)> {
    events
        .iter()
        .map(|e| (e.kind, e.relative_path.display().to_string()))
        .collect()
}

fn has(events: &[FileEvent], kind: ChangeKind, rel: &str) -> bool {
    events
        .iter()
        .any(|e| e.kind == kind && e.relative_path == Path::new(rel))
}

#[tokio::test]
async fn create_write_chmod_rename_and_remove_are_reported_recursively() {
    let fx = Fixture::new(WatchLimits::default());
    std::fs::create_dir_all(fx.path("tree/old")).unwrap();
    let watcher = fx.watch("tree", true).await;
    assert_eq!(watcher.info().directories, 2);

    std::fs::write(fx.path("tree/a.txt"), "hello").unwrap();
    let (events, _) = changes_until(&watcher, |e| has(e, ChangeKind::Create, "a.txt")).await;
    let created = events
        .iter()
        .find(|e| e.relative_path == Path::new("a.txt"))
        .unwrap();
    // Written in one go and closed: one `create` with the final size, not create + write.
    assert_eq!(created.size, Some(5), "{events:#?}");
    assert_eq!(created.path, fx.path("tree/a.txt"));
    assert!(created.inode.is_some() && created.mtime.is_some());
    assert!(
        !has(&events, ChangeKind::Write, "a.txt"),
        "{:?}",
        summary(&events)
    );

    // A file in a directory made after the watch started (the new directory is watched).
    std::fs::create_dir(fx.path("tree/new")).unwrap();
    std::fs::write(fx.path("tree/new/deep.txt"), "x").unwrap();
    // In an existing subdirectory; appends; a mode change; a rename; a removal.
    std::fs::write(fx.path("tree/old/b.txt"), "1").unwrap();
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(fx.path("tree/a.txt"))
            .unwrap();
        file.write_all(b" world").unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        fx.path("tree/old/b.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    std::fs::rename(fx.path("tree/old/b.txt"), fx.path("tree/new/c.txt")).unwrap();
    std::fs::remove_file(fx.path("tree/a.txt")).unwrap();
    // Excluded names are not reported.
    std::fs::write(fx.path("tree/x.swp"), "swap").unwrap();
    std::fs::create_dir(fx.path("tree/node_modules")).unwrap();
    std::fs::write(fx.path("tree/node_modules/m.js"), "m").unwrap();
    std::fs::write(fx.path("tree/last"), "").unwrap();

    let (events, _) = changes_until(&watcher, |e| has(e, ChangeKind::Create, "last")).await;
    let got = summary(&events);
    for (kind, rel) in [
        (ChangeKind::Create, "new"),
        (ChangeKind::Create, "new/deep.txt"),
        (ChangeKind::Create, "old/b.txt"),
        (ChangeKind::Write, "a.txt"),
        (ChangeKind::Chmod, "old/b.txt"),
        (ChangeKind::Rename, "new/c.txt"),
        (ChangeKind::Remove, "a.txt"),
    ] {
        assert!(
            has(&events, kind, rel),
            "{kind:?} {rel} missing from {got:?}"
        );
    }
    let renamed = events
        .iter()
        .find(|e| e.kind == ChangeKind::Rename)
        .unwrap();
    assert_eq!(
        renamed.old_path.as_deref(),
        Some(fx.path("tree/old/b.txt").as_path())
    );
    assert!(
        !got.iter()
            .any(|(_, rel)| rel.contains("swp") || rel.contains("node_modules")),
        "{got:?}"
    );
    // Sequence numbers increase by one.
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

#[tokio::test]
async fn repeated_writes_coalesce_and_a_non_recursive_watch_stays_at_the_top() {
    let fx = Fixture::new(WatchLimits::default());
    std::fs::create_dir_all(fx.path("flat/sub")).unwrap();
    std::fs::write(fx.path("flat/log"), "").unwrap();
    let watcher = fx
        .watches
        .create(WatchSpec {
            debounce: Duration::from_millis(400),
            ..spec(&fx.path("flat"), false)
        })
        .await
        .unwrap();
    assert_eq!(watcher.info().directories, 1);
    // One writer, many writes, kept open: one `write` per window, not one per write.
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(fx.path("flat/log"))
            .unwrap();
        for _ in 0..200 {
            file.write_all(b"line\n").unwrap();
        }
        std::fs::write(fx.path("flat/sub/ignored"), "below").unwrap();
        let (events, _) = changes_until(&watcher, |e| has(e, ChangeKind::Write, "log")).await;
        assert_eq!(events.len(), 1, "{:?}", summary(&events));
        assert_eq!(events[0].size, Some(1000));
    }
    std::fs::write(fx.path("flat/end"), "").unwrap();
    let (events, _) = changes_until(&watcher, |e| has(e, ChangeKind::Create, "end")).await;
    assert!(
        !events.iter().any(|e| e.relative_path.starts_with("sub/")),
        "{:?}",
        summary(&events)
    );
}

#[tokio::test]
async fn a_full_queue_drops_the_oldest_and_says_how_many_were_missed() {
    let fx = Fixture::new(WatchLimits {
        queue_capacity: 4,
        ..WatchLimits::default()
    });
    std::fs::create_dir(fx.path("busy")).unwrap();
    let watcher = fx.watch("busy", false).await;
    for i in 0..20 {
        std::fs::write(fx.path(&format!("busy/f{i:02}")), "x").unwrap();
    }
    // Wait for the last one to be reported, reading nothing meanwhile.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let batch = watcher.read(0, 100);
        let last = batch
            .records
            .iter()
            .any(|r| matches!(r, Record::Change(e) if e.relative_path == Path::new("f19")));
        if last {
            assert_eq!(batch.records.len(), 4);
            assert_eq!(batch.missed, 16, "{batch:#?}");
            assert_eq!(batch.cursor, 20);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{batch:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A reader that is up to date misses nothing.
    assert_eq!(watcher.read(20, 100).missed, 0);
}

#[tokio::test]
async fn a_directory_past_the_limit_is_refused_at_creation_and_noticed_later() {
    let fx = Fixture::new(WatchLimits {
        max_directories: 3,
        ..WatchLimits::default()
    });
    std::fs::create_dir_all(fx.path("big/a/b/c")).unwrap();
    let err = fx
        .watches
        .create(spec(&fx.path("big"), true))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            WatchError::File(FileError::Invalid { field: "path", .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("more than 3 directories"), "{err}");

    std::fs::create_dir_all(fx.path("small/a")).unwrap();
    let watcher = fx.watch("small", true).await;
    std::fs::create_dir(fx.path("small/b")).unwrap();
    std::fs::create_dir(fx.path("small/c")).unwrap();
    std::fs::write(fx.path("small/c/unseen"), "x").unwrap();
    std::fs::write(fx.path("small/done"), "x").unwrap();
    let (events, records) = changes_until(&watcher, |e| has(e, ChangeKind::Create, "done")).await;
    assert!(has(&events, ChangeKind::Create, "c"));
    assert!(
        !has(&events, ChangeKind::Create, "c/unseen"),
        "{:?}",
        summary(&events)
    );
    let notice = records
        .iter()
        .find_map(|r| match r {
            Record::Overflow(o) => Some(o.reason.clone()),
            Record::Change(_) => None,
        })
        .expect("a directory-limit notice");
    assert_eq!(
        notice,
        OverflowReason::DirectoryLimit {
            path: fx.path("small/c"),
            limit: 3
        }
    );
}

#[tokio::test]
async fn paths_outside_the_roots_are_refused_and_symlinks_are_not_followed() {
    let fx = Fixture::new(WatchLimits::default());
    // Outside every root, directly or through a symlink.
    let err = fx
        .watches
        .create(spec(fx.outside.path(), true))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WatchError::File(FileError::Path(e)) if e.is_refusal()),
        "{err:?}"
    );
    symlink(fx.outside.path(), fx.path("out")).unwrap();
    let err = fx
        .watches
        .create(spec(&fx.path("out"), true))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WatchError::File(FileError::Path(e)) if e.is_refusal()),
        "{err:?}"
    );
    // Missing, or a file.
    let err = fx
        .watches
        .create(spec(&fx.path("none"), true))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            WatchError::File(FileError::Path(ConfineError::NotFound { .. }))
        ),
        "{err:?}"
    );
    std::fs::write(fx.path("file"), "").unwrap();
    let err = fx
        .watches
        .create(spec(&fx.path("file"), true))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            WatchError::File(FileError::Path(ConfineError::NotADirectory { .. }))
        ),
        "{err:?}"
    );
    assert!(fx.watches.list().is_empty());

    // A symlink to the outside inside a watched tree is an entry, not a subtree.
    std::fs::create_dir(fx.path("tree")).unwrap();
    symlink(fx.outside.path(), fx.path("tree/link")).unwrap();
    let watcher = fx.watch("tree", true).await;
    assert_eq!(watcher.info().directories, 1);
    std::fs::write(fx.outside.path().join("secret"), "s").unwrap();
    std::fs::write(fx.path("tree/mark"), "").unwrap();
    let (events, _) = changes_until(&watcher, |e| has(e, ChangeKind::Create, "mark")).await;
    assert!(
        !events
            .iter()
            .any(|e| e.path.starts_with(fx.outside.path()) || e.relative_path.starts_with("link")),
        "{:?}",
        summary(&events)
    );
    // The watch was added on the confined descriptor: the kernel watches the real directory.
    assert_eq!(watcher.path, fx.path("tree"));
}

#[tokio::test]
async fn watchers_are_bounded_listed_and_removed_when_stopped() {
    let fx = Fixture::new(WatchLimits {
        max_watchers: 2,
        ..WatchLimits::default()
    });
    std::fs::create_dir(fx.path("d")).unwrap();
    let first = fx.watch("d", true).await;
    let _second = fx.watch("d", true).await;
    let err = fx
        .watches
        .create(spec(&fx.path("d"), true))
        .await
        .unwrap_err();
    assert!(
        matches!(err, WatchError::TooMany { limit: 2, .. }),
        "{err:?}"
    );
    assert_eq!(fx.watches.list().len(), 2);

    let stopped = fx.watches.stop(&first.id).unwrap();
    assert_eq!(stopped.id, first.id);
    assert!(matches!(
        fx.watches.stop(&first.id),
        Err(WatchError::UnknownWatcher { .. })
    ));
    assert!(matches!(
        fx.watches.get(&first.id),
        Err(WatchError::UnknownWatcher { .. })
    ));
    // A reader of the stopped watcher is told, and nothing more arrives.
    let batch = first.next_batch(0, 10).await;
    assert_eq!(batch.closed.as_deref(), Some("the watcher was stopped"));
    std::fs::write(fx.path("d/after"), "").unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(first.read(0, 10).records.is_empty());
    // Room again.
    fx.watch("d", false).await;
}

#[tokio::test]
async fn bad_fields_are_refused_by_name() {
    let fx = Fixture::new(WatchLimits::default());
    std::fs::create_dir(fx.path("d")).unwrap();
    let bad = |spec: WatchSpec| async {
        match fx.watches.create(spec).await {
            Err(WatchError::File(FileError::Invalid { field, .. })) => field,
            other => panic!("expected a refusal, got {other:?}"),
        }
    };
    let base = spec(&fx.path("d"), true);
    assert_eq!(
        bad(WatchSpec {
            debounce: Duration::from_millis(10),
            ..base.clone()
        })
        .await,
        "debounce"
    );
    assert_eq!(
        bad(WatchSpec {
            exclude: vec!["a[".into()],
            ..base.clone()
        })
        .await,
        "exclude"
    );
    assert_eq!(
        bad(WatchSpec {
            include: vec![String::new()],
            ..base.clone()
        })
        .await,
        "include_patterns"
    );
    assert!(fx.watches.list().is_empty());
}

#[tokio::test]
async fn wait_answers_the_first_matching_change_or_times_out() {
    let fx = Fixture::new(WatchLimits::default());
    std::fs::create_dir(fx.path("w")).unwrap();
    let target = fx.path("w/result.json");

    // Times out when nothing happens to it (a change to another file does not count).
    std::fs::write(fx.path("w/other"), "x").unwrap();
    let none = fx
        .watches
        .wait(
            target.as_os_str(),
            &[ChangeKind::Create],
            Duration::from_millis(300),
        )
        .await
        .unwrap();
    assert!(none.is_none());

    // Created while waiting.
    let writer = {
        let target = target.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            std::fs::write(&target, "{}").unwrap();
        })
    };
    let event = fx
        .watches
        .wait(
            target.as_os_str(),
            &[ChangeKind::Create],
            Duration::from_secs(5),
        )
        .await
        .unwrap()
        .expect("an event");
    writer.await.unwrap();
    assert_eq!(event.kind, ChangeKind::Create);
    assert_eq!(event.path, target);
    assert_eq!(event.size, Some(2));

    // There already: `create` answers at once; `write` waits for a write.
    let event = fx
        .watches
        .wait(
            target.as_os_str(),
            &[ChangeKind::Create],
            Duration::from_secs(5),
        )
        .await
        .unwrap()
        .expect("an event");
    assert_eq!((event.seq, event.kind), (0, ChangeKind::Create));
    let writer = {
        let target = target.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            std::fs::write(&target, "{\"a\": 1}").unwrap();
        })
    };
    let event = fx
        .watches
        .wait(
            target.as_os_str(),
            &[ChangeKind::Write],
            Duration::from_secs(5),
        )
        .await
        .unwrap()
        .expect("an event");
    writer.await.unwrap();
    assert_eq!(event.kind, ChangeKind::Write);
    assert_eq!(event.size, Some(8));

    // Outside the roots: refused, nothing watched.
    let err = fx
        .watches
        .wait(
            fx.outside.path().join("x").as_os_str(),
            &[ChangeKind::Create],
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WatchError::File(FileError::Path(e)) if e.is_refusal()),
        "{err:?}"
    );
}

#[tokio::test]
async fn removing_the_watched_directory_ends_the_watcher() {
    let fx = Fixture::new(WatchLimits::default());
    std::fs::create_dir_all(fx.path("gone/sub")).unwrap();
    let watcher = fx.watch("gone", true).await;
    std::fs::remove_dir_all(fx.path("gone")).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut cursor = 0;
    let mut events = Vec::new();
    loop {
        let batch = tokio::time::timeout_at(deadline, watcher.next_batch(cursor, 100))
            .await
            .expect("the watcher closes");
        cursor = batch.cursor;
        events.extend(batch.records.into_iter().filter_map(|r| match r {
            Record::Change(e) => Some(e),
            Record::Overflow(_) => None,
        }));
        if batch.closed.is_some() {
            break;
        }
    }
    assert!(
        has(&events, ChangeKind::Remove, "sub"),
        "{:?}",
        summary(&events)
    );
    assert!(
        has(&events, ChangeKind::Remove, ""),
        "{:?}",
        summary(&events)
    );
    assert!(watcher.info().closed.is_some());
}

#[tokio::test]
async fn a_writer_closing_its_file_ends_the_coalescing_window() {
    let fx = Fixture::new(WatchLimits::default());
    std::fs::create_dir(fx.path("slow")).unwrap();
    let watcher = fx
        .watches
        .create(WatchSpec {
            debounce: Duration::from_millis(3_000),
            ..spec(&fx.path("slow"), false)
        })
        .await
        .unwrap();
    let started = std::time::Instant::now();
    std::fs::write(fx.path("slow/done.bin"), vec![7u8; 1 << 20]).unwrap();
    let (events, _) = changes_until(&watcher, |e| has(e, ChangeKind::Create, "done.bin")).await;
    // Reported when closed, complete, long before the 3 s window ends.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(events[0].size, Some(1 << 20));
    // A chmod alone (no writer to close) waits out the window.
    use std::os::unix::fs::PermissionsExt;
    let started = std::time::Instant::now();
    std::fs::set_permissions(
        fx.path("slow/done.bin"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let (events, _) = changes_until(&watcher, |e| has(e, ChangeKind::Chmod, "done.bin")).await;
    assert!(
        started.elapsed() >= Duration::from_millis(2_900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(events.len(), 2);
}
