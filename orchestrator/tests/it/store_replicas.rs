//! What several orchestrator replicas share through the store (issue 25), on both databases
//! (called from `store`): replica rows, duty leases, pool members, the control gate, commands
//! for a run another replica drives, viewer tickets, and (Postgres) event announcements.

use std::time::Duration;

use anyhow::ensure;
use orchestrator::db::{
    QuotaInsert, RunStatus, SandboxStatus, StatusChange, Store, ViewerTicketRecord, WakeMark,
};

use crate::store::{run_record, sandbox};

pub(crate) async fn exercise(store: &Store) -> anyhow::Result<()> {
    replicas_beat_and_a_second_process_with_one_id_is_told(store).await?;
    a_duty_lease_has_one_holder_until_it_expires_or_is_given_up(store).await?;
    pool_members_deleting_marks_and_the_control_gate_are_shared(store).await?;
    a_run_command_is_taken_once_by_the_driver_and_answered(store).await?;
    a_viewer_ticket_is_used_once_by_any_replica(store).await?;
    Ok(())
}

async fn replicas_beat_and_a_second_process_with_one_id_is_told(
    store: &Store,
) -> anyhow::Result<()> {
    store
        .register_replica("rep-a", "boot-1", Some("http://a"), 1_000)
        .await?;
    store
        .register_replica("rep-b", "boot-1", None, 1_000)
        .await?;
    ensure!(store.beat_replica("rep-a", "boot-1", 2_000).await?);
    // Started again (a new process): the old one's beats are refused.
    store
        .register_replica("rep-a", "boot-2", Some("http://a2"), 3_000)
        .await?;
    ensure!(!store.beat_replica("rep-a", "boot-1", 4_000).await?);
    ensure!(store.beat_replica("rep-a", "boot-2", 4_000).await?);
    let replicas = store.replicas().await?;
    let a = replicas.iter().find(|r| r.id == "rep-a").expect("rep-a");
    assert_eq!(
        (a.boot.as_str(), a.address.as_deref(), a.seen_at),
        ("boot-2", Some("http://a2"), 4_000)
    );
    assert_eq!(
        store.forget_replicas(2_000).await?,
        1,
        "rep-b, not seen since 1 000"
    );
    assert_eq!(store.replicas().await?.len(), 1);
    Ok(())
}

async fn a_duty_lease_has_one_holder_until_it_expires_or_is_given_up(
    store: &Store,
) -> anyhow::Result<()> {
    ensure!(store.hold_lease("reaper", "rep-a", 1_000, 16_000).await?);
    ensure!(
        !store.hold_lease("reaper", "rep-b", 2_000, 17_000).await?,
        "held by rep-a"
    );
    ensure!(
        store.hold_lease("reaper", "rep-a", 5_000, 20_000).await?,
        "renewed"
    );
    assert_eq!(
        store.lease_holder("reaper", 6_000).await?.as_deref(),
        Some("rep-a")
    );
    ensure!(!store.hold_lease("reaper", "rep-b", 19_999, 35_000).await?);
    ensure!(
        store.hold_lease("reaper", "rep-b", 20_001, 35_000).await?,
        "expired: taken"
    );
    ensure!(
        !store.hold_lease("reaper", "rep-a", 21_000, 36_000).await?,
        "lost"
    );
    // Another duty is another lease.
    ensure!(
        store
            .hold_lease("pool_refill", "rep-a", 21_000, 36_000)
            .await?
    );
    // Given up by its holder only.
    store.release_lease("reaper", "rep-a").await?;
    assert_eq!(
        store.lease_holder("reaper", 22_000).await?.as_deref(),
        Some("rep-b")
    );
    store.release_lease("reaper", "rep-b").await?;
    assert_eq!(store.lease_holder("reaper", 22_000).await?, None);
    ensure!(store.hold_lease("reaper", "rep-a", 22_000, 37_000).await?);
    Ok(())
}

