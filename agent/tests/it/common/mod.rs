//! Test support shared by the integration tests: a recording computer (the test double at the
//! sandbox boundary; real-image tests are in the `tests` crate), an HTTP server speaking a model
//! provider's wire protocol with scripted replies, recorded provider streams, and run helpers.

#![allow(dead_code)]

pub mod computer;
pub mod provider;
pub mod streams;

use std::sync::Arc;
use std::time::Duration;

use agent::{
    Computer, Control, EventSink, Model, Phase, RecordingSink, RunConfig, RunError, RunEvent,
    RunOutcome, Runner,
};
use tokio::task::JoinHandle;

/// A run started in its own task.
pub struct Started {
    pub control: Control,
    pub sink: Arc<RecordingSink>,
    pub handle: JoinHandle<Result<RunOutcome, RunError>>,
}

impl Started {
    pub async fn outcome(self) -> anyhow::Result<RunOutcome> {
        let outcome = tokio::time::timeout(Duration::from_secs(60), self.handle).await??;
        Ok(outcome?)
    }
}

/// Starts `config` with `computer` and `model`, recording into a fresh sink.
pub fn start(computer: Arc<dyn Computer>, model: Arc<dyn Model>, config: RunConfig) -> Started {
    let sink = Arc::new(RecordingSink::new());
    let runner = Runner::new(computer, model, sink.clone() as Arc<dyn EventSink>, config);
    let control = runner.control();
    let handle = tokio::spawn(runner.run());
    Started {
        control,
        sink,
        handle,
    }
}

/// Waits (at most 30 s, to never hang a test) until the loop is in a phase matching `done`.
pub async fn wait_phase(control: &Control, done: impl Fn(&Phase) -> bool) -> anyhow::Result<Phase> {
    let mut receiver = control.subscribe();
    let phase = tokio::time::timeout(Duration::from_secs(30), receiver.wait_for(|p| done(p)))
        .await??
        .clone();
    Ok(phase)
}

/// The `type` tags of `events`, in order.
pub fn kinds(events: &[RunEvent]) -> Vec<&'static str> {
    events.iter().map(RunEvent::kind).collect()
}

/// The run.status values in order.
pub fn statuses(events: &[RunEvent]) -> Vec<agent::RunStatus> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::RunStatus { status, .. } => Some(*status),
            _ => None,
        })
        .collect()
}
