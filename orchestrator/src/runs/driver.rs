//! Drives one run in its own task: writes `queued`, hands a run of the conformance executor to
//! [`super::conformance`]; otherwise takes a sandbox (warm pool first) unless the caller named
//! one, builds the model and the computer, puts the run's input files in `~/inputs`, closes the
//! control viewers' input, runs the loop (or resumes it from its checkpoint after a restart) and, all along, renews
//! the run's lease; when the lease is lost the loop is dropped at once, so a second process
//! never drives the same run.

use std::sync::Arc;

use agent::{
    Checkpoint, Computer, ErrorKind, EventSink, ModelSpec, RunConfig, RunEvent, RunStatus, Runner,
};

use super::connect::ConnectError;
use super::sink::{RunSink, SandboxLink};
use super::{ActiveRun, Runs};
use crate::db::{RunRecord, SandboxRecord};
use crate::sandboxes::CreateSpec;

/// Starts driving `run` in its own task. `resume` is `Some(checkpoint)` for a run picked up
/// after a restart (its checkpoint, if it had one).
pub(crate) fn spawn(
    runs: Arc<Runs>,
    run: RunRecord,
    active: Arc<ActiveRun>,
    resume: Option<Option<String>>,
) {
    let span = tracing::info_span!("run", run_id = %run.id, sandbox_id = tracing::field::Empty);
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            let id = run.id.clone();
            let mut lease = tokio::spawn(renew_lease(runs.clone(), id.clone()));
            tokio::select! {
                () = drive(runs.clone(), run, active.clone(), resume) => {}
                // The renewal task ends only when the lease is lost.
                _ = &mut lease => {
                    tracing::warn!("lost the run's lease; another process may drive it now");
                }
            }
            lease.abort();
            active.finished.send_replace(true);
            runs.unregister(&id);
        },
        span,
    ));
}

/// Renews the lease every third of its lifetime; returns when it is lost.
async fn renew_lease(runs: Arc<Runs>, id: String) {
    let every = runs.settings.lease_ttl / 3;
    loop {
        tokio::time::sleep(every).await;
        let until = runs.clock.now_ms() + runs.lease_ms();
        match runs
            .store
            .renew_run_lease(&id, &runs.lease_owner, until)
            .await
        {
            Ok(true) => {}
            // Ended (the driver stops by itself) or taken over by another process.
            Ok(false) => return,
            // The database is unreachable: keep trying until the lease would have expired.
            Err(error) => tracing::warn!(%error, "renewing the run's lease failed"),
        }
    }
}

/// Emits a fatal error and the failed status.
async fn fail(sink: &RunSink, kind: ErrorKind, message: String) {
    let error = RunEvent::Error {
        step: None,
        kind,
        message: message.clone(),
        fatal: true,
    };
    let status = RunEvent::RunStatus {
        status: RunStatus::Failed,
        reason: Some(message),
        answer: None,
    };
    for event in [error, status] {
        if let Err(error) = sink.emit(event).await {
            tracing::warn!(%error, "could not record the run's failure");
            return;
        }
    }
}

async fn canceled(sink: &RunSink) {
    let status = RunEvent::RunStatus {
        status: RunStatus::Canceled,
        reason: None,
        answer: None,
    };
    if let Err(error) = sink.emit(status).await {
        tracing::warn!(%error, "could not record the cancel");
    }
}

/// True when a cancel arrived before the loop started; otherwise marks it started.
fn start_or_canceled(active: &ActiveRun) -> bool {
    match active.start.lock() {
        Ok(mut gate) => {
            if gate.canceled {
                return true;
            }
            gate.started = true;
            false
        }
        // A poisoned gate: treat as canceled rather than drive blind.
        Err(_) => true,
    }
}