async fn pool_members_deleting_marks_and_the_control_gate_are_shared(
    store: &Store,
) -> anyhow::Result<()> {
    let mut member = sandbox("sbx-rep-pool", None, true);
    member.instance = Some("inst-rep".into());
    member.replica = Some("rep-a".into());
    store.insert_sandbox(&member).await?;
    assert!(
        store.pool_members("inst-rep").await?.is_empty(),
        "still creating"
    );
    store
        .set_status(&member.id, SandboxStatus::Ready, None, None)
        .await?;
    let mut other = sandbox("sbx-rep-own", Some("key-1"), false);
    other.instance = Some("inst-rep".into());
    other.status = SandboxStatus::Ready;
    store.insert_sandbox(&other).await?;
    let members = store.pool_members("inst-rep").await?;
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].id, member.id);
    assert_eq!(members[0].replica.as_deref(), Some("rep-a"));

    // The control gate: an older value never replaces a newer one, and while one driver's
    // agent drives the sandbox another driver cannot open it.
    assert!(store.sandbox(&other.id).await?.expect("row").control_open);
    let gate = |open, seq, driver| store.write_control_gate(&other.id, open, seq, driver);
    assert_eq!(
        gate(false, 100, Some("rep-a/boot")).await?,
        Some((false, 100))
    );
    assert_eq!(gate(true, 50, None).await?, Some((false, 100)), "older");
    let run = run_record("run-gate", Some(&other.id), None, "rep-a/boot");
    store.insert_run(&run).await?;
    let running = StatusChange {
        status: RunStatus::Running,
        answer: None,
        reason: None,
    };
    store
        .append_event(&run.id, "rep-a/boot", "status", "{}", 2_000, Some(&running))
        .await?
        .expect("appended by the lease holder");
    assert_eq!(
        gate(true, 200, Some("rep-b/boot")).await?,
        Some((false, 100)),
        "a stalled driver cannot reopen it over the one whose agent drives"
    );
    assert_eq!(
        gate(true, 300, Some("rep-a/boot")).await?,
        Some((true, 300))
    );
    let row = store.sandbox(&other.id).await?.expect("row");
    assert_eq!((row.control_open, row.control_seq), (true, 300));

    store.mark_deleting(&other.id, Some("rep-b")).await?;
    let row = store.sandbox(&other.id).await?.expect("row");
    assert_eq!(
        (row.status, row.replica.as_deref()),
        (SandboxStatus::Deleting, Some("rep-b"))
    );
    // A removal that failed gives its claim up, for the reaper to retry.
    store.release_deleting(&other.id, "rep-a").await?;
    assert_eq!(
        store
            .sandbox(&other.id)
            .await?
            .expect("row")
            .replica
            .as_deref(),
        Some("rep-b")
    );
    store.release_deleting(&other.id, "rep-b").await?;
    assert_eq!(store.sandbox(&other.id).await?.expect("row").replica, None);
    assert_eq!(store.count_pool_members("inst-rep").await?, 1);
    store.delete_sandbox(&other.id).await?;
    store.delete_sandbox(&member.id).await?;
    Ok(())
}

