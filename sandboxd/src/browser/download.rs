//! Waiting for the browser's next download (`POST /v1/browser/page/wait` with `type: download`).
//!
//! While waiting, downloads go to a private directory under their download id
//! (`Browser.setDownloadBehavior`, `allowAndName`, with events), and the wait ends when the
//! first download that began after it completes (`Browser.downloadProgress`). The browser's own
//! download behaviour is put back afterwards, also when the wait fails or times out. The caller
//! moves the file where it belongs.

use std::path::PathBuf;
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::browser::{
    DownloadProgressState, EventDownloadProgress, EventDownloadWillBegin,
    SetDownloadBehaviorBehavior, SetDownloadBehaviorParams,
};
use futures::StreamExt;

use super::BrowserService;
use super::error::BrowserError;

/// A completed download.
#[derive(Debug, Clone)]
pub struct Downloaded {
    pub url: String,
    /// The name the site suggested.
    pub suggested_filename: String,
    /// Where the browser wrote it (in the private directory).
    pub path: PathBuf,
    pub bytes: u64,
}

/// The directory downloads go to while a wait runs.
fn spool() -> PathBuf {
    std::env::temp_dir().join(format!("agentbox-downloads-{}", std::process::id()))
}

fn behavior(
    behavior: SetDownloadBehaviorBehavior,
    path: Option<String>,
) -> SetDownloadBehaviorParams {
    SetDownloadBehaviorParams {
        behavior,
        browser_context_id: None,
        download_path: path,
        events_enabled: Some(true),
    }
}

impl BrowserService {
    /// Waits for the next download to complete, at most `limit`.
    pub async fn wait_download(&self, limit: Duration) -> Result<Downloaded, BrowserError> {
        let dir = spool();
        std::fs::create_dir_all(&dir).map_err(|e| {
            BrowserError::Protocol(format!(
                "cannot make the download directory {}: {e}",
                dir.display()
            ))
        })?;
        let dir_text = dir.to_string_lossy().into_owned();
        let dir_text = dir_text.as_str();
        let dir = &dir;
        let outcome = tokio::time::timeout(
            limit,
            self.connection.run(|session| async move {
                let mut began = session
                    .browser
                    .event_listener::<EventDownloadWillBegin>()
                    .await?;
                let mut progress = session
                    .browser
                    .event_listener::<EventDownloadProgress>()
                    .await?;
                session
                    .browser
                    .execute(behavior(
                        SetDownloadBehaviorBehavior::AllowAndName,
                        Some(dir_text.to_string()),
                    ))
                    .await?;
                let gone = || BrowserError::Disconnected("the browser's events ended".into());
                let start = began.next().await.ok_or_else(gone)?;
                loop {
                    let event = progress.next().await.ok_or_else(gone)?;
                    if event.guid != start.guid {
                        continue;
                    }
                    match event.state {
                        DownloadProgressState::Completed => {
                            let path = event
                                .file_path
                                .clone()
                                .map(PathBuf::from)
                                .unwrap_or_else(|| dir.join(&start.guid));
                            return Ok(Downloaded {
                                url: start.url.clone(),
                                suggested_filename: start.suggested_filename.clone(),
                                path,
                                bytes: event.received_bytes.max(0.0) as u64,
                            });
                        }
                        DownloadProgressState::Canceled => {
                            return Err(BrowserError::Navigation {
                                url: start.url.clone(),
                                reason: "the download was canceled".into(),
                            });
                        }
                        DownloadProgressState::InProgress => {}
                    }
                }
            }),
        )
        .await;
        // Put the browser's own behaviour back, whatever happened.
        let reset = tokio::time::timeout(
            Duration::from_secs(5),
            self.connection.run(|session| async move {
                session
                    .browser
                    .execute(behavior(SetDownloadBehaviorBehavior::Default, None))
                    .await?;
                Ok(())
            }),
        )
        .await;
        if !matches!(reset, Ok(Ok(()))) {
            tracing::warn!("cannot put the browser's download behaviour back");
        }
        outcome.map_err(|_| BrowserError::timeout("waiting for a download", limit))?
    }
}
