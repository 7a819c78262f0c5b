//! [`RunSink`]: where the loop's events, screenshots and checkpoints go. Each event is
//! appended to the run's log as the lease holder (seq and status in one transaction) and only
//! then published to live subscribers; a terminal status is written after the last copy of
//! `~/outputs`, so `artifact.created` events come before it and nothing comes after it.
//!
//! It also keeps the sandbox's control gate in step with who drives: closed while the agent
//! drives, open from `control.taken` until `control.returned`, open again at the end.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent::{Checkpoint, EventSink, ObservationMeta, RunEvent, SinkError};
use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Mutex;

use super::artifacts::{
    MAX_ARTIFACT_BYTES, MAX_OUTPUT_FILES, artifact_name, describe, sniff_content_type,
};
use super::connect::{FilesError, SandboxFiles};
use super::{ActiveRun, Runs};
use crate::db::{ArtifactRecord, EventRecord, StatusChange};

/// Content types a backend may declare for a file it keeps (none is served as script; every
/// other file is labelled by its first bytes).
const DECLARABLE_TYPES: &[&str] = &["text/plain", "application/json"];

/// The most time the final copy of `~/outputs` may take before the terminal status.
const FINAL_COPY_TIMEOUT: Duration = Duration::from_secs(30);

/// The `artifact.created` event of a kept artifact.
fn created(record: ArtifactRecord) -> RunEvent {
    RunEvent::ArtifactCreated {
        name: record.name,
        kind: record.kind,
        size: u64::try_from(record.size).unwrap_or(0),
        content_type: record.content_type,
        sha256: record.sha256,
    }
}

/// The sandbox a run drives, as the sink reaches it.
pub(crate) struct SandboxLink {
    pub(crate) sandbox_id: String,
    /// Its files (through sandboxd, with the sandbox's own key).
    pub(crate) files: Arc<dyn SandboxFiles>,
    /// The agent's home directory (`~`).
    pub(crate) home: String,
}

/// Why a file was not kept.
#[derive(Debug, thiserror::Error)]
enum KeepError {
    /// Keeping it would pass the run's or the key's artifact budget.
    #[error("{0}")]
    OverBudget(String),
    #[error("{0}")]
    Failed(String),
    /// The run ended, or another process drives it now: nothing more is kept.
    #[error("the run ended or is driven by another process; nothing more is kept")]
    NotDriving,
}

/// The loop's sink for one run.
pub(crate) struct RunSink {
    runs: Arc<Runs>,
    run_id: String,
    /// The key that owns the run (its artifacts count against that key's budget).
    owner_key_id: String,
    active: Arc<ActiveRun>,
    sandbox: Option<SandboxLink>,
    /// Files copied from `~/outputs`: name -> (size, modified time) when copied.
    copied: Mutex<HashMap<String, (u64, Option<String>)>>,
}

impl RunSink {
    pub(crate) fn new(
        runs: Arc<Runs>,
        run: &crate::db::RunRecord,
        active: Arc<ActiveRun>,
        sandbox: Option<SandboxLink>,
    ) -> Self {
        Self {
            runs,
            run_id: run.id.clone(),
            owner_key_id: run.owner_key_id.clone(),
            active,
            sandbox,
            copied: Mutex::new(HashMap::new()),
        }
    }

    /// Appends an event, then publishes it.
    pub(crate) async fn append(
        &self,
        event: &RunEvent,
        change: Option<StatusChange>,
    ) -> Result<i64, SinkError> {
        self.append_with(event, change, None).await
    }

    /// Like [`append`](Self::append), storing `checkpoint` in the same transaction.
    async fn append_with(
        &self,
        event: &RunEvent,
        change: Option<StatusChange>,
        checkpoint: Option<&str>,
    ) -> Result<i64, SinkError> {
        let kind = event.kind();
        let data = serde_json::to_string(event).map_err(|e| SinkError(e.to_string()))?;
        let at = self.runs.clock.now_ms();
        let store = &self.runs.store;
        let owner = &self.runs.lease_owner;
        let appended = match checkpoint {
            Some(checkpoint) => {
                store
                    .append_event_with_checkpoint(&self.run_id, owner, kind, &data, at, checkpoint)
                    .await
            }
            None => {
                store
                    .append_event(&self.run_id, owner, kind, &data, at, change.as_ref())
                    .await
            }
        };
        let seq = appended
            .map_err(|e| SinkError(e.to_string()))?
            .ok_or_else(|| {
                SinkError("the run has ended or another process holds its lease".into())
            })?;
        // Nobody listening is fine.
        let _ = self.active.events.send(EventRecord {
            seq,
            kind: kind.to_string(),
            data,
            at,
        });
        Ok(seq)
    }

