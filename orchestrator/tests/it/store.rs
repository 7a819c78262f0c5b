//! The store and the key registry against both databases: SQLite (a file in a temp dir) and a
//! real, throwaway Postgres cluster started for the test on a loopback port (Debian's
//! `postgresql` package; `scripts/test.sh` installs it), and an orchestrator whose Postgres
//! goes away for a while.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentbox_tests::postgres::Postgres;
use anyhow::{Context, ensure};
use orchestrator::auth::ApiKeys;
use orchestrator::db::{
    ApiKeyRecord, ArtifactRecord, ConsoleSessionRecord, RunFilter, RunInsert, RunRecord, RunStatus,
    SandboxFilter, SandboxRecord, SandboxStatus, StatusChange, Store, Timeouts, TokenRecord,
    sqlite_url,
};

use crate::common::{ADMIN_KEY, Options, Orchestrator};

pub(crate) fn sandbox(id: &str, owner: Option<&str>, pooled: bool) -> SandboxRecord {
    SandboxRecord {
        id: id.into(),
        owner_key_id: owner.map(str::to_owned),
        image: "agentbox/sandbox:test".into(),
        status: SandboxStatus::Creating,
        pooled,
        container_id: None,
        address: None,
        instance: Some("inst-a".into()),
        legacy_key: None,
        resolution: Some("1280x800".into()),
        env: BTreeMap::from([("A".into(), "1".into())]),
        metadata: BTreeMap::from([
            ("team".into(), "red".into()),
            ("quote".into(), "it's \"x\"".into()),
        ]),
        idle_timeout_secs: 60,
        max_lifetime_secs: 3600,
        created_at: 1_000,
        ready_at: None,
        expires_at: 3_601_000,
        last_active_at: 1_000,
        ended_at: None,
        error: None,
        paused_at: None,
        auto_resume: pooled,
        idle_pause_secs: (!pooled).then_some(45),
        hibernated_at: None,
        idle_hibernate_secs: None,
        replica: None,
        control_open: true,
        control_seq: 0,
    }
}

async fn exercise(url: &str) -> anyhow::Result<()> {
    // Migrations are idempotent: connecting twice is fine.
    Store::connect(url).await?.close().await;
    let store = Store::connect(url).await?;
    settings_keep_their_first_value(&store).await?;
    keys_are_found_by_hash_unique_and_revoked_once(&store).await?;
    sandboxes_are_listed_by_owner_status_pool_and_instance(&store).await?;
    health_moves_between_ready_and_degraded_and_no_sandbox_key_is_stored(&store).await?;
    touch_only_moves_forward_and_timeouts_are_set(&store).await?;
    a_pool_member_is_claimed_once_within_its_keys_quota(&store).await?;
    tokens_and_share_links_are_revoked_apart(&store).await?;
    deleting_a_sandbox_takes_its_tokens_but_not_its_share_links(&store).await?;
    the_key_registry_bootstraps_once_authenticates_and_revokes(&store).await?;
    exercise_runs(&store).await?;
    exercise_console_sessions(&store).await?;
    crate::store_replicas::exercise(&store).await?;
    store.close().await;
    Ok(())
}

async fn settings_keep_their_first_value(store: &Store) -> anyhow::Result<()> {
    // Settings keep their first value.
    assert_eq!(
        store.setting_or_insert("instance_id", "first").await?,
        "first"
    );
    assert_eq!(
        store.setting_or_insert("instance_id", "second").await?,
        "first"
    );
    Ok(())
}

