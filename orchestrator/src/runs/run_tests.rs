//! Runs over the fakes (`crate::testing`), without Docker: the real [`Runs`] and
//! [`Sandboxes`], a real SQLite database, a [`FakeSandbox`] behind the connector seam, a
//! `script:` model and the manual clock. Leases (renewed while the run drives; taken by
//! another owner: the driver stops and writes nothing more), a crashed run resumed from its
//! checkpoint by the next life of the orchestrator, cancels before the loop starts, takeover
//! and hand-back through the service's control calls, and nothing written after a terminal
//! status. Every assertion reads the database (the run's row, its log, its artifacts) or the
//! fake sandbox.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::{ActionOutcome, DesktopAction, ErrorKind, EventSink, ModelOptions, RunEvent};
use serde_json::json;

use super::artifacts::FsArtifacts;
use super::connect::SandboxFiles;
use super::sink::{RunSink, SandboxLink};
use super::*;
use crate::clock::Clock;
use crate::db::SandboxRecord;
use crate::testing::computer::HOME;
use crate::testing::harness::OWNER;
use crate::testing::{FakeConnector, FakeSandbox, Harness, Step, eventually};

/// Renewed every 100 ms (a third of it): for the tests that watch the lease.
const SHORT_LEASE: Duration = Duration::from_millis(300);
/// Not renewed within a test (every 10 s).
const LONG_LEASE: Duration = Duration::from_secs(30);

/// The lifecycle over the fakes, a fake connector, and a folder for scripts and artifacts.
struct Fixture {
    h: Harness,
    connector: Arc<FakeConnector>,
    dir: tempfile::TempDir,
    lease_ttl: Duration,
}

impl Fixture {
    async fn new(lease_ttl: Duration) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(dir.path().join("scripts")).expect("the scripts folder");
        Self {
            h: Harness::new().await,
            connector: FakeConnector::new(),
            dir,
            lease_ttl,
        }
    }

    /// A runs service over the same database, sandboxes, connector and clock. Each one is
    /// another life of this orchestrator instance: a new boot id, nothing in memory.
    fn process(&self) -> Arc<Runs> {
        Runs::with_seams(
            self.h.store.clone(),
            self.h.sandboxes.clone(),
            Arc::new(FsArtifacts::new(self.dir.path().join("artifacts"))),
            RunSeams {
                connector: self.connector.clone(),
                clock: self.h.clock.clone(),
            },
            ModelOptions::default(),
            RunSettings {
                lease_ttl: self.lease_ttl,
                script_root: Some(self.dir.path().join("scripts")),
                retention: None,
                ..RunSettings::default()
            },
        )
    }

    /// A runs service as another replica sharing the database (`replica`) would have it.
    fn replica(&self, replica: &str) -> Arc<Runs> {
        let mut runs = self.process();
        let only = Arc::get_mut(&mut runs).expect("made just now: not shared yet");
        only.lease_owner = format!("{replica}/{}", new_id("boot"));
        only.replica_prefix = format!("{replica}/");
        runs
    }

    /// Writes a script of `steps`; returns its model string.
    fn script(&self, name: &str, steps: serde_json::Value) -> String {
        let path = self.dir.path().join("scripts").join(format!("{name}.json"));
        std::fs::write(&path, json!({ "steps": steps }).to_string()).expect("writing a script");
        format!("script:{}", path.display())
    }

    /// A ready sandbox of [`OWNER`] and its fake desktop.
    async fn sandbox(&self) -> (SandboxRecord, Arc<FakeSandbox>) {
        let record = self.h.create().await;
        let fake = self.connector.sandbox(&record.id);
        (record, fake)
    }

    /// Creates a run of `model` in `sandbox_id` (`None`: the run takes a sandbox).
    async fn start(&self, runs: &Arc<Runs>, model: &str, sandbox_id: Option<&str>) -> RunRecord {
        let (record, created) = runs
            .create(
                OWNER,
                RunRequest {
                    task: "press the keys".into(),
                    model: model.into(),
                    sandbox_id: sandbox_id.map(str::to_owned),
                    ..RunRequest::default()
                },
            )
            .await
            .expect("creating a run");
        assert_eq!(created, Created::New);
        record
    }

    async fn run(&self, id: &str) -> RunRecord {
        self.h
            .store
            .run(id)
            .await
            .expect("reading the run")
            .expect("the run's row")
    }

    /// The run's log: (seq, event).
    async fn events(&self, id: &str) -> Vec<(i64, RunEvent)> {
        self.h
            .store
            .events_after(id, 0, 10_000)
            .await
            .expect("reading the log")
            .into_iter()
            .map(|e| {
                let event = serde_json::from_str(&e.data).expect("a stored event");
                (e.seq, event)
            })
            .collect()
    }

    async fn wait_for_status(&self, id: &str, status: RunStatus) {
        eventually(&format!("run {id} to be {}", status.as_str()), async || {
            self.run(id).await.status == status
        })
        .await;
    }
}

