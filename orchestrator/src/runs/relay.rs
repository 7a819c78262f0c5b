//! Commands for a run another replica drives ([`crate::replicas`]): cancel, take over, hand
//! back and answer work through whichever replica receives them.
//!
//! The receiving replica checks the caller's access, writes the command to the database and
//! waits for its answer; the replica holding the run's lease looks for commands every
//! [`COMMAND_POLL`], takes each once, carries it out as if it had received it, and writes the
//! answer (done, or the error it met). Only a live replica's runs are relayed to: a run whose
//! driver is gone is refused as not driven here until another replica resumes it (its lease
//! expired); a command the driver did not answer within [`ANSWER_WAIT`] (it died meanwhile)
//! is a timeout.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{RunError, Runs};
use crate::db::RunRecord;
use crate::secret::new_id;

/// How often a replica looks for commands for the runs it drives.
pub const COMMAND_POLL: Duration = Duration::from_millis(200);
/// Commands older than this are not taken any more (their sender gave up).
const COMMAND_MAX_AGE: Duration = Duration::from_secs(90);
/// How long the receiving replica waits for the answer (cancel waits up to 60 s for the run
/// to stop).
const ANSWER_WAIT: Duration = Duration::from_secs(80);

/// What a person (or a client) asks of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunCommand {
    Cancel,
    TakeOver,
    HandBack {
        note: Option<String>,
    },
    Answer {
        text: String,
        message_id: Option<String>,
    },
}