async fn keys_are_found_by_hash_unique_and_revoked_once(store: &Store) -> anyhow::Result<()> {
    // Keys.
    let key = ApiKeyRecord {
        id: "key-1".into(),
        name: "ci".into(),
        key_hash: "ab".repeat(32),
        is_admin: false,
        created_at: 5,
        revoked_at: None,
    };
    store.insert_key(&key).await?;
    assert_eq!(store.key_by_hash(&key.key_hash).await?, Some(key.clone()));
    assert_eq!(store.key_by_hash("nope").await?, None);
    assert!(
        store.insert_key(&key).await.is_err(),
        "ids and hashes are unique"
    );
    assert!(store.revoke_key("key-1", 9).await?);
    assert!(!store.revoke_key("key-1", 10).await?, "already revoked");
    assert_eq!(store.list_keys().await?[0].revoked_at, Some(9));
    assert_eq!(
        store.key("key-1").await?.context("key-1")?.revoked_at,
        Some(9)
    );
    assert_eq!(store.key("nope").await?, None);
    assert_eq!(
        store.keys_revoked_since(9).await?,
        vec!["key-1".to_string()]
    );
    assert!(store.keys_revoked_since(10).await?.is_empty());
    Ok(())
}

async fn sandboxes_are_listed_by_owner_status_pool_and_instance(
    store: &Store,
) -> anyhow::Result<()> {
    // Sandboxes.
    let mine = sandbox("sbx-a", Some("key-1"), false);
    store.insert_sandbox(&mine).await?;
    store
        .insert_sandbox(&sandbox("sbx-b", Some("key-2"), false))
        .await?;
    store.insert_sandbox(&sandbox("sbx-p", None, true)).await?;
    assert_eq!(store.sandbox("sbx-a").await?, Some(mine.clone()));
    store.set_container("sbx-a", "c0ffee", "172.30.0.5").await?;
    store.mark_ready("sbx-a", 2_000).await?;
    let ready = store.sandbox("sbx-a").await?.context("sbx-a")?;
    assert_eq!(
        (ready.status, ready.ready_at, ready.last_active_at),
        (SandboxStatus::Ready, Some(2_000), 2_000)
    );
    assert_eq!(ready.address.as_deref(), Some("172.30.0.5"));
    let all = store.list_sandboxes(&SandboxFilter::default()).await?;
    assert_eq!(all.len(), 2, "pool members are not listed by default");
    let with_pool = store
        .list_sandboxes(&SandboxFilter {
            include_pooled: true,
            ..Default::default()
        })
        .await?;
    assert_eq!(with_pool.len(), 3);
    let filter = SandboxFilter {
        owner_key_id: Some("key-1".into()),
        status: Some(SandboxStatus::Ready),
        ..Default::default()
    };
    assert_eq!(store.list_sandboxes(&filter).await?.len(), 1);
    let filter = SandboxFilter {
        owner_key_id: Some("key-2".into()),
        status: Some(SandboxStatus::Ready),
        ..Default::default()
    };
    assert_eq!(store.list_sandboxes(&filter).await?.len(), 0);
    // Instances: each sees its own rows; rows without one go to the first instance that asks.
    let mine = |instance: &str| SandboxFilter {
        include_pooled: true,
        instance: Some(instance.into()),
        ..Default::default()
    };
    assert_eq!(store.list_sandboxes(&mine("inst-a")).await?.len(), 3);
    assert_eq!(store.list_sandboxes(&mine("inst-b")).await?.len(), 0);
    let mut orphan = sandbox("sbx-o", Some("key-1"), false);
    orphan.instance = None;
    store.insert_sandbox(&orphan).await?;
    assert_eq!(store.adopt_unassigned("inst-b").await?, 1);
    assert_eq!(store.adopt_unassigned("inst-c").await?, 0);
    assert_eq!(store.list_sandboxes(&mine("inst-b")).await?.len(), 1);
    // Live sandboxes per key (creating, ready or degraded, not pool members).
    assert_eq!(store.count_live_sandboxes("key-1").await?, 2);
    store.delete_sandbox("sbx-o").await?;
    Ok(())
}

