//! Termination signals (SIGTERM, SIGINT), listened for from a server's first moment.
//!
//! A process that is PID 1 in a container has no default action for a signal it does not
//! handle: the kernel drops it, and it is not delivered later. A server that starts listening
//! only once its start-up is done loses a `docker stop` sent before that, and Docker kills it
//! when the stop-wait ends (exit 137). So both servers install [`TerminationSignals`] before
//! anything else, and start-up steps that wait run through [`TerminationSignals::unless_stopped`],
//! so a stop during start-up ends the process as quickly as one after it.
//!
//! A signal that arrives while nobody waits is kept (repeats of the same signal fold into one),
//! and is what the next wait returns.

use std::future::Future;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGTERM and SIGINT, listened for since [`TerminationSignals::install`].
#[derive(Debug)]
pub struct TerminationSignals {
    term: Signal,
    int: Signal,
}

/// A termination signal arrived before a start-up step finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{signal} received during start-up")]
pub struct Stopped {
    /// `SIGTERM` or `SIGINT`.
    pub signal: &'static str,
}

impl TerminationSignals {
    /// Installs the handlers. Must be called inside a Tokio runtime (with its I/O driver).
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves with the name of the next termination signal, or at once with one that arrived
    /// since the last call.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            // Both streams end only when the runtime shuts down; then nothing waits any more.
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    /// Runs `step` to its end unless a termination signal comes first; then `step` is dropped
    /// (cancelled at its next wait) and [`Stopped`] names the signal.
    pub async fn unless_stopped<F: Future>(&mut self, step: F) -> Result<F::Output, Stopped> {
        tokio::select! {
            // A signal already waiting wins over a step that could finish at once.
            biased;
            signal = self.recv() => Err(Stopped { signal }),
            output = step => Ok(output),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn raise(signal: nix::sys::signal::Signal) {
        // A real signal to this very process: the handler installed above is what receives it.
        nix::sys::signal::raise(signal).expect("raise");
    }

    // One test for every case: the handlers are process-wide, and a SIGINT raised by one test
    // would reach another's listener if they ran side by side in this binary.
    #[tokio::test]
    async fn a_signal_is_kept_until_asked_for_and_cancels_a_step_that_is_still_waiting() {
        let mut signals = TerminationSignals::install().unwrap();

        // Before anybody waits: kept, and twice the same signal is one.
        raise(nix::sys::signal::Signal::SIGTERM);
        raise(nix::sys::signal::Signal::SIGTERM);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(signals.recv().await, "SIGTERM");
        let nothing_left = tokio::time::timeout(Duration::from_millis(200), signals.recv()).await;
        assert!(
            nothing_left.is_err(),
            "a second, folded SIGTERM was delivered"
        );

        // A step that finishes with no signal waiting gives its output.
        assert_eq!(signals.unless_stopped(async { 7 }).await, Ok(7));

        // A step still waiting when SIGINT comes is dropped.
        let step = async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "finished"
        };
        let raiser = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            raise(nix::sys::signal::Signal::SIGINT);
        });
        let started = std::time::Instant::now();
        assert_eq!(
            signals.unless_stopped(step).await,
            Err(Stopped { signal: "SIGINT" })
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        raiser.await.unwrap();

        // A signal already waiting wins over a step that is ready at once.
        raise(nix::sys::signal::Signal::SIGTERM);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            signals.unless_stopped(async { 7 }).await,
            Err(Stopped { signal: "SIGTERM" })
        );
    }
}
