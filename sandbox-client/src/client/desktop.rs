//! The desktop: `GET /v1/browser/screenshot` (the image and how it maps to the screen) and
//! `POST /v1/browser/actions` (one mouse or keyboard action, or `WAIT_SETTLED`).

use std::time::Duration;

use reqwest::Method;
use reqwest::header::CONTENT_TYPE;

use super::SandboxClient;
use crate::error::ClientError;
use crate::types::{
    ActionData, ActionResponse, DesktopAction, DesktopScreenshotQuery, ScreenshotInfo, SettleInfo,
};

/// Time allowed on top of an action's own duration (a `WAIT`, a settle timeout, a paced drag)
/// for the call around it.
const ACTION_MARGIN: Duration = Duration::from_secs(10);

/// A desktop screenshot: the encoded image and what its headers say.
#[derive(Debug, Clone)]
pub struct Screenshot {
    /// PNG or JPEG bytes, as `content_type` says.
    pub bytes: Vec<u8>,
    /// `image/png` or `image/jpeg`.
    pub content_type: String,
    /// Its id (for `screenshot_id` in actions), sizes and scale.
    pub info: ScreenshotInfo,
}

impl SandboxClient {
    /// `GET /v1/browser/screenshot`: the whole screen, downscaled to fit `max_width` and
    /// `max_height` when given. Actions that name `info.id` as their `screenshot_id` are aimed
    /// in this image's pixels.
    pub async fn screenshot(
        &self,
        query: &DesktopScreenshotQuery,
    ) -> Result<Screenshot, ClientError> {
        const OPERATION: &str = "screenshot";
        let request = self
            .request(Method::GET, "/v1/browser/screenshot")
            .query(query);
        let response = self.send(OPERATION, request).await?;
        let headers = response.headers();
        let info = ScreenshotInfo::from_headers(|name| {
            headers.get(name).and_then(|value| value.to_str().ok())
        })
        .map_err(|error| ClientError::Decode {
            operation: OPERATION,
            reason: error.to_string(),
        })?;
        let content_type = headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_string();
        let bytes = self.bytes(OPERATION, response).await?;
        Ok(Screenshot {
            bytes,
            content_type,
            info,
        })
    }

    /// `POST /v1/browser/actions`: performs one action and reports where the pointer is.
    /// Actions that take time of their own (`WAIT`, `WAIT_SETTLED`, a paced `DRAG_PATH`) get
    /// that time on top of the request timeout.
    pub async fn action(&self, action: &DesktopAction) -> Result<ActionData, ClientError> {
        const OPERATION: &str = "desktop action";
        let mut request = self
            .request(Method::POST, "/v1/browser/actions")
            .json(action);
        if let Some(own) = action_duration(action) {
            request = request.timeout(self.request_timeout.max(own + ACTION_MARGIN));
        }
        let response = self.send(OPERATION, request).await?;
        let answer: ActionResponse = self.json(OPERATION, response).await?;
        if !answer.success {
            return Err(ClientError::Failed {
                operation: OPERATION,
                message: answer.message,
                hint: None,
            });
        }
        Ok(answer.data)
    }

    /// `WAIT_SETTLED`: returns once the screen has not changed for `quiet` (sandboxd's default
    /// 300 ms when `None`), or after `timeout` (default 5 s) with `settled: false`.
    pub async fn wait_settled(
        &self,
        quiet: Option<Duration>,
        timeout: Option<Duration>,
    ) -> Result<SettleInfo, ClientError> {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let data = self
            .action(&DesktopAction::WaitSettled {
                quiet_ms: quiet.map(millis),
                timeout_ms: timeout.map(millis),
            })
            .await?;
        data.settle.ok_or_else(|| ClientError::Decode {
            operation: "desktop action",
            reason: "WAIT_SETTLED answered without `settle`".into(),
        })
    }
}

/// How long an action takes by itself, at most, when that is more than an instant.
fn action_duration(action: &DesktopAction) -> Option<Duration> {
    match action {
        DesktopAction::Wait { duration } if duration.is_finite() && *duration > 0.0 => {
            Some(Duration::from_secs_f64(duration.min(3600.0)))
        }
        DesktopAction::WaitSettled { timeout_ms, .. } => Some(Duration::from_millis(
            timeout_ms.unwrap_or(5000).min(3_600_000),
        )),
        DesktopAction::DragPath { path, step_ms, .. } => {
            let step = step_ms.unwrap_or(10).min(1000);
            Some(Duration::from_millis(
                step.saturating_mul(path.len() as u64).min(3_600_000),
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_actions_get_their_own_time() {
        assert_eq!(
            action_duration(&DesktopAction::Wait { duration: 2.5 }),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(
            action_duration(&DesktopAction::WaitSettled {
                quiet_ms: None,
                timeout_ms: None
            }),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            action_duration(&DesktopAction::DragPath {
                path: vec![[0.0, 0.0]; 100],
                button: None,
                step_ms: Some(20),
                screenshot_id: None,
            }),
            Some(Duration::from_secs(2))
        );
        assert_eq!(action_duration(&DesktopAction::CursorPosition {}), None);
        assert_eq!(
            action_duration(&DesktopAction::Wait { duration: f64::NAN }),
            None
        );
    }
}