    /// Copies new or changed files of `~/outputs` to the artifact store, each with an
    /// `artifact.created` event. Failures are logged: a missing copy must not fail the run.
    pub(crate) async fn copy_outputs(&self) {
        let Some(sandbox) = &self.sandbox else {
            return;
        };
        // One copy at a time; the map remembers what is done.
        let mut copied = self.copied.lock().await;
        self.copy_into(sandbox, &mut copied).await;
    }

    async fn copy_into(
        &self,
        sandbox: &SandboxLink,
        copied: &mut HashMap<String, (u64, Option<String>)>,
    ) {
        let root = format!("{}/outputs", sandbox.home.trim_end_matches('/'));
        let listing = match sandbox.files.list(&root).await {
            Ok(listing) => listing,
            // No ~/outputs yet.
            Err(FilesError::NotFound(_)) => return,
            Err(error) => {
                tracing::debug!(run_id = %self.run_id, %error, "listing ~/outputs failed");
                return;
            }
        };
        for file in listing {
            if file.is_directory || file.is_symlink {
                continue;
            }
            let Some(relative) = file.path.strip_prefix(&format!("{root}/")) else {
                continue;
            };
            // Two segments always (`outputs/<file>`): nested folders are flattened with `__`.
            let Some(name) = artifact_name(&format!("outputs/{}", relative.replace('/', "__")))
            else {
                tracing::warn!(run_id = %self.run_id, path = %file.path, "output name refused");
                continue;
            };
            let size = file.size.unwrap_or(0);
            let stamp = (size, file.modified_time.clone());
            if copied.get(&name) == Some(&stamp) {
                continue;
            }
            if !copied.contains_key(&name) && copied.len() >= MAX_OUTPUT_FILES {
                tracing::warn!(run_id = %self.run_id, "more than {MAX_OUTPUT_FILES} outputs; the rest are not kept");
                break;
            }
            if size > MAX_ARTIFACT_BYTES {
                tracing::warn!(run_id = %self.run_id, %name, size, "output too large to keep");
                copied.insert(name, stamp);
                continue;
            }
            // The listed size is the sandbox's word: what it sends is bounded on its own.
            let download = sandbox
                .files
                .download_at_most(&file.path, MAX_ARTIFACT_BYTES)
                .await;
            let bytes = match download {
                Ok(bytes) => Bytes::from(bytes),
                Err(error @ FilesError::TooLarge(_)) => {
                    tracing::warn!(run_id = %self.run_id, %name, %error, "output grew too large to keep");
                    copied.insert(name, stamp);
                    continue;
                }
                Err(error) => {
                    tracing::warn!(run_id = %self.run_id, %name, %error, "copying an output failed");
                    continue;
                }
            };
            match self
                .store_artifact(&name, "output", None, bytes.clone())
                .await
            {
                Err(KeepError::OverBudget(reason)) => {
                    // Not tried again unless the file changes.
                    copied.insert(name.clone(), stamp);
                    if self.skipped(&name, bytes.len(), &reason).await.is_err() {
                        return;
                    }
                }
                Ok(record) => {
                    copied.insert(name, stamp);
                    let event = created(record);
                    if let Err(error) = self.append(&event, None).await {
                        tracing::debug!(run_id = %self.run_id, %error, "artifact event not written");
                        return;
                    }
                }
                Err(KeepError::NotDriving) => {
                    tracing::debug!(run_id = %self.run_id, "the run ended or moved; outputs no longer copied");
                    return;
                }
                Err(error) => {
                    tracing::warn!(run_id = %self.run_id, %name, %error, "keeping an output failed");
                }
            }
        }
    }