/// Waits until `runs` no longer drives `id` (its driver ended).
async fn wait_until_not_driven(runs: &Runs, id: &str) {
    eventually("the driver to end", async || runs.active(id).is_none()).await;
}

/// The log, one word per event: `status:<status>` for status changes, the kind otherwise.
fn kinds(events: &[(i64, RunEvent)]) -> Vec<String> {
    events
        .iter()
        .map(|(_, event)| match event {
            RunEvent::RunStatus { status, .. } => format!("status:{}", status.as_str()),
            other => other.kind().to_string(),
        })
        .collect()
}

/// The log's invariants: seqs 1, 2, 3... with no gap or duplicate; every call started once
/// and finished at most once, after it started; at most one terminal status, and it is last.
fn check_log(events: &[(i64, RunEvent)]) {
    let seqs: Vec<i64> = events.iter().map(|(seq, _)| *seq).collect();
    let expected: Vec<i64> = (1..=events.len() as i64).collect();
    assert_eq!(seqs, expected, "seqs");
    let mut calls: HashMap<&str, (usize, usize)> = HashMap::new();
    for (_, event) in events {
        match event {
            RunEvent::ActionStarted { call_id, .. } => {
                let (started, finished) = calls.entry(call_id.as_str()).or_default();
                assert_eq!((*started, *finished), (0, 0), "{call_id} started again");
                *started += 1;
            }
            RunEvent::ActionFinished { call_id, .. } => {
                let (started, finished) = calls.entry(call_id.as_str()).or_default();
                assert_eq!((*started, *finished), (1, 0), "{call_id} finished again");
                *finished += 1;
            }
            _ => {}
        }
    }
    let terminal: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(
            |(_, (_, e))| matches!(e, RunEvent::RunStatus { status, .. } if status.is_terminal()),
        )
        .map(|(i, _)| i)
        .collect();
    assert!(terminal.len() <= 1, "more than one terminal status");
    if let Some(&i) = terminal.first() {
        assert_eq!(i, events.len() - 1, "events after the terminal status");
    }
}

/// `PRESS` steps, one per key.
fn presses(keys: &[&str]) -> Vec<serde_json::Value> {
    keys.iter()
        .map(|key| json!({ "action": "PRESS", "key": key }))
        .collect()
}

fn pressed(fake: &FakeSandbox) -> Vec<String> {
    fake.actions()
        .into_iter()
        .map(|action| match action {
            DesktopAction::Press { key } => key,
            other => panic!("unexpected action {other:?}"),
        })
        .collect()
}