async fn health_moves_between_ready_and_degraded_and_no_sandbox_key_is_stored(
    store: &Store,
) -> anyhow::Result<()> {
    // Health moves only between ready and degraded.
    assert!(
        store
            .set_health("sbx-a", false, Some("not ready: chromium"))
            .await?
    );
    assert!(!store.set_health("sbx-a", false, Some("again")).await?);
    let degraded = store.sandbox("sbx-a").await?.context("a")?;
    assert_eq!(degraded.status, SandboxStatus::Degraded);
    assert_eq!(degraded.error.as_deref(), Some("not ready: chromium"));
    assert!(store.set_health("sbx-a", true, None).await?);
    assert_eq!(
        store.sandbox("sbx-a").await?.context("a")?.status,
        SandboxStatus::Ready
    );
    // No sandbox key is stored, except a legacy one written by an older version.
    assert_eq!(store.sandbox("sbx-a").await?.context("a")?.legacy_key, None);
    let mut legacy = sandbox("sbx-l", None, false);
    legacy.legacy_key = Some("sbk_old".into());
    store.insert_sandbox(&legacy).await?;
    assert_eq!(
        store
            .sandbox("sbx-l")
            .await?
            .context("l")?
            .legacy_key
            .as_deref(),
        Some("sbk_old")
    );
    store.delete_sandbox("sbx-l").await?;
    Ok(())
}

async fn touch_only_moves_forward_and_timeouts_are_set(store: &Store) -> anyhow::Result<()> {
    // Touch only moves forward.
    store.touch("sbx-a", 5_000).await?;
    store.touch("sbx-a", 4_000).await?;
    assert_eq!(
        store.sandbox("sbx-a").await?.context("a")?.last_active_at,
        5_000
    );
    store
        .set_timeouts(
            "sbx-a",
            &Timeouts {
                idle_timeout_secs: 30,
                max_lifetime_secs: 60,
                expires_at: 61_000,
                idle_pause_secs: Some(20),
                idle_hibernate_secs: Some(90),
            },
        )
        .await?;
    let a = store.sandbox("sbx-a").await?.context("a")?;
    assert_eq!(
        (
            a.idle_timeout_secs,
            a.max_lifetime_secs,
            a.expires_at,
            a.idle_pause_secs,
            a.idle_hibernate_secs
        ),
        (30, 60, 61_000, Some(20), Some(90))
    );
    // Paused and resumed: only from a live state, and only once each.
    store.mark_ready("sbx-a", 5_500).await?;
    let live = store.count_live_sandboxes("key-1").await?;
    assert!(store.mark_paused("sbx-a", 6_000).await?);
    assert!(!store.mark_paused("sbx-a", 6_500).await?, "already paused");
    let a = store.sandbox("sbx-a").await?.context("a")?;
    assert_eq!(
        (a.status, a.paused_at),
        (SandboxStatus::Paused, Some(6_000))
    );
    assert_eq!(
        store.count_live_sandboxes("key-1").await?,
        live,
        "a paused sandbox still counts against its key"
    );
    assert!(store.mark_resumed("sbx-a", 7_000).await?);
    assert!(!store.mark_resumed("sbx-a", 7_500).await?, "not paused");
    let a = store.sandbox("sbx-a").await?.context("a")?;
    assert_eq!(
        (a.status, a.paused_at, a.last_active_at),
        (SandboxStatus::Ready, None, 7_000)
    );
    Ok(())
}

async fn a_pool_member_is_claimed_once_within_its_keys_quota(store: &Store) -> anyhow::Result<()> {
    // A pool member is claimed once.
    store.mark_ready("sbx-p", 1_500).await?;
    let mut claim = sandbox("sbx-p", Some("key-3"), false);
    claim.created_at = 7_000;
    claim.expires_at = 8_000;
    // The key's quota is counted by the claim's own statement: at its limit, nothing changes.
    assert!(
        !store.claim_pooled(&claim, Some(0)).await?,
        "a key at its quota claims nothing"
    );
    assert!(store.sandbox("sbx-p").await?.context("p")?.pooled);
    assert!(store.claim_pooled(&claim, Some(1)).await?);
    assert!(
        !store.claim_pooled(&claim, None).await?,
        "a second claim of the same member fails"
    );
    let claimed = store.sandbox("sbx-p").await?.context("p")?;
    assert!(!claimed.pooled);
    assert_eq!(claimed.owner_key_id.as_deref(), Some("key-3"));
    assert_eq!(claimed.metadata, claim.metadata);
    Ok(())
}