async fn drive(
    runs: Arc<Runs>,
    run: RunRecord,
    active: Arc<ActiveRun>,
    resume: Option<Option<String>>,
) {
    let bare = RunSink::new(runs.clone(), &run, active.clone(), None);
    if resume.is_none()
        && let Err(error) = bare
            .append(
                &RunEvent::RunStatus {
                    status: RunStatus::Queued,
                    reason: None,
                    answer: None,
                },
                None,
            )
            .await
    {
        tracing::warn!(%error, "could not record the queued run");
        return;
    }

    if run.model == super::backend::CONFORMANCE {
        if start_or_canceled(&active) {
            return canceled(&bare).await;
        }
        return super::conformance::drive(&run, &active, &bare).await;
    }
    if let Some(card_url) = super::remote::parse_model(&run.model) {
        if start_or_canceled(&active) {
            return canceled(&bare).await;
        }
        return match card_url {
            Ok(card_url) => {
                super::remote::drive(&runs, &run, &active, &bare, card_url, resume.flatten()).await
            }
            Err(message) => fail(&bare, ErrorKind::RemoteError, message).await,
        };
    }

    // The sandbox: named, recorded before a restart, or taken now.
    let sandbox = match &run.sandbox_id {
        Some(id) => match runs.sandboxes.get_awake(id, None).await {
            Ok(record) => record,
            Err(error) => {
                return fail(
                    &bare,
                    ErrorKind::SandboxError,
                    format!("sandbox {id}: {error}"),
                )
                .await;
            }
        },
        None => {
            let create = runs
                .sandboxes
                .create(&run.owner_key_id, CreateSpec::default());
            let record = tokio::select! {
                created = create => match created {
                    Ok((record, _)) => record,
                    Err(error) => {
                        return fail(&bare, ErrorKind::SandboxError, format!("no sandbox for the run: {error}")).await;
                    }
                },
                () = active.cancel_requested.notified() => return canceled(&bare).await,
            };
            match runs
                .store
                .set_run_sandbox(&run.id, &runs.lease_owner, &record.id, true)
                .await
            {
                Ok(true) => record,
                Ok(false) => {
                    tracing::warn!(sandbox_id = %record.id, "the run ended or moved while its sandbox started");
                    return;
                }
                Err(error) => {
                    return fail(
                        &bare,
                        ErrorKind::Internal,
                        format!("recording the sandbox: {error}"),
                    )
                    .await;
                }
            }
        }
    };
    tracing::Span::current().record("sandbox_id", sandbox.id.as_str());

    let (computer, link) = match connect(&runs, &sandbox).await {
        Ok(parts) => parts,
        Err(error) => return fail(&bare, ErrorKind::SandboxError, error.to_string()).await,
    };
    let (files, home) = (link.files.clone(), link.home.clone());
    let sink = Arc::new(RunSink::new(runs.clone(), &run, active.clone(), Some(link)));
    let model = match ModelSpec::parse(&run.model)
        .map_err(|e| e.to_string())
        .and_then(|spec| agent::build_model(&spec, &runs.models).map_err(|e| e.to_string()))
    {
        Ok(model) => model,
        Err(message) => return fail(&sink, ErrorKind::ModelError, message).await,
    };
    let checkpoint = match resume
        .flatten()
        .map(|json| serde_json::from_str::<Checkpoint>(&json))
    {
        None => None,
        Some(Ok(checkpoint)) => Some(checkpoint),
        Some(Err(error)) => {
            return fail(
                &sink,
                ErrorKind::Internal,
                format!("stored checkpoint: {error}"),
            )
            .await;
        }
    };
    let mut task = run.task.clone();
    // A new start (no checkpoint) puts the run's input files in the sandbox first.
    if checkpoint.is_none() {
        match put_inputs(&runs, &run.id, files.as_ref(), &home).await {
            Ok(names) if names.is_empty() => {}
            Ok(names) => task.push_str(&format!(
                "\n\n(The files for this task are in ~/inputs: {}.)",
                names.join(", ")
            )),
            Err(message) => return fail(&sink, ErrorKind::SandboxError, message).await,
        }
    }
    let mut config = RunConfig::new(task);
    config.limits = run.limits;

    if start_or_canceled(&active) {
        return canceled(&sink).await;
    }
    // The agent drives: control viewers' input is dropped until a person takes over.
    runs.sandboxes
        .set_control_input(&sandbox.id, false, Some(&runs.lease_owner));
    let copier = {
        let sink = sink.clone();
        let active = active.clone();
        tokio::spawn(async move {
            loop {
                active.copy_outputs.notified().await;
                sink.copy_outputs().await;
            }
        })
    };
    let driving = Driving {
        runs: runs.clone(),
        sandbox_id: sandbox.id.clone(),
        copier,
    };
    let runner =
        Runner::new(computer, model, sink.clone(), config).with_control(active.control.clone());
    let result = match checkpoint {
        Some(checkpoint) => runner.resume(checkpoint).await,
        None => runner.run().await,
    };
    driving.copier.abort();
    match result {
        Ok(outcome) => {
            tracing::info!(status = ?outcome.status, steps = outcome.steps, "run ended");
        }
        Err(agent::RunError::Sink(error)) => {
            tracing::warn!(%error, "the run stopped: its events cannot be written");
        }
        Err(error) => fail(&sink, ErrorKind::Internal, error.to_string()).await,
    }
    drop(driving);
}

/// While the agent drives: the control viewers' input closed and the outputs copier running.
/// Dropping it stops the copier and gives the person the desktop back, however the driver
/// stops, its future dropped on a lost lease included.
struct Driving {
    runs: Arc<Runs>,
    sandbox_id: String,
    copier: tokio::task::JoinHandle<()>,
}

impl Drop for Driving {
    fn drop(&mut self) {
        self.copier.abort();
        self.runs
            .sandboxes
            .set_control_input(&self.sandbox_id, true, Some(&self.runs.lease_owner));
    }
}

/// Puts the run's `input` artifacts in `<home>/inputs/`; returns their file names.
async fn put_inputs(
    runs: &Runs,
    run_id: &str,
    files: &dyn super::connect::SandboxFiles,
    home: &str,
) -> Result<Vec<String>, String> {
    let records = runs
        .store
        .artifacts(run_id)
        .await
        .map_err(|e| format!("reading the run's input files: {e}"))?;
    let mut names = Vec::new();
    for record in records.iter().filter(|r| r.kind == "input") {
        let Some(name) = record.name.strip_prefix("inputs/") else {
            continue;
        };
        let bytes = runs
            .artifacts
            .get(run_id, &record.name)
            .await
            .map_err(|e| format!("reading input {name}: {e}"))?
            .ok_or_else(|| format!("input {name} is missing from the artifact store"))?;
        let path = format!("{}/inputs/{name}", home.trim_end_matches('/'));
        files
            .upload(&path, bytes.to_vec())
            .await
            .map_err(|e| format!("putting input {name} in the sandbox: {e}"))?;
        names.push(name.to_string());
    }
    Ok(names)
}

/// The computer the loop drives and the sink's link, for a ready sandbox (through the runs'
/// [`SandboxConnector`](super::connect::SandboxConnector)).
async fn connect(
    runs: &Runs,
    sandbox: &SandboxRecord,
) -> Result<(Arc<dyn Computer>, SandboxLink), ConnectError> {
    let key = runs.sandboxes.sandbox_key(sandbox);
    let connection = runs.connector.connect(sandbox, &key).await?;
    Ok((
        connection.computer,
        SandboxLink {
            sandbox_id: sandbox.id.clone(),
            files: connection.files,
            home: connection.home,
        },
    ))
}
