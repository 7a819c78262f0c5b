//! Whether the database server answers: a ping every [`REACH_EVERY`] over a connection of the
//! check's own, and the store marked unreachable while none comes within [`REACH_TIMEOUT`], so
//! the API answers 503 at once instead of every request waiting out the pool's acquire timeout;
//! and which query errors mean the server went away ([`StoreError::is_unavailable`]).

use std::sync::atomic::Ordering;

use super::{Store, StoreError};

/// How often a database server is asked whether it answers ([`Store::watch_reachability`]) ...
const REACH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
/// ... and how long its answer may take.
const REACH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// One reachability ping over `connection`, made first when there is none.
async fn ping(url: &str, connection: &mut Option<sqlx::AnyConnection>) -> sqlx::Result<()> {
    use sqlx::Connection;
    let connection = match connection {
        Some(connection) => connection,
        None => connection.insert(sqlx::AnyConnection::connect(url).await?),
    };
    connection.ping().await
}

impl Store {
    /// Pings the database server every [`REACH_EVERY`] until the process ends, and marks the
    /// store unreachable while no answer comes within [`REACH_TIMEOUT`] (a server stopped,
    /// restarting or cut off), reachable again at the first answer. The ping goes over a
    /// connection of its own, so a pool whose connections are all in use does not count as a
    /// server away. A local SQLite file does not go away: only a server is watched.
    pub async fn watch_reachability(self) {
        let Some(url) = self.server_url.clone() else {
            return;
        };
        let mut connection = None;
        loop {
            let answered = tokio::time::timeout(REACH_TIMEOUT, ping(&url, &mut connection)).await;
            let error = match answered {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some(format!("no answer within {REACH_TIMEOUT:?}")),
            };
            if error.is_some() {
                // A connection cut or left mid-ping is not used again.
                connection = None;
            }
            let was = self.unreachable.swap(error.is_some(), Ordering::AcqRel);
            match (was, error) {
                (false, Some(error)) => {
                    tracing::error!(%error, "the database does not answer: requests get 503 until it does");
                }
                (true, None) => tracing::info!("the database answers again"),
                _ => {}
            }
            tokio::time::sleep(REACH_EVERY).await;
        }
    }
}

impl StoreError {
    /// The database server could not be reached or went away during the call (a refused or
    /// broken connection; Postgres' connection exceptions, class 08, and its shutdown codes
    /// 57P01-57P03). Whether anything was written is the database's to say, not the caller's:
    /// a write is either committed whole or not at all.
    pub fn is_unavailable(&self) -> bool {
        let (Self::Query { source, .. } | Self::Connect { source, .. }) = self else {
            return false;
        };
        match source {
            sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolClosed => true,
            sqlx::Error::Database(error) => error
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some_and(|postgres| {
                    let code = postgres.code();
                    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
                }),
            _ => false,
        }
    }
}