async fn tokens_and_share_links_are_revoked_apart(store: &Store) -> anyhow::Result<()> {
    // Tokens.
    for (id, sandbox_id) in [("tok-1", "sbx-a"), ("tok-2", "sbx-a"), ("tok-3", "sbx-b")] {
        store
            .insert_token(&TokenRecord {
                id: id.into(),
                sandbox_id: sandbox_id.into(),
                issuer_key_id: Some("key-1".into()),
                scope: "view".into(),
                created_at: 1,
                expires_at: 100,
                revoked_at: None,
                run_id: None,
            })
            .await?;
    }
    // Share links: tokens of a run (of sandbox sbx-a), apart from the sandbox's own.
    for id in ["shr-1", "shr-2"] {
        store
            .insert_token(&TokenRecord {
                id: id.into(),
                sandbox_id: "sbx-a".into(),
                issuer_key_id: Some("key-1".into()),
                scope: "share".into(),
                created_at: 1,
                expires_at: 100,
                revoked_at: None,
                run_id: Some("run-1".into()),
            })
            .await?;
    }
    assert_eq!(
        store.revoke_tokens("sbx-a", Some("shr-1"), 50).await?,
        0,
        "a share link is not revoked as a sandbox token"
    );
    assert_eq!(
        store.revoke_tokens("sbx-a", Some("tok-3"), 50).await?,
        0,
        "a token of another sandbox"
    );
    assert_eq!(store.revoke_tokens("sbx-a", Some("tok-1"), 50).await?, 1);
    assert_eq!(
        store.revoke_tokens("sbx-a", None, 51).await?,
        1,
        "tok-2: the share links stay"
    );
    let live: Vec<String> = store
        .share_tokens("run-1", 10)
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(live, ["shr-1", "shr-2"]);
    assert_eq!(
        store
            .revoke_share_tokens("run-1", Some("shr-1"), 52)
            .await?,
        1
    );
    assert_eq!(
        store
            .revoke_share_tokens("run-1", Some("shr-1"), 53)
            .await?,
        0
    );
    assert_eq!(store.revoke_share_tokens("run-2", None, 53).await?, 0);
    assert_eq!(store.share_tokens("run-1", 10).await?.len(), 1);
    assert!(
        store.share_tokens("run-1", 100).await?.is_empty(),
        "expired"
    );
    assert_eq!(
        store.token("tok-1").await?.context("tok-1")?.revoked_at,
        Some(50)
    );
    assert_eq!(
        store.token("tok-3").await?.context("tok-3")?.revoked_at,
        None
    );
    assert_eq!(
        store
            .token("tok-3")
            .await?
            .context("tok-3")?
            .issuer_key_id
            .as_deref(),
        Some("key-1")
    );
    Ok(())
}

async fn deleting_a_sandbox_takes_its_tokens_but_not_its_share_links(
    store: &Store,
) -> anyhow::Result<()> {
    // Status changes and deletion (with the sandbox's tokens).
    store
        .set_status("sbx-b", SandboxStatus::Lost, Some("gone"), Some(9_000))
        .await?;
    let lost = store.sandbox("sbx-b").await?.context("b")?;
    assert_eq!(
        (lost.status, lost.error.as_deref(), lost.ended_at),
        (SandboxStatus::Lost, Some("gone"), Some(9_000))
    );
    assert!(store.delete_sandbox("sbx-a").await?);
    assert!(!store.delete_sandbox("sbx-a").await?);
    assert_eq!(store.token("tok-1").await?, None);
    assert_eq!(
        store
            .token("shr-2")
            .await?
            .context("shr-2")?
            .run_id
            .as_deref(),
        Some("run-1"),
        "a share link outlives the run's sandbox"
    );
    assert_eq!(store.purge_expired_tokens(1_000).await?, 3);
    Ok(())
}