    /// Keeps `bytes` as the artifact `name` (of `kind`, declared as `content_type` when that
    /// is one of [`DECLARABLE_TYPES`], else sniffed) and writes its `artifact.created` event:
    /// for a backend that makes its files itself rather than in a sandbox's `~/outputs`.
    pub(crate) async fn keep(
        &self,
        name: &str,
        kind: &str,
        content_type: &str,
        bytes: Bytes,
    ) -> Result<(), SinkError> {
        let Some(name) = artifact_name(name) else {
            return Err(SinkError(format!("{name:?} is not a safe artifact name")));
        };
        let size = bytes.len();
        let record = match self
            .store_artifact(&name, kind, Some(content_type), bytes)
            .await
        {
            Ok(record) => record,
            Err(KeepError::OverBudget(reason)) => {
                return self.skipped(&name, size, &reason).await.map(drop);
            }
            Err(error) => return Err(SinkError(error.to_string())),
        };
        let event = created(record);
        self.append(&event, None).await.map(drop)
    }

    /// Writes `event` and the run's checkpoint in one transaction (a backend whose resume
    /// state is revealed by an event: the remote A2A task's handle).
    pub(crate) async fn append_checkpointed(
        &self,
        event: &RunEvent,
        checkpoint: &str,
    ) -> Result<i64, SinkError> {
        self.append_with(event, None, Some(checkpoint)).await
    }

    /// Records that `name` (`size` bytes) was not kept, and why.
    pub(crate) async fn skip(
        &self,
        name: &str,
        size: usize,
        reason: &str,
    ) -> Result<(), SinkError> {
        self.skipped(name, size, reason).await.map(drop)
    }

    /// An `artifact.skipped` event: `name` (`size` bytes) was not kept, and why.
    async fn skipped(&self, name: &str, size: usize, reason: &str) -> Result<i64, SinkError> {
        tracing::warn!(run_id = %self.run_id, %name, size, %reason, "artifact not kept");
        let event = RunEvent::ArtifactSkipped {
            name: name.to_string(),
            size: u64::try_from(size).unwrap_or(u64::MAX),
            reason: reason.to_string(),
        };
        self.append(&event, None).await.inspect_err(|error| {
            tracing::debug!(run_id = %self.run_id, %error, "artifact event not written");
        })
    }

    /// Whether `size` more bytes under `name` fit the run's and the key's artifact budgets.
    async fn check_budget(&self, name: &str, size: usize) -> Result<(), KeepError> {
        let settings = &self.runs.settings;
        let (run_used, key_used) = self
            .runs
            .store
            .artifact_usage(&self.run_id, &self.owner_key_id, name)
            .await
            .map_err(|e| KeepError::Failed(e.to_string()))?;
        let size = u64::try_from(size).unwrap_or(u64::MAX);
        let used = |bytes: i64| u64::try_from(bytes).unwrap_or(0);
        let mib = |bytes: u64| bytes / (1024 * 1024);
        if used(run_used).saturating_add(size) > settings.run_artifact_bytes {
            return Err(KeepError::OverBudget(format!(
                "over this run's artifact budget ({} MiB, --run-artifacts-mib)",
                mib(settings.run_artifact_bytes)
            )));
        }
        if used(key_used).saturating_add(size) > settings.key_artifact_bytes {
            return Err(KeepError::OverBudget(format!(
                "over this API key's artifact budget ({} MiB, --key-artifacts-mib): delete \
                 runs it no longer needs",
                mib(settings.key_artifact_bytes)
            )));
        }
        Ok(())
    }

    async fn store_artifact(
        &self,
        name: &str,
        kind: &str,
        declared: Option<&str>,
        bytes: Bytes,
    ) -> Result<ArtifactRecord, KeepError> {
        self.check_budget(name, bytes.len()).await?;
        let driving = self
            .runs
            .store
            .drives_run(&self.run_id, &self.runs.lease_owner);
        if !driving
            .await
            .map_err(|e| KeepError::Failed(e.to_string()))?
        {
            return Err(KeepError::NotDriving);
        }
        let content_type = declared
            .filter(|declared| DECLARABLE_TYPES.contains(declared))
            .unwrap_or_else(|| sniff_content_type(&bytes));
        let now = self.runs.clock.now_ms();
        let record = describe(&self.run_id, name, kind, content_type, &bytes, now);
        self.runs
            .artifacts
            .put(&self.run_id, name, bytes)
            .await
            .map_err(|e| KeepError::Failed(e.to_string()))?;
        let kept = self
            .runs
            .store
            .keep_artifact(&record, &self.runs.lease_owner);
        if !kept.await.map_err(|e| KeepError::Failed(e.to_string()))? {
            return Err(KeepError::NotDriving);
        }
        Ok(record)
    }