async fn a_run_command_is_taken_once_by_the_driver_and_answered(
    store: &Store,
) -> anyhow::Result<()> {
    let run = run_record("run-relay", None, None, "rep-a/boot-2");
    store.insert_run(&run).await?;
    store
        .insert_run_command("cmd-1", &run.id, r#"{"kind":"take_over"}"#, 5_000)
        .await?;
    store
        .insert_run_command("cmd-old", &run.id, r#"{"kind":"cancel"}"#, 100)
        .await?;
    assert!(
        store
            .take_run_commands("rep-b/boot-1", 1_000)
            .await?
            .is_empty(),
        "not the driver"
    );
    let taken = store.take_run_commands("rep-a/boot-2", 1_000).await?;
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0].id, "cmd-1");
    assert_eq!(taken[0].command, r#"{"kind":"take_over"}"#);
    assert!(
        store
            .take_run_commands("rep-a/boot-2", 1_000)
            .await?
            .is_empty(),
        "taken once"
    );
    assert_eq!(store.run_command_answer("cmd-1").await?, None);
    store
        .answer_run_command("cmd-1", r#"{"outcome":"done"}"#, 6_000)
        .await?;
    assert_eq!(
        store.run_command_answer("cmd-1").await?.as_deref(),
        Some(r#"{"outcome":"done"}"#)
    );
    assert_eq!(store.purge_run_commands(1_000).await?, 1, "the old one");
    assert_eq!(store.purge_run_commands(10_000).await?, 1);
    Ok(())
}

async fn a_viewer_ticket_is_used_once_by_any_replica(store: &Store) -> anyhow::Result<()> {
    let ticket = |sandbox: &str, made_at: i64| ViewerTicketRecord {
        sandbox_id: sandbox.into(),
        key_id: "key-t".into(),
        owner: Some("key-t".into()),
        view_only: true,
        made_at,
    };
    store
        .insert_viewer_ticket("h1", &ticket("sbx-1", 1_000), 2, 0)
        .await?;
    assert_eq!(
        store.take_viewer_ticket("h1").await?,
        Some(ticket("sbx-1", 1_000))
    );
    assert_eq!(store.take_viewer_ticket("h1").await?, None, "used up");
    // A key's oldest tickets go beyond the cap; expired ones go at the next insert.
    for (hash, at) in [("h2", 2_000), ("h3", 3_000), ("h4", 4_000)] {
        store
            .insert_viewer_ticket(hash, &ticket("sbx-1", at), 2, 0)
            .await?;
    }
    assert_eq!(store.take_viewer_ticket("h2").await?, None, "over the cap");
    store
        .insert_viewer_ticket("h5", &ticket("sbx-1", 70_000), 2, 3_500)
        .await?;
    assert_eq!(store.take_viewer_ticket("h3").await?, None, "expired");
    assert!(store.take_viewer_ticket("h4").await?.is_some());
    assert!(store.take_viewer_ticket("h5").await?.is_some());
    Ok(())
}

/// Two replicas (two stores) creating for one key with places for three: ten inserts at once,
/// three pass, whichever replica each came through.
pub(crate) async fn a_keys_quota_holds_across_replicas(url: &str) -> anyhow::Result<()> {
    let stores = [Store::connect(url).await?, Store::connect(url).await?];
    let inserts = (0..10).map(|i| {
        let store = stores[i % 2].clone();
        async move {
            let mut record = sandbox(&format!("sbx-quota-{i}"), Some("key-quota"), false);
            record.status = SandboxStatus::Ready;
            store.insert_sandbox_within_quota(&record, 3).await
        }
    });
    let results = futures_util::future::try_join_all(inserts).await?;
    let inserted = results
        .iter()
        .filter(|r| **r == QuotaInsert::Inserted)
        .count();
    assert_eq!(inserted, 3, "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| matches!(r, QuotaInsert::Inserted | QuotaInsert::Full { live: 3 })),
        "{results:?}"
    );
    assert_eq!(stores[0].count_live_sandboxes("key-quota").await?, 3);
    Ok(())
}

/// Two replicas waking hibernated sandboxes of one key with one place left: of four wakes at
/// once, one marks its sandbox waking, the others find the key full and write nothing.
pub(crate) async fn a_wake_counts_against_the_quota_across_replicas(
    url: &str,
) -> anyhow::Result<()> {
    let stores = [Store::connect(url).await?, Store::connect(url).await?];
    for i in 0..2 {
        let mut record = sandbox(&format!("sbx-wq-live-{i}"), Some("key-wake"), false);
        record.status = SandboxStatus::Ready;
        stores[0].insert_sandbox(&record).await?;
    }
    for i in 0..4 {
        let mut record = sandbox(&format!("sbx-wq-{i}"), Some("key-wake"), false);
        record.status = SandboxStatus::Hibernated;
        stores[0].insert_sandbox(&record).await?;
    }
    let wakes = (0..4).map(|i| {
        let store = stores[i % 2].clone();
        async move {
            store
                .mark_waking_within_quota(&format!("sbx-wq-{i}"), Some("key-wake"), 3)
                .await
        }
    });
    let results = futures_util::future::try_join_all(wakes).await?;
    let marked = results.iter().filter(|r| **r == WakeMark::Marked).count();
    assert_eq!(marked, 1, "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| matches!(r, WakeMark::Marked | WakeMark::Full { live: 3 })),
        "{results:?}"
    );
    assert_eq!(stores[0].count_live_sandboxes("key-wake").await?, 3);
    // Without a quota, or for a sandbox no longer hibernated, nothing counts.
    assert_eq!(
        stores[1]
            .mark_waking_within_quota("sbx-wq-live-0", Some("key-wake"), 0)
            .await?,
        WakeMark::Changed
    );
    Ok(())
}

/// Postgres: an event appended through one store is announced to another store's listener
/// (another replica) with the run's id.
pub(crate) async fn appends_are_announced_to_other_replicas(url: &str) -> anyhow::Result<()> {
    let listening = Store::connect(url).await?;
    let appending = Store::connect(url).await?;
    let mut appends = listening.run_appends();
    tokio::spawn(listening.clone().listen_forever());
    let run = run_record("run-announced", None, None, "rep-a/boot-1");
    appending.insert_run(&run).await?;
    // The listener connects in the background: append until it hears one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        appending
            .append_event(&run.id, "rep-a/boot-1", "note", "{}", 2_000, None)
            .await?
            .expect("appended by the lease holder");
        match tokio::time::timeout(Duration::from_millis(500), appends.recv()).await {
            Ok(Ok(id)) => {
                assert_eq!(id, run.id);
                break;
            }
            Ok(Err(error)) => anyhow::bail!("{error}"),
            Err(_) => ensure!(
                tokio::time::Instant::now() < deadline,
                "no announcement within 30 s"
            ),
        }
    }
    Ok(())
}