async fn the_key_registry_bootstraps_once_authenticates_and_revokes(
    store: &Store,
) -> anyhow::Result<()> {
    // The key registry on top: bootstrap once, authenticate, revoke.
    let keys = ApiKeys::new(store.clone());
    let admin = keys.bootstrap(None).await?;
    assert!(admin.is_none(), "keys exist already: no new admin key");
    let (record, text) = keys.create("user", false).await?;
    assert!(
        !store
            .list_keys()
            .await?
            .iter()
            .any(|k| k.key_hash.contains(&text)),
        "only hashes are stored"
    );
    let caller = keys.authenticate(&text).await?.context("authenticates")?;
    assert_eq!(caller.key_id, record.id);
    assert!(keys.authenticate("abk_wrong").await?.is_none());
    assert!(keys.revoke(&record.id).await?);
    assert!(
        keys.authenticate(&text).await?.is_none(),
        "revocation is immediate"
    );
    assert!(
        keys.bootstrap(Some("short")).await.is_err(),
        "weak admin keys are refused"
    );
    Ok(())
}

/// Console sign-ins: found by their secret's hash, ended once, purged after they end.
async fn exercise_console_sessions(store: &Store) -> anyhow::Result<()> {
    let session = ConsoleSessionRecord {
        id: "con-1".into(),
        secret_hash: "hash-1".into(),
        key_id: "key-1".into(),
        created_at: 1_000,
        expires_at: 50_000,
        ended_at: None,
    };
    store.insert_console_session(&session).await?;
    assert!(
        store
            .insert_console_session(&ConsoleSessionRecord {
                id: "con-2".into(),
                ..session.clone()
            })
            .await
            .is_err(),
        "a secret's hash opens one session"
    );
    assert_eq!(
        store.console_session_by_hash("hash-1").await?,
        Some(session.clone())
    );
    assert_eq!(store.console_session("con-1").await?, Some(session.clone()));
    assert!(session.is_live(49_999) && !session.is_live(50_000));
    assert!(store.end_console_session("con-1", 2_000).await?);
    assert!(
        !store.end_console_session("con-1", 3_000).await?,
        "ended once"
    );
    let ended = store.console_session("con-1").await?.context("kept")?;
    assert_eq!(ended.ended_at, Some(2_000));
    assert!(!ended.is_live(2_500));
    assert_eq!(store.purge_console_sessions(1_999).await?, 0);
    assert_eq!(store.purge_console_sessions(2_001).await?, 1);
    assert_eq!(store.console_session_by_hash("hash-1").await?, None);
    Ok(())
}

pub(crate) fn run_record(
    id: &str,
    sandbox: Option<&str>,
    key: Option<&str>,
    lease: &str,
) -> RunRecord {
    RunRecord {
        id: id.into(),
        owner_key_id: "key-1".into(),
        task: "draw".into(),
        model: "script:x.json".into(),
        sandbox_id: sandbox.map(str::to_owned),
        sandbox_taken: false,
        status: RunStatus::Queued,
        limits: agent::Limits::default(),
        metadata: BTreeMap::from([("team".into(), "red".into())]),
        idempotency_key: key.map(str::to_owned),
        request_hash: Some("h1".into()),
        answer: None,
        reason: None,
        lease_owner: Some(lease.into()),
        lease_expires_at: Some(10_000),
        last_seq: 0,
        created_at: 1_000,
        updated_at: 1_000,
        ended_at: None,
        context_id: None,
        message_id: None,
    }
}

/// The status change a run's start writes.
fn to_running() -> StatusChange {
    StatusChange {
        status: RunStatus::Running,
        answer: None,
        reason: None,
    }
}

/// Runs: idempotency, one active run per sandbox, seq without gaps, status compare-and-set,
/// nothing after the terminal status, leases.
async fn exercise_runs(store: &Store) -> anyhow::Result<()> {
    a_run_is_created_once_per_idempotency_key_and_one_is_active_per_sandbox(store).await?;
    events_are_numbered_without_gaps_and_written_by_the_lease_holder_only(store).await?;
    leases_and_checkpoints_are_held_by_one_process(store).await?;
    the_terminal_status_is_written_once_and_frees_the_sandbox(store).await?;
    runs_are_listed_newest_first_by_status(store).await?;
    artifacts_are_replaced_by_name(store).await?;
    Ok(())
}