    /// Writes `event` (with `checkpoint` in the same transaction when given) and does what
    /// it implies for the control gate and the outputs copier.
    async fn emit_with(&self, event: RunEvent, checkpoint: Option<&str>) -> Result<(), SinkError> {
        let change = match &event {
            RunEvent::RunStatus {
                status,
                reason,
                answer,
            } => Some(StatusChange {
                status: *status,
                answer: answer.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        };
        let terminal = change.as_ref().is_some_and(|c| c.status.is_terminal());
        // For the terminal status: the last outputs first, and no copy in between (the lock is
        // held until the status is written), so nothing is written after it.
        let mut final_copy = None;
        if terminal {
            let mut copied = self.copied.lock().await;
            if let Some(sandbox) = &self.sandbox
                && tokio::time::timeout(FINAL_COPY_TIMEOUT, self.copy_into(sandbox, &mut copied))
                    .await
                    .is_err()
            {
                tracing::warn!(run_id = %self.run_id, "the final copy of ~/outputs timed out");
            }
            final_copy = Some(copied);
        }
        if matches!(event, RunEvent::ControlReturned { .. }) {
            // Closed before the agent can act again.
            self.set_gate(false);
        }
        self.append_with(&event, change, checkpoint).await?;
        match event {
            // The in-flight action has finished: the person's input goes through now.
            RunEvent::ControlTaken {} => self.set_gate(true),
            // New files are copied as they appear, off the loop's path.
            RunEvent::ActionFinished { .. } if self.sandbox.is_some() => {
                self.active.copy_outputs.notify_one();
            }
            _ => {}
        }
        if terminal {
            self.set_gate(true);
        }
        drop(final_copy);
        Ok(())
    }

    fn set_gate(&self, open: bool) {
        if let Some(sandbox) = &self.sandbox {
            self.runs.sandboxes.set_control_input(
                &sandbox.sandbox_id,
                open,
                Some(&self.runs.lease_owner),
            );
        }
    }
}

#[async_trait]
impl EventSink for RunSink {
    async fn emit(&self, event: RunEvent) -> Result<(), SinkError> {
        self.emit_with(event, None).await
    }

    async fn emit_checkpointed(
        &self,
        event: RunEvent,
        checkpoint: &Checkpoint,
    ) -> Result<(), SinkError> {
        if matches!(event, RunEvent::RunStatus { .. }) {
            // A status change has its own write; the checkpoint goes first.
            self.checkpoint(checkpoint).await?;
            return self.emit(event).await;
        }
        let json = serde_json::to_string(checkpoint).map_err(|e| SinkError(e.to_string()))?;
        self.emit_with(event, Some(&json)).await
    }

    async fn screenshot(
        &self,
        observation: &ObservationMeta,
        image: &Bytes,
    ) -> Result<(), SinkError> {
        let extension = if observation.mime == "image/jpeg" {
            "jpg"
        } else {
            "png"
        };
        let Some(name) = artifact_name(&format!("screenshots/{}.{extension}", observation.id))
        else {
            return Err(SinkError(format!(
                "observation id {:?} is not a safe name",
                observation.id
            )));
        };
        match self
            .store_artifact(&name, "screenshot", None, image.clone())
            .await
        {
            Ok(_) => Ok(()),
            // The model saw it; the record goes without it, and says so.
            Err(KeepError::OverBudget(reason)) => {
                self.skipped(&name, image.len(), &reason).await.map(drop)
            }
            Err(error @ KeepError::NotDriving) => Err(SinkError(error.to_string())),
            Err(KeepError::Failed(message)) => Err(SinkError(message)),
        }
    }

    async fn checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), SinkError> {
        let json = serde_json::to_string(checkpoint).map_err(|e| SinkError(e.to_string()))?;
        let stored = self
            .runs
            .store
            .set_checkpoint(&self.run_id, &self.runs.lease_owner, &json)
            .await
            .map_err(|e| SinkError(e.to_string()))?;
        if stored {
            Ok(())
        } else {
            Err(SinkError(
                "the run has ended or another process holds its lease".into(),
            ))
        }
    }
}
