//! Postgres `LISTEN/NOTIFY` between replicas (issue 25): the transaction that appends a run's
//! event also notifies [`RUN_EVENTS`] with the run's id (Postgres delivers it at commit), and
//! every replica listening ([`Store::listen_forever`]) wakes the followers of that run at once
//! ([`Store::run_appends`]); they read the log. No other broker.
//!
//! SQLite serves one process, whose followers the in-process channel wakes: nothing is sent.

use std::time::Duration;

use tokio::sync::broadcast;

use super::Store;

/// The channel appended events are announced on (payload: the run's id).
pub(super) const RUN_EVENTS: &str = "agentbox_run_events";

/// Announcements kept for a follower that is slow to look (it then reads the log anyway).
pub(super) const APPENDS_BUFFER: usize = 1024;

impl Store {
    /// The ids of runs that another replica appended an event to, as they are announced.
    pub fn run_appends(&self) -> broadcast::Receiver<String> {
        self.appended.subscribe()
    }

    /// Listens for announcements until the process ends (Postgres only; a lost connection is
    /// made again, with a growing pause).
    pub async fn listen_forever(self) {
        let Some(url) = self.server_url.clone() else {
            return;
        };
        let mut pause = Duration::from_millis(250);
        loop {
            match sqlx::postgres::PgListener::connect(&url).await {
                Ok(mut listener) => match listener.listen(RUN_EVENTS).await {
                    Ok(()) => {
                        pause = Duration::from_millis(250);
                        loop {
                            match listener.recv().await {
                                Ok(notification) => {
                                    let _ = self.appended.send(notification.payload().to_string());
                                }
                                Err(error) => {
                                    tracing::warn!(%error, "listening for run events failed");
                                    break;
                                }
                            }
                        }
                    }
                    Err(error) => tracing::warn!(%error, "LISTEN for run events failed"),
                },
                Err(error) => tracing::warn!(%error, "connecting to listen for run events failed"),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }
}
