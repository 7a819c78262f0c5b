//! Hibernate, wake and snapshots against the fake platform: the states and refusals, a failed
//! archive or wake changing nothing, auto-resume and the reaper's idle hibernation, and a crash
//! at each step finished or undone by reconcile with nothing half-made or leaked.

use std::time::Duration;

use super::*;
use crate::db::SnapshotRecord;
use crate::homes::Kind;
use crate::testing::harness::OWNER;
use crate::testing::{Harness, Step};

fn conflict<T: std::fmt::Debug>(result: Result<T, SandboxError>) -> String {
    match result {
        Err(SandboxError::Conflict(message)) => message,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

async fn create_with_home(h: &Harness, spec: CreateSpec, home: &[u8]) -> SandboxRecord {
    let record = h.sandboxes.create(OWNER, spec).await.expect("create").0;
    h.platform.set_home(&record.id, home);
    record
}

#[tokio::test]
async fn a_hibernated_sandbox_has_no_container_and_wakes_with_its_home() {
    let h = Harness::new().await;
    let sandbox = create_with_home(&h, CreateSpec::default(), b"the home").await;
    let id = sandbox.id.as_str();
    let mut changes = h.sandboxes.lifecycle();

    let hibernated = h.sandboxes.hibernate(id, Some(OWNER)).await.unwrap();
    assert_eq!(hibernated.status, SandboxStatus::Hibernated);
    assert!(hibernated.hibernated_at.is_some());
    assert!(h.platform.container_of(id).is_none(), "the container went");
    assert_eq!(
        std::fs::read(h.sandboxes.homes.path(Kind::Hibernated, id).unwrap()).unwrap(),
        b"the home"
    );
    assert!(matches!(
        changes.try_recv(),
        Ok(LifecycleChange::Hibernated { sandbox_id, .. }) if sandbox_id == id
    ));
    h.assert_nothing_leaks().await;

    let refused = conflict(h.sandboxes.get_ready(id, Some(OWNER)).await);
    assert!(
        refused.contains("hibernated") && refused.contains("/wake"),
        "{refused}"
    );
    assert!(conflict(h.sandboxes.hibernate(id, Some(OWNER)).await).contains("already"));
    assert!(conflict(h.sandboxes.pause(id, Some(OWNER)).await).contains("hibernated"));
    assert!(conflict(h.sandboxes.resume(id, Some(OWNER)).await).contains("not paused"));
    assert!(conflict(h.sandboxes.take_snapshot(id, OWNER).await).contains("wake it first"));

    let woken = h.sandboxes.wake(id, Some(OWNER)).await.unwrap();
    assert_eq!(woken.status, SandboxStatus::Ready);
    assert_eq!(woken.hibernated_at, None);
    let container = h.platform.container_of(id).expect("a new container");
    assert_eq!(container.home, b"the home", "it started with its kept home");
    assert_eq!(Some(container.container_id), woken.container_id);
    assert!(matches!(
        changes.try_recv(),
        Ok(LifecycleChange::Woken { by_run: false, .. })
    ));
    assert!(conflict(h.sandboxes.wake(id, Some(OWNER)).await).contains("not hibernated"));
    h.assert_nothing_leaks().await;

    // Hibernated again, it is deleted like any other, its kept home too.
    h.sandboxes.hibernate(id, Some(OWNER)).await.unwrap();
    h.sandboxes.delete(id, Some(OWNER)).await.unwrap();
    assert!(h.row(id).await.is_none());
    assert!(h.sandboxes.homes.ids(Kind::Hibernated).is_empty());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn failures_and_refusals_change_nothing() {
    let h = Harness::new().await;
    let sandbox = create_with_home(&h, CreateSpec::default(), b"home").await;
    let id = sandbox.id.as_str();
    for result in [
        h.sandboxes.hibernate(id, Some("key-other")).await,
        h.sandboxes.hibernate("sbx-missing", Some(OWNER)).await,
        h.sandboxes.wake(id, Some("key-other")).await,
    ] {
        assert!(
            matches!(result, Err(SandboxError::NotFound(_))),
            "{result:?}"
        );
    }
    // The archive fails: the sandbox stays ready, its container and its browser given back.
    h.platform.fail_next(Step::Archive, "sandboxd went away");
    conflict(h.sandboxes.hibernate(id, Some(OWNER)).await);
    assert_eq!(h.row(id).await.unwrap().status, SandboxStatus::Ready);
    assert!(h.sandboxes.get_ready(id, Some(OWNER)).await.is_ok());
    assert!(!h.platform.container_of(id).unwrap().held);
    // A paused sandbox whose archive fails is frozen again.
    h.sandboxes.pause(id, Some(OWNER)).await.unwrap();
    h.platform.fail_next(Step::Archive, "sandboxd went away");
    conflict(h.sandboxes.hibernate(id, Some(OWNER)).await);
    assert_eq!(h.row(id).await.unwrap().status, SandboxStatus::Paused);
    assert!(h.platform.container_of(id).unwrap().paused);
    h.assert_nothing_leaks().await;
    // Paused, it hibernates (thawed to be archived first).
    let hibernated = h.sandboxes.hibernate(id, Some(OWNER)).await.unwrap();
    assert_eq!(hibernated.status, SandboxStatus::Hibernated);
    // The new container does not start: still hibernated, its home kept, nothing left over.
    h.platform.fail_next(Step::Start, "no room");
    assert!(h.sandboxes.wake(id, Some(OWNER)).await.is_err());
    let row = h.row(id).await.unwrap();
    assert_eq!(row.status, SandboxStatus::Hibernated);
    assert!(row.error.is_some_and(|e| e.contains("no room")));
    h.assert_nothing_leaks().await;
    // A sandbox still being created cannot be hibernated or snapshotted.
    let mut held = h.platform.hold_next(Step::Start);
    let sandboxes = h.sandboxes.clone();
    let creating =
        tokio::spawn(async move { sandboxes.create(OWNER, CreateSpec::default()).await });
    held.reached().await;
    let row = h
        .rows()
        .await
        .into_iter()
        .find(|r| r.status == SandboxStatus::Creating)
        .expect("a creating row");
    assert!(conflict(h.sandboxes.hibernate(&row.id, Some(OWNER)).await).contains("creating"));
    assert!(conflict(h.sandboxes.take_snapshot(&row.id, OWNER).await).contains("creating"));
    held.release();
    creating.await.unwrap().unwrap();
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn auto_resume_and_runs_wake_a_hibernated_sandbox_and_the_reaper_hibernates_idle_ones() {
    let h = Harness::new().await;
    let spec = CreateSpec {
        auto_resume: true,
        idle_hibernate_secs: Some(60),
        idle_timeout_secs: Some(600),
        ..CreateSpec::default()
    };
    let sandbox = create_with_home(&h, spec, b"home").await;
    let id = sandbox.id.as_str();
    h.clock.advance(Duration::from_secs(61));
    h.sandboxes.reap_once().await.unwrap();
    assert_eq!(h.row(id).await.unwrap().status, SandboxStatus::Hibernated);
    // Many calls at once wake it once.
    let calls = (0..4).map(|_| h.sandboxes.get_ready(id, Some(OWNER)));
    for result in futures_util::future::join_all(calls).await {
        assert_eq!(result.unwrap().status, SandboxStatus::Ready);
    }
    assert_eq!(h.platform.calls(Step::Start), 2, "created, then woken once");
    // Hibernated, its idle timeout still ends it (with its kept home).
    h.sandboxes.hibernate(id, Some(OWNER)).await.unwrap();
    h.clock.advance(Duration::from_secs(601));
    h.sandboxes.reap_once().await.unwrap();
    assert!(h.row(id).await.is_none());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_crash_during_a_hibernation_a_wake_a_snapshot_or_a_fork_leaves_nothing_half_made() {
    let mut h = Harness::new().await;
    let a = create_with_home(&h, CreateSpec::default(), b"home a").await;
    let b = create_with_home(&h, CreateSpec::default(), b"home b").await;
    let c = create_with_home(&h, CreateSpec::default(), b"home c").await;

    // a: the process dies while the archive streams (its `.part` file is left, it is
    // `hibernating`, its container held).
    let mut archive = h.platform.hold_next(Step::Archive);
    let sandboxes = h.sandboxes.clone();
    let a_id = a.id.clone();
    let hibernating = tokio::spawn(async move { sandboxes.hibernate(&a_id, Some(OWNER)).await });
    archive.reached().await;
    hibernating.abort();
    std::fs::create_dir_all(h.dir.path().join("homes")).unwrap();
    std::fs::write(
        h.dir.path().join(format!("homes/{}.tar.part", a.id)),
        "half",
    )
    .unwrap();
    assert_eq!(
        h.row(&a.id).await.unwrap().status,
        SandboxStatus::Hibernating
    );

    // b: its archive was whole on disk, then the process died before the container went.
    h.store.mark_hibernating(&b.id).await.unwrap();
    std::fs::write(h.dir.path().join(format!("homes/{}.tar", b.id)), "home b").unwrap();

    // c: hibernated, then the process died while waking it (a new container started).
    h.sandboxes.hibernate(&c.id, Some(OWNER)).await.unwrap();
    let mut start = h.platform.hold_next(Step::Start);
    let sandboxes = h.sandboxes.clone();
    let c_id = c.id.clone();
    let waking = tokio::spawn(async move { sandboxes.wake(&c_id, Some(OWNER)).await });
    start.reached().await;
    waking.abort();
    assert_eq!(h.row(&c.id).await.unwrap().status, SandboxStatus::Waking);

    // A snapshot being taken, and a stray archive nobody refers to.
    let d = create_with_home(&h, CreateSpec::default(), b"home d").await;
    let mut snap = h.platform.hold_next(Step::Archive);
    let sandboxes = h.sandboxes.clone();
    let d_id = d.id.clone();
    let snapshotting = tokio::spawn(async move { sandboxes.take_snapshot(&d_id, OWNER).await });
    snap.reached().await;
    snapshotting.abort();
    std::fs::create_dir_all(h.dir.path().join("snapshots")).unwrap();
    std::fs::write(h.dir.path().join("snapshots/snp-stray.tar"), "x").unwrap();
    drop((archive, start, snap));

    // A fork the process died in: its own snapshot whole, its forks still being created. And a
    // snapshot a client kept, which stays.
    let kept = h.sandboxes.take_snapshot(&d.id, OWNER).await.unwrap();
    let forks_own = SnapshotRecord {
        id: "snp-forkown".into(),
        transient: true,
        ..kept.clone()
    };
    h.store.insert_snapshot(&forks_own).await.unwrap();
    std::fs::write(h.dir.path().join("snapshots/snp-forkown.tar"), "home d").unwrap();
    let mut fork = h.record("sbx-halffork", None);
    fork.status = SandboxStatus::Creating;
    h.store.insert_sandbox(&fork).await.unwrap();

    h.restart();
    h.sandboxes.reconcile().await.unwrap();
    assert_eq!(
        h.row(&a.id).await.unwrap().status,
        SandboxStatus::Ready,
        "undone"
    );
    assert!(!h.platform.container_of(&a.id).unwrap().held, "given back");
    assert_eq!(
        h.row(&b.id).await.unwrap().status,
        SandboxStatus::Hibernated,
        "finished"
    );
    assert!(h.platform.container_of(&b.id).is_none());
    let c_row = h.row(&c.id).await.unwrap();
    assert_eq!(c_row.status, SandboxStatus::Hibernated, "the wake undone");
    assert!(
        h.platform.container_of(&c.id).is_none(),
        "the half-woken container went"
    );
    let snapshots: Vec<String> = h
        .store
        .snapshots(None)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(
        snapshots,
        [kept.id.as_str()],
        "the half-taken snapshot and the interrupted fork's went"
    );
    assert_eq!(h.sandboxes.homes.ids(Kind::Snapshot), [kept.id.as_str()]);
    assert!(
        h.row("sbx-halffork").await.is_none(),
        "the half-made fork went"
    );
    h.assert_nothing_leaks().await;

    // What was kept still wakes.
    for id in [&b.id, &c.id] {
        assert_eq!(
            h.sandboxes.wake(id, Some(OWNER)).await.unwrap().status,
            SandboxStatus::Ready
        );
    }
    assert_eq!(h.platform.container_of(&b.id).unwrap().home, b"home b");
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn snapshots_are_owned_counted_and_start_forks_each_with_their_own_key() {
    let h = Harness::with_flags(&["--max-snapshots-per-key", "2"]).await;
    let parent = create_with_home(&h, CreateSpec::default(), b"prepared").await;
    let snapshot = h.sandboxes.take_snapshot(&parent.id, OWNER).await.unwrap();
    assert_eq!(snapshot.size_bytes, 8);
    assert!(matches!(
        h.sandboxes.snapshot(&snapshot.id, Some("key-other")).await,
        Err(SandboxError::SnapshotNotFound(_))
    ));
    assert!(
        h.sandboxes
            .snapshots(Some("key-other"))
            .await
            .unwrap()
            .is_empty()
    );
    let from_other = h
        .sandboxes
        .create(
            "key-other",
            CreateSpec {
                snapshot: Some(snapshot.id.clone()),
                ..CreateSpec::default()
            },
        )
        .await;
    assert!(
        matches!(from_other, Err(SandboxError::Invalid(_))),
        "{from_other:?}"
    );

    let (forks, _) = h
        .sandboxes
        .fork_sandbox(&parent.id, OWNER, 3, CreateSpec::default(), false)
        .await
        .unwrap();
    assert_eq!(forks.len(), 3);
    let mut keys = Vec::new();
    for fork in &forks {
        let container = h.platform.container_of(&fork.id).unwrap();
        assert_eq!(container.home, b"prepared");
        keys.push(container.api_key);
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 3, "each fork has its own key");
    assert_eq!(
        h.sandboxes.snapshots(Some(OWNER)).await.unwrap().len(),
        1,
        "the fork's snapshot was removed"
    );
    for count in [0, 21] {
        let refused = h
            .sandboxes
            .fork_sandbox(&parent.id, OWNER, count, CreateSpec::default(), false)
            .await;
        assert!(
            matches!(refused, Err(SandboxError::Invalid(_))),
            "{refused:?}"
        );
    }
    // A fork that cannot be made whole leaves none of its sandboxes.
    h.platform.fail_next(Step::Start, "no room");
    let before = h.rows().await.len();
    assert!(
        h.sandboxes
            .fork_sandbox(&parent.id, OWNER, 2, CreateSpec::default(), false)
            .await
            .is_err()
    );
    assert_eq!(h.rows().await.len(), before);
    // The quota.
    h.sandboxes.take_snapshot(&parent.id, OWNER).await.unwrap();
    let full = conflict(h.sandboxes.take_snapshot(&parent.id, OWNER).await);
    assert!(full.contains("limit is 2"), "{full}");
    h.sandboxes
        .delete_snapshot(&snapshot.id, Some(OWNER))
        .await
        .unwrap();
    assert_eq!(h.sandboxes.homes.ids(Kind::Snapshot).len(), 1);
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn the_warm_pool_fills_from_a_snapshot_and_serves_only_the_creates_that_name_it() {
    let mut h = Harness::new().await;
    let parent = create_with_home(&h, CreateSpec::default(), b"prepared").await;
    let snapshot = h.sandboxes.take_snapshot(&parent.id, OWNER).await.unwrap();
    h.sandboxes.delete(&parent.id, Some(OWNER)).await.unwrap();

    // A pool of a snapshot that is not there, or being taken, is refused at start.
    h.restart_with_flags(&["--pool-snapshot", "snp-nosuch"]);
    let refused = h.sandboxes.use_pool_snapshot().await.unwrap_err();
    assert!(refused.to_string().contains("--pool-snapshot"), "{refused}");

    h.restart_with_flags(&["--pool-snapshot", &snapshot.id]);
    h.sandboxes.use_pool_snapshot().await.unwrap();
    h.sandboxes.reconcile().await.unwrap();
    let members = h.fill_pool(2).await;
    for member in &members {
        assert_eq!(
            h.platform.container_of(&member.id).unwrap().home,
            b"prepared"
        );
    }
    let from_snapshot = CreateSpec {
        snapshot: Some(snapshot.id.clone()),
        ..CreateSpec::default()
    };
    let (claimed, source) = h
        .sandboxes
        .create(OWNER, from_snapshot.clone())
        .await
        .unwrap();
    assert_eq!(source, Source::Pool);
    assert!(members.iter().any(|m| m.id == claimed.id));
    assert_eq!(
        h.platform.container_of(&claimed.id).unwrap().home,
        b"prepared"
    );
    // A create without the snapshot starts cold; another key cannot name it at all.
    let (plain, source) = h
        .sandboxes
        .create(OWNER, CreateSpec::default())
        .await
        .unwrap();
    assert_eq!(source, Source::Cold);
    assert!(h.platform.container_of(&plain.id).unwrap().home.is_empty());
    assert!(matches!(
        h.sandboxes.create("key-other", from_snapshot).await,
        Err(SandboxError::Invalid(_))
    ));
    assert!(
        conflict(h.sandboxes.delete_snapshot(&snapshot.id, Some(OWNER)).await)
            .contains("--pool-snapshot")
    );
    h.assert_nothing_leaks().await;

    // Restarted with the bare image's pool, the snapshot's member is not adopted.
    h.restart_with_flags(&[]);
    h.sandboxes.use_pool_snapshot().await.unwrap();
    h.sandboxes.reconcile().await.unwrap();
    assert!(h.sandboxes.pool.ready_ids().is_empty());
    assert_eq!(
        h.platform.containers().len(),
        2,
        "the two claimed sandboxes"
    );
    h.sandboxes
        .delete_snapshot(&snapshot.id, Some(OWNER))
        .await
        .unwrap();
    h.assert_nothing_leaks().await;
}