/// Takes the run over while the action `held` is in flight: the takeover is asked first, then
/// the action let go; answers once the run is paused.
async fn take_over_mid_action(
    runs: &Arc<Runs>,
    id: &str,
    held: crate::testing::computer::Hold,
) -> RunRecord {
    let take_over = tokio::spawn({
        let runs = runs.clone();
        let id = id.to_string();
        async move { runs.take_over(&id, Some(OWNER)).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    held.release();
    take_over.await.unwrap().expect("the takeover")
}

fn final_step(answer: &str) -> serde_json::Value {
    json!({ "action": "FINAL", "answer": answer })
}

#[tokio::test]
async fn a_run_on_the_fakes_completes_with_its_log_in_order_and_its_outputs_kept() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let mut steps = presses(&["a"]);
    steps.push(json!({
        "action": "WRITE_FILE",
        "path": format!("{HOME}/outputs/report.txt"),
        "content": "the report",
    }));
    steps.push(final_step("done"));
    let model = f.script("outputs", json!(steps));

    let run = f.start(&runs, &model, Some(&sandbox.id)).await;
    f.wait_for_status(&run.id, RunStatus::Completed).await;
    wait_until_not_driven(&runs, &run.id).await;

    let events = f.events(&run.id).await;
    check_log(&events);
    let kinds = kinds(&events);
    assert_eq!(kinds[..2], ["status:queued", "status:running"], "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("status:completed"));
    let output = events
        .iter()
        .position(|(_, e)| {
            matches!(e, RunEvent::ArtifactCreated { name, .. } if name == "outputs/report.txt")
        })
        .expect("an artifact.created event for the output");
    assert!(output < events.len() - 1);
    let row = f.run(&run.id).await;
    assert_eq!(row.answer.as_deref(), Some("done"));
    assert_eq!(row.last_seq, events.len() as i64);
    assert!(row.ended_at.is_some());
    let (_, bytes) = runs
        .artifact(&run.id, Some(OWNER), "outputs/report.txt")
        .await
        .expect("the output, kept");
    assert_eq!(&bytes[..], b"the report");
    assert_eq!(pressed(&fake), ["a"]);
    // Created at the manual clock's time, not the wall clock's.
    assert!(row.created_at <= f.h.clock.now_ms() && row.created_at > f.h.clock.now_ms() - 60_000);
    // The person has the desktop back.
    assert!(
        *f.h.sandboxes
            .control_gate(&f.h.row(&sandbox.id).await.expect("the sandbox's row"))
            .borrow()
    );
}

#[tokio::test]
async fn the_lease_is_renewed_while_the_run_drives() {
    let f = Fixture::new(SHORT_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let mut held = fake.hold_next_action();
    let mut steps = presses(&["a"]);
    steps.push(final_step("done"));
    let run = f
        .start(&runs, &f.script("renew", json!(steps)), Some(&sandbox.id))
        .await;
    held.reached().await;
    let lease = |r: &RunRecord| r.lease_expires_at.expect("a lease");
    assert_eq!(lease(&f.run(&run.id).await), run.created_at + 300);

    for _ in 0..3 {
        // Time passes (the action takes a minute): each renewal moves the lease past it.
        f.h.clock.advance(Duration::from_secs(60));
        let now = f.h.clock.now_ms();
        eventually("the lease to be renewed", async || {
            lease(&f.run(&run.id).await) >= now + 300
        })
        .await;
        let row = f.run(&run.id).await;
        assert_eq!(row.lease_owner.as_deref(), Some(runs.lease_owner.as_str()));
        assert_eq!(row.status, RunStatus::Running);
        // Another orchestrator sees nothing to pick up.
        let orphans =
            f.h.store
                .orphaned_runs("other/boot", "other/", f.h.clock.now_ms())
                .await
                .unwrap();
        assert!(orphans.is_empty(), "{orphans:?}");
    }

    held.release();
    f.wait_for_status(&run.id, RunStatus::Completed).await;
    check_log(&f.events(&run.id).await);
}

#[tokio::test]
async fn a_driver_whose_lease_is_taken_stops_at_once_and_writes_nothing_more() {
    let f = Fixture::new(SHORT_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let held = fake.hold_action(2);
    let mut steps = presses(&["a", "b", "c"]);
    steps.push(final_step("done"));
    let run = f
        .start(&runs, &f.script("taken", json!(steps)), Some(&sandbox.id))
        .await;
    let mut held = held;
    held.reached().await;
    let before = f.events(&run.id).await;
    let checkpoint = f.h.store.checkpoint(&run.id).await.unwrap();

    // Another owner takes the lease (the next life of this instance does so at once).
    let now = f.h.clock.now_ms();
    let taken =
        f.h.store
            .acquire_run_lease(
                &run.id,
                "test-instance/boot-next",
                "test-instance/",
                now,
                now + 60_000,
            )
            .await
            .unwrap();
    assert!(taken);
    let lost_at = Instant::now();
    wait_until_not_driven(&runs, &run.id).await;
    // At its next renewal (every 100 ms), not when the action in flight ends.
    assert!(
        lost_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        lost_at.elapsed()
    );

    // The action it was in is dropped with it: nothing reaches the screen or the log.
    held.release();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(pressed(&fake), ["a"]);
    let after = f.events(&run.id).await;
    assert_eq!(kinds(&after), kinds(&before));
    assert_eq!(after.len(), before.len());
    let row = f.run(&run.id).await;
    assert_eq!(row.status, RunStatus::Running);
    assert_eq!(row.last_seq, before.len() as i64);
    assert_eq!(row.lease_owner.as_deref(), Some("test-instance/boot-next"));
    assert_eq!(f.h.store.checkpoint(&run.id).await.unwrap(), checkpoint);
    // The service no longer answers for it.
    let refused = runs.cancel(&run.id, Some(OWNER)).await;
    assert!(matches!(refused, Err(RunError::Conflict(_))), "{refused:?}");
    // The gate stays closed: the run goes on under its new holder, whose agent drives it, and
    // the stalled driver's reopening (as it stopped) is refused by the database, which this
    // process's gate then follows. (The holder reopens it when its run ends or a person takes
    // over.)
    eventually("the gate follows the database", async || {
        let row = f.h.row(&sandbox.id).await.expect("the sandbox's row");
        !row.control_open && !*f.h.sandboxes.control_gate(&row).borrow()
    })
    .await;
}

#[tokio::test]
async fn a_crashed_run_resumes_from_its_checkpoint_in_the_next_life_without_duplicates() {
    let f = Fixture::new(LONG_LEASE).await;
    let first = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let mut steps = presses(&["a", "b", "c"]);
    steps.push(final_step("resumed"));
    let model = f.script("resume", json!(steps));
    // The first life stops for good in the middle of the second action (its lease runs out).
    let mut frozen = fake.hold_action(2);
    let run = f.start(&first, &model, Some(&sandbox.id)).await;
    frozen.reached().await;
    let before = f.events(&run.id).await;
    assert!(f.h.store.checkpoint(&run.id).await.unwrap().is_some());
    assert_eq!(f.run(&run.id).await.status, RunStatus::Running);
    f.h.clock.advance(LONG_LEASE + Duration::from_secs(1));

    let next = f.process();
    assert_eq!(next.resume_orphans().await.unwrap(), 1);
    f.wait_for_status(&run.id, RunStatus::Completed).await;
    wait_until_not_driven(&next, &run.id).await;

    let events = f.events(&run.id).await;
    check_log(&events);
    // The log goes on from where it stopped: what was there is there unchanged.
    assert_eq!(events[..before.len()], before[..]);
    let kinds = kinds(&events);
    assert_eq!(
        kinds.iter().filter(|k| *k == "status:queued").count(),
        1,
        "{kinds:?}"
    );
    // The action in flight at the crash is reported unknown, not repeated.
    let unknown: Vec<&RunEvent> = events
        .iter()
        .map(|(_, e)| e)
        .filter(|e| {
            matches!(
                e,
                RunEvent::ActionFinished {
                    outcome: ActionOutcome::Unknown,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(unknown.len(), 1, "{kinds:?}");
    assert_eq!(pressed(&fake), ["a", "c"]);
    assert_eq!(f.run(&run.id).await.answer.as_deref(), Some("resumed"));

    // The first life wakes up: its action lands, but nothing more is written.
    frozen.release();
    wait_until_not_driven(&first, &run.id).await;
    assert_eq!(pressed(&fake), ["a", "c", "b"]);
    assert_eq!(f.events(&run.id).await, events);
}

#[tokio::test]
async fn a_cancel_before_the_loop_starts_ends_the_run_without_driving_the_computer() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let mut steps = presses(&["a"]);
    steps.push(final_step("done"));
    // The driver stops while connecting to the sandbox, before the loop starts.
    let mut connecting = f.connector.hold_next();
    let run = f
        .start(&runs, &f.script("cancel", json!(steps)), Some(&sandbox.id))
        .await;
    connecting.reached().await;

    let cancel = tokio::spawn({
        let runs = runs.clone();
        let id = run.id.clone();
        async move { runs.cancel(&id, Some(OWNER)).await }
    });
    eventually("the cancel to arrive", async || {
        runs.active(&run.id)
            .is_some_and(|a| a.start.lock().is_ok_and(|gate| gate.canceled))
    })
    .await;
    connecting.release();
    let canceled = cancel.await.unwrap().expect("the cancel");
    assert_eq!(canceled.status, RunStatus::Canceled);

    let events = f.events(&run.id).await;
    check_log(&events);
    assert_eq!(kinds(&events), ["status:queued", "status:canceled"]);
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    assert!(f.run(&run.id).await.ended_at.is_some());
    // The control gate was never closed.
    assert!(
        *f.h.sandboxes
            .control_gate(&f.h.row(&sandbox.id).await.expect("the sandbox's row"))
            .borrow()
    );
    // A second cancel is refused and writes nothing.
    wait_until_not_driven(&runs, &run.id).await;
    let again = runs.cancel(&run.id, Some(OWNER)).await;
    assert!(matches!(again, Err(RunError::Conflict(_))), "{again:?}");
    assert_eq!(f.events(&run.id).await, events);
}

#[tokio::test]
async fn a_cancel_while_the_run_takes_its_sandbox_ends_it_without_connecting() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    let mut steps = presses(&["a"]);
    steps.push(final_step("done"));
    let mut starting = f.h.platform.hold_next(Step::Start);
    let run = f
        .start(&runs, &f.script("cancel-start", json!(steps)), None)
        .await;
    starting.reached().await;

    let canceled = runs.cancel(&run.id, Some(OWNER)).await.expect("the cancel");
    assert_eq!(canceled.status, RunStatus::Canceled);
    starting.release();
    let events = f.events(&run.id).await;
    check_log(&events);
    assert_eq!(kinds(&events), ["status:queued", "status:canceled"]);
    assert_eq!(f.connector.connections(), 0);
}

#[tokio::test]
async fn takeover_pauses_the_agent_and_hand_back_resumes_it() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut steps = presses(&keys);
    steps.push(final_step("done"));
    let mut held = fake.hold_next_action();
    let run = f
        .start(
            &runs,
            &f.script("takeover", json!(steps)),
            Some(&sandbox.id),
        )
        .await;
    held.reached().await;
    let gate =
        f.h.sandboxes
            .control_gate(&f.h.row(&sandbox.id).await.expect("the sandbox's row"));
    assert!(!*gate.borrow(), "closed while the agent drives");

    // Asked while an action is in flight: answered once it finished and the agent paused.
    let paused = take_over_mid_action(&runs, &run.id, held).await;
    assert_eq!(paused.status, RunStatus::Paused);
    assert!(*gate.borrow(), "open while the person holds control");
    let at_pause = fake.actions().len();
    let log_at_pause = f.events(&run.id).await;
    assert_eq!(
        kinds(&log_at_pause)[log_at_pause.len() - 2..],
        ["control.taken", "status:paused"]
    );
    // Paused: the agent does nothing while the person holds control.
    f.h.clock.advance(Duration::from_secs(600));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(fake.actions().len(), at_pause);
    assert_eq!(f.events(&run.id).await.len(), log_at_pause.len());

    let resumed = runs
        .hand_back(&run.id, Some(OWNER), Some("I closed the dialog".into()))
        .await
        .expect("the hand-back");
    // Answered once the loop runs again (which may have finished the script by now).
    assert!(
        matches!(resumed.status, RunStatus::Running | RunStatus::Completed),
        "{:?}",
        resumed.status
    );
    f.wait_for_status(&run.id, RunStatus::Completed).await;
    wait_until_not_driven(&runs, &run.id).await;

    let events = f.events(&run.id).await;
    check_log(&events);
    let kinds = kinds(&events);
    let taken = kinds.iter().position(|k| k == "control.taken").unwrap();
    let returned = kinds.iter().position(|k| k == "control.returned").unwrap();
    assert!(
        !kinds[taken..returned].iter().any(|k| k == "action.started"),
        "{kinds:?}"
    );
    assert!(matches!(
        &events[returned].1,
        RunEvent::ControlReturned { note: Some(note) } if note == "I closed the dialog"
    ));
    assert_eq!(
        kinds[returned + 1..].first().map(String::as_str),
        Some("status:running"),
        "{kinds:?}"
    );
    assert!(kinds[returned..].iter().any(|k| k == "action.started"));
    // Every key pressed once, in order: nothing skipped, nothing repeated.
    assert_eq!(pressed(&fake), keys);
    assert!(*gate.borrow(), "the person has the desktop back");
}

/// Another replica receives the person's calls for a run this one drives (issue 25): they are
/// passed through the database, carried out here, and answered there as if local.
#[tokio::test]
async fn calls_for_a_run_another_replica_drives_are_carried_out_by_the_driver() {
    let f = Fixture::new(LONG_LEASE).await;
    let driver = f.process();
    let other = f.replica("rep-other");
    // The driver's replica is alive (the server writes this row at start and every 2 s).
    f.h.store
        .register_replica("test-instance", "boot", None, f.h.clock.now_ms())
        .await
        .expect("the driver's replica row");
    let (sandbox, fake) = f.sandbox().await;
    let keys = ["a", "b", "c", "d", "e", "f"];
    let mut steps = presses(&keys);
    steps.push(final_step("done"));
    let mut held = fake.hold_next_action();
    let run = f
        .start(
            &driver,
            &f.script("relayed", json!(steps)),
            Some(&sandbox.id),
        )
        .await;
    held.reached().await;
    // The driver looks for passed commands (the server does every 200 ms).
    let relaying = tokio::spawn({
        let driver = driver.clone();
        async move {
            loop {
                let _ = driver.relay_commands_once().await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });

    // Another key sees nothing through the other replica either.
    let foreign = other.take_over(&run.id, Some("someone-else")).await;
    assert!(matches!(foreign, Err(RunError::NotFound(_))), "{foreign:?}");

    let take_over = tokio::spawn({
        let other = other.clone();
        let id = run.id.clone();
        async move { other.take_over(&id, Some(OWNER)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release();
    let paused = take_over
        .await
        .unwrap()
        .expect("the takeover, through the other replica");
    assert_eq!(paused.status, RunStatus::Paused);
    assert!(
        driver.subscribe(&run.id).is_some(),
        "still driven by the first"
    );
    // A refusal comes back as the driver's: no question was asked, so no answer is taken.
    let answer = other.answer(&run.id, Some(OWNER), "yes".into()).await;
    assert!(matches!(answer, Err(RunError::Conflict(_))), "{answer:?}");

    let resumed = other
        .hand_back(&run.id, Some(OWNER), Some("over to you".into()))
        .await
        .expect("the hand-back, through the other replica");
    assert!(
        matches!(resumed.status, RunStatus::Running | RunStatus::Completed),
        "{:?}",
        resumed.status
    );
    let events = f.events(&run.id).await;
    assert!(events.iter().any(|(_, e)| matches!(
        e,
        RunEvent::ControlReturned { note: Some(note) } if note == "over to you"
    )));
    if f.run(&run.id).await.status == RunStatus::Running {
        let canceled = other.cancel(&run.id, Some(OWNER)).await;
        assert!(
            matches!(
                canceled.as_ref().map(|r| r.status),
                Ok(RunStatus::Canceled | RunStatus::Completed) | Err(RunError::Conflict(_))
            ),
            "{canceled:?}"
        );
    }
    relaying.abort();
    check_log(&f.events(&run.id).await);
}

#[tokio::test]
async fn nothing_is_written_after_the_terminal_status() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let mut steps = presses(&["a"]);
    steps.push(final_step("done"));
    let run = f
        .start(&runs, &f.script("late", json!(steps)), Some(&sandbox.id))
        .await;
    f.wait_for_status(&run.id, RunStatus::Completed).await;
    wait_until_not_driven(&runs, &run.id).await;
    let events = f.events(&run.id).await;
    let row = f.run(&run.id).await;

    // Late control calls are refused.
    let cancel = runs.cancel(&run.id, Some(OWNER)).await;
    assert!(matches!(cancel, Err(RunError::Conflict(_))), "{cancel:?}");
    let take_over = runs.take_over(&run.id, Some(OWNER)).await;
    assert!(
        matches!(take_over, Err(RunError::Conflict(_))),
        "{take_over:?}"
    );
    let hand_back = runs.hand_back(&run.id, Some(OWNER), None).await;
    assert!(
        matches!(hand_back, Err(RunError::Conflict(_))),
        "{hand_back:?}"
    );

    // A sink that outlived the run (a late copy of ~/outputs, a late event, a late status
    // or checkpoint) as the lease holder: the database refuses every write.
    fake.put_file(&format!("{HOME}/outputs/late.txt"), b"too late");
    let active = runs.register(&run.id);
    runs.unregister(&run.id);
    let files: Arc<dyn SandboxFiles> = fake.clone();
    let sink = RunSink::new(
        runs.clone(),
        &row,
        active,
        Some(SandboxLink {
            sandbox_id: sandbox.id.clone(),
            files,
            home: HOME.into(),
        }),
    );
    sink.copy_outputs().await;
    let late_error = RunEvent::Error {
        step: None,
        kind: ErrorKind::Internal,
        message: "late".into(),
        fatal: false,
    };
    assert!(sink.emit(late_error).await.is_err());
    let late_status = RunEvent::RunStatus {
        status: RunStatus::Failed,
        reason: Some("late".into()),
        answer: None,
    };
    assert!(sink.emit(late_status).await.is_err());

    assert_eq!(f.events(&run.id).await, events);
    let after = f.run(&run.id).await;
    assert_eq!(after.status, RunStatus::Completed);
    assert_eq!(after.last_seq, row.last_seq);
    assert_eq!(after.answer.as_deref(), Some("done"));
    // Nor is a late output kept: no row, no file (a late copy used to add `outputs/late.txt`
    // to a completed run's artifacts, with no event saying so).
    let artifacts = f.h.store.artifacts(&run.id).await.unwrap();
    assert!(
        artifacts.iter().all(|a| a.name != "outputs/late.txt"),
        "{artifacts:?}"
    );
    let file = runs
        .artifacts
        .get(&run.id, "outputs/late.txt")
        .await
        .unwrap();
    assert!(
        file.is_none(),
        "the late output was written to the artifact store"
    );
}

#[tokio::test]
async fn input_files_are_in_the_sandbox_before_the_agent_starts_and_bad_ones_make_nothing() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let model = f.script("inputs", json!([final_step("read it")]));
    let request = |inputs: Vec<InputFile>| RunRequest {
        task: "read the notes".into(),
        model: model.clone(),
        sandbox_id: Some(sandbox.id.clone()),
        inputs,
        ..RunRequest::default()
    };
    let notes = InputFile {
        name: "notes.txt".into(),
        bytes: bytes::Bytes::from_static(b"the notes"),
    };

    // A name with a folder in it is refused, naming the field, and no run is made.
    let sneaky = InputFile {
        name: "../notes.txt".into(),
        ..notes.clone()
    };
    let refused = runs.create(OWNER, request(vec![sneaky])).await.unwrap_err();
    assert!(
        matches!(&refused, RunError::Invalid(i) if i.field == "inputs"),
        "{refused}"
    );
    assert!(
        runs.list(Some(OWNER), None, &Default::default())
            .await
            .unwrap()
            .is_empty()
    );

    let (run, _) = runs
        .create(OWNER, request(vec![notes]))
        .await
        .expect("a run with inputs");
    f.wait_for_status(&run.id, RunStatus::Completed).await;
    let path = format!("{HOME}/inputs/notes.txt");
    assert_eq!(
        fake.download_at_most(&path, 1024)
            .await
            .expect("the input in the sandbox"),
        b"the notes"
    );
    // Kept as the run's `input` artifact, and not one of its results.
    let kept = runs
        .artifacts(&run.id, Some(OWNER))
        .await
        .expect("artifacts");
    assert!(
        kept.iter()
            .any(|a| a.name == "inputs/notes.txt" && a.kind == "input"),
        "{kept:?}"
    );
    assert!(
        !kinds(&f.events(&run.id).await)
            .iter()
            .any(|k| k.contains("artifact"))
    );
}

#[tokio::test]
async fn a_waiting_runs_sandbox_may_be_paused_and_the_run_resumes_it_when_it_acts_again() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    tokio::spawn(runs.clone().report_sandbox_changes_forever());
    let (sandbox, fake) = f.sandbox().await;
    let keys = ["a", "b", "c", "d"];
    let mut steps = presses(&keys);
    steps.push(final_step("done"));
    let mut held = fake.hold_next_action();
    let run = f
        .start(&runs, &f.script("paused", json!(steps)), Some(&sandbox.id))
        .await;
    held.reached().await;

    // The agent drives: its computer may not be frozen under it.
    let refused = f.h.sandboxes.pause(&sandbox.id, Some(OWNER)).await;
    let Err(crate::sandboxes::SandboxError::Conflict(message)) = refused else {
        panic!("expected a conflict, got {refused:?}");
    };
    assert!(
        message.contains(&run.id) && message.contains("running"),
        "{message}"
    );
    assert!(!f.h.platform.container_of(&sandbox.id).unwrap().paused);

    // Held by a person, the run waits: its sandbox may be paused, and the log says so.
    take_over_mid_action(&runs, &run.id, held).await;
    f.h.sandboxes.pause(&sandbox.id, Some(OWNER)).await.unwrap();
    eventually("the pause in the run's log", async || {
        kinds(&f.events(&run.id).await).last().map(String::as_str) == Some("sandbox.paused")
    })
    .await;
    let at_pause = fake.actions().len();

    // The hand-back resumes the sandbox before the agent acts again.
    runs.hand_back(&run.id, Some(OWNER), None)
        .await
        .expect("the hand-back");
    assert!(!f.h.platform.container_of(&sandbox.id).unwrap().paused);
    assert_eq!(
        f.h.row(&sandbox.id).await.unwrap().status,
        crate::db::SandboxStatus::Ready
    );
    f.wait_for_status(&run.id, RunStatus::Completed).await;
    wait_until_not_driven(&runs, &run.id).await;

    let events = f.events(&run.id).await;
    check_log(&events);
    let kinds = kinds(&events);
    let paused = kinds.iter().position(|k| k == "sandbox.paused").unwrap();
    let resumed = kinds.iter().position(|k| k == "sandbox.resumed").unwrap();
    let returned = kinds.iter().position(|k| k == "control.returned").unwrap();
    assert!(paused < resumed && resumed < returned, "{kinds:?}");
    assert!(
        !kinds[paused..resumed].iter().any(|k| k == "action.started"),
        "{kinds:?}"
    );
    assert!(fake.actions().len() > at_pause);
    assert_eq!(pressed(&fake), keys);
}

#[tokio::test]
async fn canceling_a_waiting_run_resumes_its_paused_sandbox_for_the_last_copy() {
    let f = Fixture::new(LONG_LEASE).await;
    let runs = f.process();
    let (sandbox, fake) = f.sandbox().await;
    let mut steps = presses(&["a", "b"]);
    steps.push(final_step("done"));
    let mut held = fake.hold_next_action();
    let run = f
        .start(
            &runs,
            &f.script("cancel-paused", json!(steps)),
            Some(&sandbox.id),
        )
        .await;
    held.reached().await;
    take_over_mid_action(&runs, &run.id, held).await;
    f.h.sandboxes.pause(&sandbox.id, Some(OWNER)).await.unwrap();

    let canceled = runs.cancel(&run.id, Some(OWNER)).await.expect("the cancel");
    assert_eq!(canceled.status, RunStatus::Canceled);
    assert!(!f.h.platform.container_of(&sandbox.id).unwrap().paused);
    let kinds = kinds(&f.events(&run.id).await);
    assert!(kinds.iter().any(|k| k == "sandbox.resumed"), "{kinds:?}");
}
