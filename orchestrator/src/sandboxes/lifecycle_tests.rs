//! The lifecycle against the fake platform (`crate::testing`): creates and deletes whose client
//! goes away half way, containers that die while starting, failures at every step, and the
//! "nothing leaks" invariant after random sequences of all of them.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use super::*;
use crate::testing::harness::{INSTANCE, OWNER};
use crate::testing::{Harness, Step, eventually};

/// Polls `request` until the platform reaches the held step, then drops it: a client that goes
/// away at that moment.
async fn give_up_at(held: &mut crate::testing::platform::Held, request: impl Future) {
    let mut request = pin!(request);
    tokio::select! {
        _ = &mut request => panic!("the request finished before the held step"),
        () = held.reached() => {}
    }
}

/// The only container of this instance (for a sandbox whose id the test does not know yet).
fn only_container(h: &Harness) -> crate::testing::platform::FakeContainer {
    let mut containers = h.platform.containers();
    assert_eq!(containers.len(), 1, "{containers:?}");
    containers.remove(0)
}

#[tokio::test]
async fn a_client_that_goes_away_mid_create_gets_a_sandbox_finished_not_leaked() {
    let h = Harness::new().await;
    let mut held = h.platform.hold_next(Step::Start);

    give_up_at(&mut held, h.sandboxes.create(OWNER, CreateSpec::default())).await;
    // The container exists; its client is gone.
    let container = only_container(&h);
    held.release();

    let id = container.sandbox_id.clone().unwrap();
    eventually("the sandbox to be ready", async || {
        h.row(&id)
            .await
            .is_some_and(|r| r.status == SandboxStatus::Ready)
    })
    .await;
    // It belongs to the caller's key, who can find it and delete it.
    let listed = h
        .sandboxes
        .list(Some(OWNER), None, &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].container_id.as_ref(),
        Some(&container.container_id)
    );
    h.assert_nothing_leaks().await;
    h.sandboxes.delete(&id, Some(OWNER)).await.unwrap();
    assert!(h.platform.containers().is_empty());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_client_that_goes_away_mid_create_of_a_sandbox_that_never_gets_ready_leaves_nothing() {
    let h = Harness::with_flags(&["--ready-timeout-secs", "2"]).await;
    h.platform.boot_not_ready(&["Xvfb (starting)"]);
    let mut held = h.platform.hold_next(Step::Start);

    give_up_at(&mut held, h.sandboxes.create(OWNER, CreateSpec::default())).await;
    held.release();

    eventually("the failed sandbox to be cleaned up", async || {
        h.ended(EndReason::Failed) == 1
    })
    .await;
    assert!(h.platform.containers().is_empty());
    assert!(h.rows().await.is_empty());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_start_that_fails_after_its_client_went_away_leaves_nothing() {
    let h = Harness::new().await;
    let mut held = h.platform.hold_next(Step::Start);

    give_up_at(&mut held, h.sandboxes.create(OWNER, CreateSpec::default())).await;
    let id = only_container(&h).sandbox_id.unwrap();
    assert_eq!(
        h.row(&id).await.map(|r| r.status),
        Some(SandboxStatus::Creating)
    );
    held.fail("the daemon restarted");

    eventually("the row to go", async || h.row(&id).await.is_none()).await;
    assert!(h.platform.containers().is_empty());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_client_that_goes_away_mid_delete_still_gets_the_sandbox_deleted() {
    let h = Harness::new().await;
    let sandbox = h.create().await;
    let mut held = h.platform.hold_next(Step::Remove);

    give_up_at(&mut held, h.sandboxes.delete(&sandbox.id, Some(OWNER))).await;
    assert_eq!(
        h.row(&sandbox.id).await.map(|r| r.status),
        Some(SandboxStatus::Deleting)
    );
    // The reaper meanwhile does not remove it a second time.
    h.sandboxes.reap_once().await.unwrap();
    held.release();

    // The removal task deletes the row, then counts the ending: wait for both.
    eventually("the sandbox to be deleted and counted", async || {
        h.row(&sandbox.id).await.is_none() && h.ended(EndReason::Deleted) == 1
    })
    .await;
    assert!(h.platform.containers().is_empty());
    assert_eq!(h.platform.calls(Step::Remove), 1);
    assert_eq!(h.ended(EndReason::Deleted), 1);
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_container_that_dies_during_readiness_fails_the_create_and_is_removed() {
    for vanishes in [false, true] {
        let h = Harness::new().await;
        h.platform.boot_not_ready(&["chromium (starting)"]);
        let mut held = h.platform.hold_next(Step::Ready);
        let create = tokio::spawn({
            let sandboxes = h.sandboxes.clone();
            async move { sandboxes.create(OWNER, CreateSpec::default()).await }
        });
        held.reached().await;
        let container = only_container(&h);
        let id = container.sandbox_id.clone().unwrap();
        if vanishes {
            // It exited and `auto_remove` deleted it.
            h.platform.vanish(&id);
        } else {
            h.platform.kill(&id);
        }
        held.release();

        let error = create.await.unwrap().expect_err("the create fails");

        let SandboxError::NotReady { reason, logs } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(reason, "the container exited before it was ready");
        if vanishes {
            assert!(logs.starts_with("(logs unavailable"), "{logs}");
        } else {
            assert_eq!(
                logs,
                &format!("the last lines of {}", container.container_id)
            );
            assert_eq!(h.platform.removed(), vec![container.container_id.clone()]);
        }
        assert!(h.platform.containers().is_empty());
        assert!(h.row(&id).await.is_none(), "no row is left behind");
        assert_eq!(h.ended(EndReason::Failed), 1);
        h.assert_nothing_leaks().await;
    }
}

#[tokio::test]
async fn a_sandbox_that_never_gets_ready_is_removed_after_the_ready_timeout() {
    let h = Harness::with_flags(&["--ready-timeout-secs", "5"]).await;
    h.platform.boot_not_ready(&["Xvfb (starting)"]);
    let started = h.clock.now_ms();

    let error = h
        .sandboxes
        .create(OWNER, CreateSpec::default())
        .await
        .expect_err("the create fails");

    let SandboxError::NotReady { reason, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        reason,
        "not ready after 5 s (last answer: 503 not ready: Xvfb (starting))"
    );
    let waited = h.clock.now_ms() - started;
    assert!((5000..5100).contains(&waited), "waited {waited} ms");
    // The container was checked about once a second while it was polled.
    assert!((4..=5).contains(&h.platform.calls(Step::Inspect)));
    assert!(h.platform.containers().is_empty());
    assert!(h.rows().await.is_empty());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_start_that_fails_leaves_nothing() {
    let h = Harness::new().await;
    h.platform.fail_next(Step::Start, "no such image");
    let error = h
        .sandboxes
        .create(OWNER, CreateSpec::default())
        .await
        .expect_err("the start fails");
    assert!(matches!(error, SandboxError::Backend(_)), "{error:?}");
    assert!(h.platform.containers().is_empty());
    assert!(h.rows().await.is_empty());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_sandbox_that_cannot_be_recorded_as_ready_is_removed() {
    use sqlx::Connection;
    let h = Harness::new().await;
    let mut sqlite = sqlx::SqliteConnection::connect(&h.database_url())
        .await
        .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_ready BEFORE UPDATE OF status ON sandboxes \
         WHEN NEW.status = 'ready' BEGIN SELECT RAISE(ABORT, 'injected: the disk is full'); END",
    )
    .execute(&mut sqlite)
    .await
    .unwrap();

    let error = h
        .sandboxes
        .create(OWNER, CreateSpec::default())
        .await
        .expect_err("the create fails");

    assert!(matches!(error, SandboxError::Store(_)), "{error:?}");
    assert!(
        h.platform.containers().is_empty(),
        "the container is removed"
    );
    assert!(h.rows().await.is_empty());
    assert_eq!(h.ended(EndReason::Failed), 1);
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn degraded_sandboxes_count_against_the_quota() {
    let h = Harness::with_flags(&["--max-sandboxes-per-key", "1"]).await;
    let sandbox = h.create().await;
    h.platform
        .set_not_ready(&sandbox.id, &["chromium (crashed)"]);
    h.sandboxes.heartbeat_once().await.unwrap();
    assert_eq!(
        h.row(&sandbox.id).await.map(|r| r.status),
        Some(SandboxStatus::Degraded)
    );

    let error = h
        .sandboxes
        .create(OWNER, CreateSpec::default())
        .await
        .expect_err("over the quota");

    assert!(
        matches!(error, SandboxError::Quota { live: 1, limit: 1 }),
        "{error:?}"
    );
    assert_eq!(h.platform.containers().len(), 1);
}

#[tokio::test]
async fn a_sandbox_still_being_created_cannot_be_deleted_and_is_not_reaped() {
    let h = Harness::new().await;
    let mut held = h.platform.hold_next(Step::Start);
    let create = tokio::spawn({
        let sandboxes = h.sandboxes.clone();
        async move { sandboxes.create(OWNER, CreateSpec::default()).await }
    });
    held.reached().await;
    let id = only_container(&h).sandbox_id.unwrap();

    let error = h
        .sandboxes
        .delete(&id, Some(OWNER))
        .await
        .expect_err("still being created");
    assert!(matches!(error, SandboxError::Conflict(_)), "{error:?}");
    h.clock.advance(Duration::from_secs(7200));
    h.sandboxes.reap_once().await.unwrap();
    held.release();

    let (record, _) = create.await.unwrap().unwrap();
    assert_eq!(record.status, SandboxStatus::Ready);
    h.assert_nothing_leaks().await;
}

/// One step of a random sequence.
async fn random_step(h: &Harness, rng: &mut fastrand::Rng) {
    let live: Vec<SandboxRecord> = h
        .rows()
        .await
        .into_iter()
        .filter(|r| r.status.is_live() && !r.pooled)
        .collect();
    let pick =
        |rng: &mut fastrand::Rng| (!live.is_empty()).then(|| live[rng.usize(..live.len())].clone());
    match rng.u8(..12) {
        0 | 1 => {
            let _ = h.sandboxes.create(OWNER, CreateSpec::default()).await;
        }
        2 => {
            let step = [Step::Start, Step::Ready][rng.usize(..2)];
            h.platform.fail_next(step, "injected");
            let _ = h
                .sandboxes
                .create(OWNER, crate::testing::harness::cold_spec())
                .await;
        }
        3 => {
            // A container whose sandboxd never gets ready (the timeout is 1 s).
            h.platform.boot_not_ready(&["Xvfb (starting)"]);
            let _ = h.sandboxes.create(OWNER, CreateSpec::default()).await;
            h.platform.boot_not_ready(&[]);
        }
        4 | 5 => {
            if let Some(record) = pick(rng) {
                if rng.bool() {
                    h.platform.fail_next(Step::Remove, "injected");
                }
                let _ = h.sandboxes.delete(&record.id, Some(OWNER)).await;
            }
        }
        6 => {
            if let Some(record) = pick(rng) {
                if rng.bool() {
                    h.platform.kill(&record.id);
                } else {
                    h.platform.vanish(&record.id);
                }
            }
        }
        7 => {
            if let Some(record) = pick(rng) {
                let programs: &[&str] = if rng.bool() {
                    &["chromium (backoff)"]
                } else {
                    &[]
                };
                h.platform.set_not_ready(&record.id, programs);
            }
        }
        8 => {
            let missing = h
                .sandboxes
                .pool
                .target()
                .saturating_sub(h.sandboxes.pool.ready_count());
            if missing > 0 {
                h.fill_pool(1).await;
            }
        }
        9 => {
            if let Some(record) = pick(rng) {
                h.sandboxes.activity.touch(&record.id);
            }
        }
        _ => h.clock.advance(Duration::from_secs(rng.u64(1..40))),
    }
}

#[tokio::test]
async fn nothing_leaks_after_any_sequence_of_creates_deletes_and_failures() {
    for seed in 0..8 {
        let h = Harness::with_flags(&[
            "--pool-size",
            "2",
            "--ready-timeout-secs",
            "1",
            "--idle-timeout-secs",
            "60",
            "--max-lifetime-secs",
            "150",
            "--max-sandboxes-per-key",
            "6",
        ])
        .await;
        let mut rng = fastrand::Rng::with_seed(seed);
        for step in 0..30 {
            random_step(&h, &mut rng).await;
            h.platform.clear_failures();
            // The background passes run; then every container has its row and every row its
            // container.
            h.sandboxes.heartbeat_once().await.unwrap();
            h.sandboxes.reap_once().await.unwrap();
            let leaks = h.leaks().await;
            assert!(leaks.is_empty(), "seed {seed}, step {step}: {leaks:#?}");
        }
        // Everything ends eventually, and nothing is left.
        h.clock.advance(Duration::from_secs(24 * 3600));
        h.sandboxes.heartbeat_once().await.unwrap();
        h.sandboxes.reap_once().await.unwrap();
        h.sandboxes.reap_once().await.unwrap();
        let left: Vec<_> = h.rows().await.into_iter().filter(|r| !r.pooled).collect();
        assert!(left.is_empty(), "seed {seed}: {left:#?}");
        assert!(
            h.platform
                .containers()
                .iter()
                .all(|c| c.instance == INSTANCE
                    && h.sandboxes
                        .pool
                        .ready_ids()
                        .contains(c.sandbox_id.as_ref().unwrap())),
            "seed {seed}: only pool members are left"
        );
        h.assert_nothing_leaks().await;
    }
}