async fn a_run_is_created_once_per_idempotency_key_and_one_is_active_per_sandbox(
    store: &Store,
) -> anyhow::Result<()> {
    let a = run_record("run-a", Some("sb-1"), Some("k1"), "inst/boot1");
    assert_eq!(store.insert_run(&a).await?, RunInsert::Created);
    // The same idempotency key finds the first run; nothing new is written.
    let again = run_record("run-a2", Some("sb-9"), Some("k1"), "inst/boot1");
    assert!(matches!(store.insert_run(&again).await?, RunInsert::SameKey(r) if r.id == "run-a"));
    assert_eq!(store.run("run-a2").await?, None);
    // One active run per sandbox.
    let busy = run_record("run-b", Some("sb-1"), None, "inst/boot1");
    assert_eq!(store.insert_run(&busy).await?, RunInsert::SandboxBusy);
    assert_eq!(store.run("run-b").await?, None);
    Ok(())
}

async fn events_are_numbered_without_gaps_and_written_by_the_lease_holder_only(
    store: &Store,
) -> anyhow::Result<()> {
    // Events: seq 1, 2, 3 with no gap; the status moves with its event.
    let running = to_running();
    assert_eq!(
        store
            .append_event("run-a", "inst/boot1", "run.status", "{}", 2_000, None)
            .await?,
        Some(1)
    );
    assert_eq!(
        store
            .append_event(
                "run-a",
                "inst/boot1",
                "run.status",
                "{}",
                2_001,
                Some(&running)
            )
            .await?,
        Some(2)
    );
    assert_eq!(
        store.run("run-a").await?.context("run-a")?.status,
        RunStatus::Running
    );
    // Another lease holder cannot write.
    assert_eq!(
        store
            .append_event("run-a", "inst/boot2", "agent.message", "{}", 2_002, None)
            .await?,
        None
    );
    // Concurrent appends by the holder never share or skip a seq.
    let appends = (0..20).map(|i| {
        let store = store.clone();
        async move {
            store
                .append_event(
                    "run-a",
                    "inst/boot1",
                    "agent.message",
                    &format!("{{\"i\":{i}}}"),
                    3_000,
                    None,
                )
                .await
        }
    });
    let mut seqs: Vec<i64> = futures_util::future::join_all(appends)
        .await
        .into_iter()
        .map(|r| r.map(|s| s.unwrap_or(-1)))
        .collect::<Result<_, _>>()?;
    seqs.sort_unstable();
    assert_eq!(seqs, (3..=22).collect::<Vec<i64>>());
    let events = store.events_after("run-a", 0, 1000).await?;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=22).collect::<Vec<_>>()
    );
    assert_eq!(store.events_after("run-a", 20, 1).await?.len(), 1);
    Ok(())
}

async fn leases_and_checkpoints_are_held_by_one_process(store: &Store) -> anyhow::Result<()> {
    // Leases: another process cannot take a live lease, can take an expired one; an earlier
    // life of the same instance is taken over at once.
    assert!(
        !store
            .acquire_run_lease("run-a", "other/boot", "other/", 5_000, 40_000)
            .await?
    );
    assert!(
        store
            .acquire_run_lease("run-a", "inst/boot2", "inst/", 5_000, 40_000)
            .await?
    );
    assert!(
        !store.renew_run_lease("run-a", "inst/boot1", 50_000).await?,
        "boot1 lost it"
    );
    assert!(store.renew_run_lease("run-a", "inst/boot2", 50_000).await?);
    assert_eq!(
        store
            .orphaned_runs("inst/boot2", "inst/", 6_000)
            .await?
            .len(),
        0
    );
    assert_eq!(
        store
            .orphaned_runs("inst/boot3", "inst/", 6_000)
            .await?
            .len(),
        1,
        "an earlier life's run is an orphan for the next life"
    );
    assert!(
        store
            .acquire_run_lease("run-a", "x/boot", "x/", 60_000, 90_000)
            .await?,
        "expired"
    );
    assert!(
        store
            .set_checkpoint("run-a", "x/boot", "{\"step\":1}")
            .await?
    );
    assert!(!store.set_checkpoint("run-a", "inst/boot2", "{}").await?);
    assert_eq!(
        store.checkpoint("run-a").await?.as_deref(),
        Some("{\"step\":1}")
    );
    // An event and a checkpoint in one write: both or, for another holder, neither; a plain
    // event leaves the checkpoint alone.
    let before = store.run("run-a").await?.context("run-a")?.last_seq;
    assert_eq!(
        store
            .append_event_with_checkpoint(
                "run-a",
                "inst/boot2",
                "action.started",
                "{}",
                4_000,
                "{\"step\":9}"
            )
            .await?,
        None
    );
    assert_eq!(
        store.checkpoint("run-a").await?.as_deref(),
        Some("{\"step\":1}")
    );
    assert_eq!(
        store
            .append_event_with_checkpoint(
                "run-a",
                "x/boot",
                "action.started",
                "{}",
                4_001,
                "{\"step\":2}"
            )
            .await?,
        Some(before + 1)
    );
    store
        .append_event("run-a", "x/boot", "action.finished", "{}", 4_002, None)
        .await?;
    assert_eq!(
        store.checkpoint("run-a").await?.as_deref(),
        Some("{\"step\":2}")
    );
    Ok(())
}

