//! Pause and resume against the fake platform: the states the proxies see, refusals, the
//! reaper's idle pause and its ends of a paused sandbox, the heartbeat and reconcile of paused
//! containers, and auto-resume taken once by many callers.

use std::time::Duration;

use super::*;
use crate::testing::harness::OWNER;
use crate::testing::{Harness, Step};

fn spec(auto_resume: bool, idle_pause: Option<i64>, idle: i64) -> CreateSpec {
    CreateSpec {
        auto_resume,
        idle_pause_secs: idle_pause,
        idle_timeout_secs: Some(idle),
        ..CreateSpec::default()
    }
}

async fn create(h: &Harness, spec: CreateSpec) -> SandboxRecord {
    h.sandboxes.create(OWNER, spec).await.expect("create").0
}

fn conflict(result: Result<SandboxRecord, SandboxError>) -> String {
    match result {
        Err(SandboxError::Conflict(message)) => message,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[tokio::test]
async fn a_paused_sandbox_is_frozen_refused_by_the_proxies_and_resumed_where_it_was() {
    let h = Harness::new().await;
    let sandbox = create(&h, CreateSpec::default()).await;
    let id = sandbox.id.as_str();
    let mut changes = h.sandboxes.lifecycle();

    let paused = h.sandboxes.pause(id, Some(OWNER)).await.unwrap();
    assert_eq!(paused.status, SandboxStatus::Paused);
    assert!(paused.paused_at.is_some());
    assert!(h.platform.container_of(id).unwrap().paused);
    assert_eq!(h.row(id).await.unwrap().status, SandboxStatus::Paused);
    assert!(matches!(
        changes.try_recv(),
        Ok(LifecycleChange::Paused { sandbox_id, .. }) if sandbox_id == id
    ));
    h.assert_nothing_leaks().await;

    // The proxies (and runs created on it) get a conflict naming the state and the way out.
    let refused = conflict(h.sandboxes.get_ready(id, Some(OWNER)).await);
    assert!(
        refused.contains("paused") && refused.contains("/resume"),
        "{refused}"
    );
    let again = conflict(h.sandboxes.pause(id, Some(OWNER)).await);
    assert!(again.contains("already paused"), "{again}");

    let resumed = h.sandboxes.resume(id, Some(OWNER)).await.unwrap();
    assert_eq!(resumed.status, SandboxStatus::Ready);
    assert_eq!(resumed.paused_at, None);
    assert!(!h.platform.container_of(id).unwrap().paused);
    assert_eq!(
        h.sandboxes.get_ready(id, Some(OWNER)).await.unwrap().status,
        SandboxStatus::Ready
    );
    let not_paused = conflict(h.sandboxes.resume(id, Some(OWNER)).await);
    assert!(not_paused.contains("not paused"), "{not_paused}");
    assert!(matches!(
        changes.try_recv(),
        Ok(LifecycleChange::Resumed { by_run: false, .. })
    ));
    h.assert_nothing_leaks().await;

    // Paused, it is deleted like any other (the container goes too).
    h.sandboxes.pause(id, Some(OWNER)).await.unwrap();
    h.sandboxes.delete(id, Some(OWNER)).await.unwrap();
    assert!(h.platform.container_of(id).is_none());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn pause_and_resume_are_scoped_to_the_key_and_change_nothing_when_refused() {
    let h = Harness::new().await;
    let sandbox = create(&h, CreateSpec::default()).await;
    let id = sandbox.id.as_str();

    for result in [
        h.sandboxes.pause(id, Some("key-other")).await,
        h.sandboxes.pause("sbx-missing", Some(OWNER)).await,
        h.sandboxes.resume(id, Some("key-other")).await,
    ] {
        assert!(
            matches!(result, Err(SandboxError::NotFound(_))),
            "{result:?}"
        );
    }
    // The platform fails the freeze: the sandbox stays ready and reachable.
    h.platform.fail_next(Step::Pause, "the freezer is busy");
    let failed = h.sandboxes.pause(id, Some(OWNER)).await;
    assert!(
        matches!(failed, Err(SandboxError::Backend(_))),
        "{failed:?}"
    );
    assert_eq!(h.row(id).await.unwrap().status, SandboxStatus::Ready);
    assert!(h.sandboxes.get_ready(id, Some(OWNER)).await.is_ok());
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn auto_resume_thaws_a_paused_sandbox_once_for_many_callers() {
    let h = Harness::new().await;
    let sandbox = create(&h, spec(true, None, 600)).await;
    let id = sandbox.id.as_str();
    h.sandboxes.pause(id, Some(OWNER)).await.unwrap();

    let calls = (0..5).map(|_| h.sandboxes.get_ready(id, Some(OWNER)));
    for result in futures_util::future::join_all(calls).await {
        assert_eq!(result.unwrap().status, SandboxStatus::Ready);
    }
    assert_eq!(h.platform.calls(Step::Resume), 1);
    assert!(!h.platform.container_of(id).unwrap().paused);
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn the_reaper_pauses_an_idle_sandbox_then_removes_it_at_its_idle_timeout() {
    let h = Harness::new().await;
    let pausing = create(&h, spec(false, Some(30), 120)).await;
    let never = create(&h, spec(false, None, 120)).await;

    h.clock.advance(Duration::from_secs(29));
    h.sandboxes.reap_once().await.unwrap();
    assert_eq!(
        h.row(&pausing.id).await.unwrap().status,
        SandboxStatus::Ready
    );

    h.clock.advance(Duration::from_secs(1));
    h.sandboxes.reap_once().await.unwrap();
    assert_eq!(
        h.row(&pausing.id).await.unwrap().status,
        SandboxStatus::Paused
    );
    assert_eq!(h.row(&never.id).await.unwrap().status, SandboxStatus::Ready);
    h.sandboxes.reap_once().await.unwrap();
    assert_eq!(h.metrics.sandboxes_paused.get(), 1, "the paused gauge");
    assert_eq!(h.metrics.sandboxes_live.get(), 1, "the live gauge");
    h.assert_nothing_leaks().await;

    // The heartbeat does not call a frozen sandboxd (it would not answer): the sandbox stays.
    let activity_calls = h.platform.calls(Step::Activity);
    h.sandboxes.heartbeat_once().await.unwrap();
    assert_eq!(h.platform.calls(Step::Activity), activity_calls + 1);
    assert_eq!(
        h.row(&pausing.id).await.unwrap().status,
        SandboxStatus::Paused
    );

    // Idle for its idle timeout (paused time counts), both are removed.
    h.clock.advance(Duration::from_secs(90));
    h.sandboxes.reap_once().await.unwrap();
    assert!(h.row(&pausing.id).await.is_none());
    assert!(h.row(&never.id).await.is_none());
    assert_eq!(h.ended(EndReason::Idle), 2);
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_paused_sandbox_ends_at_its_lifetime_and_is_lost_with_its_container() {
    let h = Harness::new().await;
    let short = create(
        &h,
        CreateSpec {
            max_lifetime_secs: Some(60),
            ..CreateSpec::default()
        },
    )
    .await;
    let vanishing = create(&h, CreateSpec::default()).await;
    h.sandboxes.pause(&short.id, Some(OWNER)).await.unwrap();
    h.sandboxes.pause(&vanishing.id, Some(OWNER)).await.unwrap();

    h.platform.vanish(&vanishing.id);
    h.sandboxes.heartbeat_once().await.unwrap();
    let lost = h.row(&vanishing.id).await.unwrap();
    assert_eq!(lost.status, SandboxStatus::Lost);
    assert!(lost.error.unwrap().contains("paused"));

    h.clock.advance(Duration::from_secs(60));
    h.sandboxes.reap_once().await.unwrap();
    assert!(h.row(&short.id).await.is_none());
    assert_eq!(h.ended(EndReason::Lifetime), 1);
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn reconcile_follows_what_the_containers_are() {
    let mut h = Harness::new().await;
    let paused = create(&h, CreateSpec::default()).await;
    let thawed = create(&h, CreateSpec::default()).await;
    let frozen_by_hand = create(&h, CreateSpec::default()).await;
    h.sandboxes.pause(&paused.id, Some(OWNER)).await.unwrap();
    h.sandboxes.pause(&thawed.id, Some(OWNER)).await.unwrap();
    // While the orchestrator is down: someone unpauses one and `docker pause`s another.
    h.platform.set_paused(&thawed.id, false);
    h.platform.set_paused(&frozen_by_hand.id, true);

    h.restart();
    let report = h.sandboxes.reconcile().await.unwrap();
    assert_eq!(report.adopted, 3, "{report:?}");
    assert_eq!(report.removed_containers, 0, "{report:?}");
    let status = async |id: &str| h.row(id).await.unwrap().status;
    assert_eq!(status(&paused.id).await, SandboxStatus::Paused);
    assert_eq!(status(&thawed.id).await, SandboxStatus::Ready);
    assert_eq!(status(&frozen_by_hand.id).await, SandboxStatus::Paused);
    h.assert_nothing_leaks().await;

    // Adopted paused sandboxes resume as any other.
    h.sandboxes.resume(&paused.id, Some(OWNER)).await.unwrap();
    h.sandboxes
        .resume(&frozen_by_hand.id, Some(OWNER))
        .await
        .unwrap();
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_paused_sandbox_counts_against_the_key_quota() {
    let h = Harness::with_flags(&["--max-sandboxes-per-key", "1"]).await;
    let sandbox = create(&h, CreateSpec::default()).await;
    h.sandboxes.pause(&sandbox.id, Some(OWNER)).await.unwrap();
    let refused = h.sandboxes.create(OWNER, CreateSpec::default()).await;
    assert!(
        matches!(refused, Err(SandboxError::Quota { live: 1, .. })),
        "{refused:?}"
    );
}

#[test]
fn idle_pause_reads_zero_as_never_and_bounds_the_rest() {
    assert_eq!(pause::idle_pause(None, Some(60), 3600), Ok(Some(60)));
    assert_eq!(pause::idle_pause(Some(0), Some(60), 3600), Ok(None));
    assert_eq!(pause::idle_pause(Some(5), None, 3600), Ok(Some(5)));
    let refused = pause::idle_pause(Some(-1), None, 3600).unwrap_err();
    assert_eq!(refused.field, "idle_pause_secs");
    assert!(pause::idle_pause(Some(3601), None, 3600).is_err());
}

#[tokio::test]
async fn another_instances_paused_sandbox_is_left_to_it() {
    let h = Harness::new().await;
    let sandbox = create(&h, CreateSpec::default()).await;
    h.sandboxes.pause(&sandbox.id, Some(OWNER)).await.unwrap();
    // The row now names another orchestrator instance (sharing the database).
    let mut theirs = h.row(&sandbox.id).await.unwrap();
    h.store.delete_sandbox(&theirs.id).await.unwrap();
    theirs.instance = Some("another-instance".into());
    h.store.insert_sandbox(&theirs).await.unwrap();

    let refused = conflict(h.sandboxes.resume(&sandbox.id, Some(OWNER)).await);
    assert!(
        refused.contains("another orchestrator instance"),
        "{refused}"
    );
    let row = h.row(&sandbox.id).await.unwrap();
    assert_eq!(row.status, SandboxStatus::Paused, "not marked lost");
    assert!(h.platform.container_of(&sandbox.id).unwrap().paused);
}

#[tokio::test]
async fn a_failed_pause_puts_the_sandbox_back_as_it_was() {
    let h = Harness::new().await;
    let sandbox = create(&h, spec(false, Some(30), 600)).await;
    h.platform
        .set_not_ready(&sandbox.id, &["chromium (starting)"]);
    h.sandboxes.heartbeat_once().await.unwrap();
    let degraded = h.row(&sandbox.id).await.unwrap();
    assert_eq!(degraded.status, SandboxStatus::Degraded);

    h.clock.advance(Duration::from_secs(31));
    h.platform.fail_next(Step::Pause, "the freezer is busy");
    h.sandboxes.reap_once().await.unwrap();
    let after = h.row(&sandbox.id).await.unwrap();
    assert_eq!(after.status, SandboxStatus::Degraded);
    assert_eq!(after.error, degraded.error);
    assert_eq!(
        after.last_active_at, degraded.last_active_at,
        "a failed pause is not activity"
    );
    // The next pass pauses it.
    h.sandboxes.reap_once().await.unwrap();
    assert_eq!(
        h.row(&sandbox.id).await.unwrap().status,
        SandboxStatus::Paused
    );
    h.assert_nothing_leaks().await;
}

#[tokio::test]
async fn a_container_frozen_or_thawed_behind_the_lifecycle_is_followed() {
    let h = Harness::new().await;
    let frozen = create(&h, CreateSpec::default()).await;
    let thawed = create(&h, CreateSpec::default()).await;
    h.sandboxes.pause(&thawed.id, Some(OWNER)).await.unwrap();
    h.platform.set_paused(&frozen.id, true);
    h.platform.set_paused(&thawed.id, false);

    h.sandboxes.heartbeat_once().await.unwrap();
    assert_eq!(
        h.row(&frozen.id).await.unwrap().status,
        SandboxStatus::Paused
    );
    assert_eq!(
        h.row(&thawed.id).await.unwrap().status,
        SandboxStatus::Ready
    );
    h.assert_nothing_leaks().await;
}

/// The paused heartbeat leaves a sandbox whose transition is under way alone: a resume that has
/// thawed the container and waits for sandboxd must not find the row marked resumed behind its
/// back (it then failed with "changed state while it was resumed": CI, the pause e2e test).
#[tokio::test]
async fn the_paused_heartbeat_leaves_a_resume_under_way_alone() {
    let h = Harness::new().await;
    let sandbox = create(&h, CreateSpec::default()).await;
    let id = sandbox.id.as_str();
    h.sandboxes.pause(id, Some(OWNER)).await.unwrap();
    let paused = h.row(id).await.unwrap();

    // A resume holds the turn and has thawed the container; the heartbeat runs meanwhile.
    let turn = h.sandboxes.transition_turn(id).await;
    h.platform.set_paused(id, false);
    h.sandboxes.check_paused(&paused).await;
    assert_eq!(
        h.row(id).await.unwrap().status,
        SandboxStatus::Paused,
        "the heartbeat took the resume's place"
    );
    drop(turn);

    // Without a transition under way, a container thawed behind the lifecycle's back is
    // still noticed.
    h.sandboxes.check_paused(&paused).await;
    assert_eq!(h.row(id).await.unwrap().status, SandboxStatus::Ready);
}