/// How the driving replica answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum CommandAnswer {
    Done,
    Refused { kind: RefusalKind, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RefusalKind {
    Conflict,
    NotFound,
    Timeout,
    Failed,
}

impl CommandAnswer {
    fn of(result: Result<RunRecord, RunError>) -> Self {
        let Err(error) = result else {
            return Self::Done;
        };
        let kind = match &error {
            RunError::Conflict(_) | RunError::Invalid(_) => RefusalKind::Conflict,
            RunError::NotFound(_) => RefusalKind::NotFound,
            RunError::Timeout(_) => RefusalKind::Timeout,
            _ => RefusalKind::Failed,
        };
        let message = match error {
            // The message alone: the receiving replica's error adds its own words.
            RunError::Conflict(message)
            | RunError::NotFound(message)
            | RunError::Timeout(message) => message,
            other => other.to_string(),
        };
        Self::Refused { kind, message }
    }

    fn into_error(self) -> Option<RunError> {
        match self {
            Self::Done => None,
            Self::Refused { kind, message } => Some(match kind {
                RefusalKind::Conflict => RunError::Conflict(message),
                RefusalKind::NotFound => RunError::NotFound(message),
                RefusalKind::Timeout => RunError::Timeout(message),
                RefusalKind::Failed => RunError::Relayed(message),
            }),
        }
    }
}

impl Runs {
    /// Carries `command` out through the replica driving run `id` when that is another one
    /// (`Ok(None)`: this process drives it, or nobody does; the caller acts itself).
    pub(crate) async fn relay_if_elsewhere(
        &self,
        id: &str,
        owner: Option<&str>,
        command: RunCommand,
    ) -> Result<Option<RunRecord>, RunError> {
        if self.active(id).is_some() {
            return Ok(None);
        }
        let run = self.get(id, owner).await?;
        let now = self.clock.now_ms();
        // Driven by another replica, alive: not by an earlier life of this one (its lease is
        // taken over at once), nor by a replica that is gone (the run resumes elsewhere once
        // its lease expires; until then the caller is told it is not driven here).
        let Some(driver) = run
            .lease_owner
            .as_deref()
            .filter(|_| !run.status.is_terminal())
            .filter(|_| run.lease_expires_at.is_some_and(|until| until >= now))
            .filter(|o| !o.starts_with(self.replica_prefix.as_str()))
            .and_then(|o| o.split_once('/').map(|(replica, _)| replica))
        else {
            return Ok(None);
        };
        let since = now - crate::replicas::GONE_AFTER_MS;
        let alive = self
            .store
            .replicas()
            .await?
            .iter()
            .any(|r| r.id == driver && r.seen_at >= since);
        if !alive {
            return Ok(None);
        }
        let command_id = new_id("cmd");
        let text = serde_json::to_string(&command)
            .map_err(|e| RunError::Relayed(format!("encoding the command: {e}")))?;
        self.store
            .insert_run_command(&command_id, id, &text, now)
            .await?;
        tracing::info!(run_id = %id, command_id = %command_id, driver = run.lease_owner.as_deref().unwrap_or(""), "command passed to the replica driving the run");
        let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some(answer) = self.store.run_command_answer(&command_id).await? {
                let answer: CommandAnswer = serde_json::from_str(&answer)
                    .map_err(|e| RunError::Relayed(format!("reading the answer: {e}")))?;
                return match answer.into_error() {
                    Some(error) => Err(error),
                    None => self.get(id, owner).await.map(Some),
                };
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RunError::Timeout(format!(
                    "the replica driving run {id} did not answer within {} s",
                    ANSWER_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Carries out the commands other replicas pass to the runs this process drives, until
    /// the process ends.
    pub async fn relay_commands_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(COMMAND_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut purged = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            if let Err(error) = self.relay_commands_once().await {
                tracing::warn!(%error, "looking for relayed run commands failed");
            }
            if purged.elapsed() >= Duration::from_secs(60) {
                purged = tokio::time::Instant::now();
                let before = self.clock.now_ms() - 3_600_000;
                let _ = self.store.purge_run_commands(before).await;
            }
        }
    }

    /// Takes and carries out the waiting commands for this process's runs (each in its own
    /// task: a cancel may wait for the run to stop).
    pub async fn relay_commands_once(self: &Arc<Self>) -> Result<usize, RunError> {
        let max_age = i64::try_from(COMMAND_MAX_AGE.as_millis()).unwrap_or(i64::MAX);
        let since = self.clock.now_ms() - max_age;
        let commands = self
            .store
            .take_run_commands(&self.lease_owner, since)
            .await?;
        let taken = commands.len();
        for command in commands {
            let runs = self.clone();
            tokio::spawn(async move {
                let answer = match serde_json::from_str::<RunCommand>(&command.command) {
                    Ok(parsed) => {
                        tracing::info!(run_id = %command.run_id, command_id = %command.id, ?parsed, "carrying out a command another replica received");
                        CommandAnswer::of(runs.carry_out(&command.run_id, parsed).await)
                    }
                    Err(error) => CommandAnswer::Refused {
                        kind: RefusalKind::Failed,
                        message: format!("unreadable command: {error}"),
                    },
                };
                let text = serde_json::to_string(&answer).unwrap_or_else(|_| {
                    r#"{"outcome":"refused","kind":"failed","message":"unencodable answer"}"#
                        .to_string()
                });
                if let Err(error) = runs
                    .store
                    .answer_run_command(&command.id, &text, runs.clock.now_ms())
                    .await
                {
                    tracing::warn!(command_id = %command.id, %error, "answering a relayed command failed");
                }
            });
        }
        Ok(taken)
    }

    /// One command, as this process would for a request it received (the receiving replica
    /// checked the caller's access).
    async fn carry_out(&self, id: &str, command: RunCommand) -> Result<RunRecord, RunError> {
        match command {
            RunCommand::Cancel => self.cancel(id, None).await,
            RunCommand::TakeOver => self.take_over(id, None).await,
            RunCommand::HandBack { note } => self.hand_back(id, None, note).await,
            RunCommand::Answer { text, message_id } => {
                self.answer_message(id, None, text, message_id).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_carry_the_kind_of_refusal_across() {
        let conflict = CommandAnswer::of(Err(RunError::Conflict("run r is paused".into())));
        let text = serde_json::to_string(&conflict).unwrap();
        let back: CommandAnswer = serde_json::from_str(&text).unwrap();
        match back.into_error() {
            Some(RunError::Conflict(message)) => assert_eq!(message, "run r is paused"),
            other => panic!("{other:?}"),
        }
        let command = RunCommand::HandBack {
            note: Some("done".into()),
        };
        let text = serde_json::to_string(&command).unwrap();
        assert_eq!(text, r#"{"kind":"hand_back","note":"done"}"#);
        assert_eq!(serde_json::from_str::<RunCommand>(&text).unwrap(), command);
    }
}