async fn the_terminal_status_is_written_once_and_frees_the_sandbox(
    store: &Store,
) -> anyhow::Result<()> {
    // The terminal status: written once, then nothing more; the sandbox is free again.
    let running = to_running();
    // The run refused while run-a held the sandbox.
    let busy = run_record("run-b", Some("sb-1"), None, "inst/boot1");
    let done = StatusChange {
        status: RunStatus::Completed,
        answer: Some("a triangle".into()),
        reason: None,
    };
    assert_eq!(
        store
            .append_event("run-a", "x/boot", "run.status", "{}", 70_000, Some(&done))
            .await?,
        Some(25)
    );
    let ended = store.run("run-a").await?.context("run-a")?;
    assert_eq!(
        (ended.status, ended.ended_at, ended.last_seq),
        (RunStatus::Completed, Some(70_000), 25)
    );
    assert_eq!(ended.answer.as_deref(), Some("a triangle"));
    assert_eq!(
        store
            .append_event(
                "run-a",
                "x/boot",
                "run.status",
                "{}",
                70_001,
                Some(&running)
            )
            .await?,
        None,
        "terminal states never change"
    );
    assert!(
        !store
            .acquire_run_lease("run-a", "y/boot", "y/", 99_000_000, 99_000_001)
            .await?
    );
    assert_eq!(store.insert_run(&busy).await?, RunInsert::Created);
    assert!(
        store
            .set_run_sandbox("run-b", "inst/boot1", "sb-2", true)
            .await?
    );
    let c = run_record("run-c", None, None, "inst/boot1");
    assert_eq!(store.insert_run(&c).await?, RunInsert::Created);
    assert!(
        !store
            .set_run_sandbox("run-c", "inst/boot1", "sb-2", true)
            .await?,
        "sb-2 is busy"
    );
    Ok(())
}

