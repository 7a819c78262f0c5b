//! Looking at the screen: screenshots (retried on transport errors, each stored with its id
//! and sent to the sink first) and the wait for the screen to settle after an action.

use std::time::{Duration, Instant};

use super::state::{State, hash_bytes, millis};
use super::{Runner, Stop, Waited};
use crate::computer::ComputerError;
use crate::control::Signal;
use crate::event::ErrorKind;
use crate::observation::{Observation, ObserveRequest};

/// Screenshot attempts before the run fails (transport errors are retried).
const OBSERVE_ATTEMPTS: u32 = 3;

impl Runner {
    fn observe_request(&self) -> ObserveRequest {
        ObserveRequest::within(
            self.model.info().observation_bounds,
            self.config.image_format,
        )
    }

    /// Takes the next screenshot; a takeover request meanwhile drops it.
    pub(super) async fn observe(&self, st: &mut State) -> Result<Waited<()>, Stop> {
        let request = self.observe_request();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = tokio::select! {
                result = self.computer.observe(&request) => result,
                signal = self.control.wait_signal() => match signal {
                    Signal::Cancel => return Err(Stop::Canceled),
                    Signal::TakeOver => return Ok(Waited::TakeOver),
                },
            };
            match self
                .accept_observation(st, result, started, attempt)
                .await?
            {
                Some(()) => return Ok(Waited::Done(())),
                None => continue,
            }
        }
    }

    /// Takes a screenshot; only a cancel interrupts it (used right after a hand-back).
    pub(super) async fn observe_now(&self, st: &mut State) -> Result<(), Stop> {
        let request = self.observe_request();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let result = tokio::select! {
                result = self.computer.observe(&request) => result,
                _ = self.control.wait_cancel() => return Err(Stop::Canceled),
            };
            if self
                .accept_observation(st, result, started, attempt)
                .await?
                .is_some()
            {
                return Ok(());
            }
        }
    }

    /// Stores a new observation; `None` to try again after a transient failure.
    async fn accept_observation(
        &self,
        st: &mut State,
        result: Result<Observation, ComputerError>,
        started: Instant,
        attempt: u32,
    ) -> Result<Option<()>, Stop> {
        let observation = match result {
            Ok(observation) => observation,
            Err(error) if attempt < OBSERVE_ATTEMPTS && !error.is_refusal() => {
                tracing::warn!(%error, attempt, "screenshot failed; retrying");
                tokio::time::sleep(Duration::from_millis(300 * u64::from(attempt))).await;
                return Ok(None);
            }
            Err(error) => {
                return Err(Stop::Failed {
                    kind: ErrorKind::SandboxError,
                    reason: format!("cannot take a screenshot: {error}"),
                });
            }
        };
        let meta = observation.meta();
        self.sink.screenshot(&meta, &observation.image).await?;
        st.latest_hash = hash_bytes(&observation.image);
        st.images.insert(meta.id.clone(), observation.image);
        st.capture_ms = millis(started.elapsed());
        st.latest = Some(meta);
        Ok(Some(()))
    }

    /// Waits for the screen to settle; a takeover request meanwhile ends the wait.
    pub(super) async fn settle(&self) -> Result<Waited<()>, Stop> {
        let policy = self.config.settle;
        tokio::select! {
            result = self.computer.wait_settled(policy.quiet, policy.timeout) => {
                match result {
                    Ok(report) => tracing::debug!(
                        settled = report.settled,
                        waited_ms = report.waited_ms,
                        frames = report.frames,
                        last_change_ms = report.last_change_ms,
                        quiet_ms = report.quiet_ms,
                        "waited for the screen to settle"
                    ),
                    Err(error) => tracing::warn!(%error, "waiting for the screen to settle failed"),
                }
                Ok(Waited::Done(()))
            }
            signal = self.control.wait_signal() => match signal {
                Signal::Cancel => Err(Stop::Canceled),
                Signal::TakeOver => Ok(Waited::TakeOver),
            },
        }
    }
}