async fn runs_are_listed_newest_first_by_status(store: &Store) -> anyhow::Result<()> {
    // Listing, newest first, by status.
    let all = store.list_runs(&RunFilter::default()).await?;
    assert_eq!(all.len(), 3);
    let completed = store
        .list_runs(&RunFilter {
            owner_key_id: Some("key-1".into()),
            status: Some(RunStatus::Completed),
            ..RunFilter::default()
        })
        .await?;
    assert_eq!(
        completed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["run-a"]
    );
    // By last change, a page at a time (A2A's ListTasks): every run once, in order.
    let by_update = RunFilter {
        by_update: true,
        ..RunFilter::default()
    };
    let whole: Vec<String> = store
        .list_runs(&by_update)
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_runs(&RunFilter {
                after: after.clone(),
                limit: Some(1),
                ..by_update.clone()
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some((last.updated_at, last.id.clone()));
        paged.extend(page.into_iter().map(|r| r.id));
    }
    assert_eq!(paged, whole);
    assert_eq!(store.count_runs(&by_update).await?, 3);
    // A run without a context is its own.
    let own = RunFilter {
        context_id: Some("run-b".into()),
        ..RunFilter::default()
    };
    let listed = store.list_runs(&own).await?;
    assert_eq!(
        listed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["run-b"]
    );
    assert_eq!(store.count_runs(&own).await?, 1);
    Ok(())
}

async fn artifacts_are_replaced_by_name(store: &Store) -> anyhow::Result<()> {
    // Artifacts: replaced by name.
    let mut artifact = ArtifactRecord {
        run_id: "run-a".into(),
        name: "outputs/x.png".into(),
        kind: "output".into(),
        size: 3,
        content_type: "image/png".into(),
        sha256: "00".into(),
        created_at: 1,
    };
    store.upsert_artifact(&artifact).await?;
    artifact.size = 4;
    store.upsert_artifact(&artifact).await?;
    assert_eq!(store.artifacts("run-a").await?, vec![artifact.clone()]);
    assert_eq!(
        store.artifact("run-a", "outputs/x.png").await?,
        Some(artifact)
    );
    assert_eq!(store.artifact("run-a", "outputs/y.png").await?, None);
    Ok(())
}

#[tokio::test]
async fn the_store_works_on_sqlite() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    exercise(&sqlite_url(dir.path())).await?;
    // A fresh database generates an admin key exactly once.
    let other = tempfile::tempdir()?;
    let store = Store::connect(&sqlite_url(other.path())).await?;
    let keys = ApiKeys::new(store.clone());
    let first = keys.bootstrap(None).await?;
    assert!(first.as_deref().is_some_and(|k| k.starts_with("abk_")));
    assert_eq!(keys.bootstrap(None).await?, None);
    assert!(
        keys.authenticate(first.as_deref().unwrap_or(""))
            .await?
            .is_some_and(|c| c.is_admin)
    );
    Ok(())
}

#[tokio::test]
async fn the_store_works_on_postgres() -> anyhow::Result<()> {
    let postgres = Postgres::start()?;
    postgres.wait_accepting().await?;
    exercise(&postgres.url()).await?;
    crate::store_replicas::appends_are_announced_to_other_replicas(&postgres.url()).await?;
    crate::store_replicas::a_keys_quota_holds_across_replicas(&postgres.url()).await?;
    crate::store_replicas::a_wake_counts_against_the_quota_across_replicas(&postgres.url()).await
}

/// Postgres stopped under a running orchestrator (issue 25, item 3): once it notices (it asks
/// every half second), each request is answered 503 `database_unavailable` with `Retry-After`
/// at once, where it would otherwise wait out the pool's 5 s acquire timeout; liveness still
/// answers; and when Postgres is back the same process serves again by itself.
#[tokio::test]
async fn postgres_briefly_unavailable_is_a_fast_503_and_recovers_by_itself() -> anyhow::Result<()> {
    let postgres = Postgres::start()?;
    postgres.wait_accepting().await?;
    let orchestrator = Orchestrator::start(Options {
        database_url: Some(postgres.url()),
        ..Options::default()
    })?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let list = || {
        http.get(orchestrator.u("/v1/sandboxes"))
            .bearer_auth(ADMIN_KEY)
            .send()
    };
    assert_eq!(list().await?.status(), 200);

    postgres.stop_server()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if list().await?.status() == 503 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "still answering without Postgres"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for _ in 0..20 {
        let asked = Instant::now();
        let response = list().await?;
        let took = asked.elapsed();
        assert_eq!(response.status(), 503);
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()),
            Some("2")
        );
        let body: serde_json::Value = response.json().await?;
        assert_eq!(body["error"]["code"], "database_unavailable", "{body}");
        // Not a timing goal: without the reachability check each request waited for a
        // connection until the pool's acquire timeout (5 s).
        assert!(took < Duration::from_secs(4), "a refusal took {took:?}");
    }
    let (status, _) = orchestrator
        .call(reqwest::Method::GET, "/healthz", None, None)
        .await?;
    assert_eq!(status, 200, "liveness does not need the database");

    postgres.start_server()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = list().await?.status();
        if status == 200 {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "not serving 60 s after Postgres came back: {status}\n{}",
            orchestrator.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
