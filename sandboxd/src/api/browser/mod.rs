//! The browser API (`/v1/browser/...`) over [`crate::browser`], one file per part of it, and
//! what several of them share: the time limit every call takes, the short "done" answer, the
//! text fields' check, and where a saved file goes.
//!
//! `/v1/browser/screenshot` and `/v1/browser/actions` (the desktop) live in [`super::desktop`].
//! Every call acts on the active tab and is bounded in time; see [`crate::browser`].

pub mod captcha;
pub mod cdp;
pub mod console;
pub mod dialog;
pub mod forms;
pub mod input;
pub mod network;
pub mod page;
pub mod recording;
pub mod settings;
pub mod storage;
pub mod tabs;

use std::ffi::OsStr;
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;

use crate::api::error::ApiError;
use crate::api::types::{Envelope, PageStateResult};
use crate::api::validate::SecondsRange;
use crate::api::{AppState, files, types, validate};
use crate::browser;
use crate::browser::{BrowserError, Button, ElementState, ImageFormat, PageState, WaitUntil};
use crate::files::content::{WriteEncoding, WriteRequest};

/// Every route of the browser API, in the order the OpenAPI document lists them.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(page::routes())
        .merge(input::routes())
        .merge(tabs::routes())
        .merge(dialog::routes())
        .merge(forms::routes())
        .merge(console::routes())
        .merge(storage::routes())
        .merge(captcha::routes())
        .merge(recording::routes())
        .merge(network::routes())
        .merge(settings::routes())
}

/// Shortest `timeout` any call accepts, in seconds.
const MIN_TIMEOUT_SECS: f64 = 0.001;
/// Longest `timeout` any call accepts, in seconds.
const MAX_TIMEOUT_SECS: f64 = 300.0;
/// `timeout` when none is given, in seconds.
const DEFAULT_TIMEOUT_SECS: f64 = 30.0;
/// What a `timeout` accepts: at least a millisecond (a smaller one could not be met), at most
/// [`MAX_TIMEOUT_SECS`].
const TIMEOUT_RANGE: SecondsRange = SecondsRange::from_to(MIN_TIMEOUT_SECS, MAX_TIMEOUT_SECS);
/// The highest index of a selector's matches a call may name.
pub(super) const MAX_MATCH_INDEX: i64 = 10_000;

impl From<BrowserError> for ApiError {
    fn from(error: BrowserError) -> Self {
        let message = error.to_string();
        match error {
            BrowserError::Invalid { field, .. } => ApiError::invalid(field, message),
            BrowserError::Refused(_) => ApiError::forbidden(message),
            BrowserError::NoElement { .. }
            | BrowserError::NoIndexedElement { .. }
            | BrowserError::NoTab { .. } => ApiError::not_found(message),
            BrowserError::NotActionable(_)
            | BrowserError::Dialog(_)
            | BrowserError::NoDialog
            | BrowserError::TabGone(_)
            | BrowserError::PageChanged(_) => ApiError::conflict(message),
            BrowserError::NotRunning(_) | BrowserError::Disconnected(_) => {
                ApiError::unavailable(message)
            }
            BrowserError::Navigation { .. } | BrowserError::Protocol(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, message)
            }
            BrowserError::Timeout { .. } => ApiError::new(StatusCode::GATEWAY_TIMEOUT, message),
            BrowserError::Script(_) => ApiError::internal(message),
        }
    }
}

impl From<types::WaitUntil> for WaitUntil {
    fn from(wire: types::WaitUntil) -> Self {
        match wire {
            types::WaitUntil::Load => WaitUntil::Load,
            types::WaitUntil::DomContentLoaded => WaitUntil::DomContentLoaded,
            types::WaitUntil::NetworkIdle => WaitUntil::NetworkIdle,
            types::WaitUntil::Commit => WaitUntil::Commit,
        }
    }
}

impl From<types::ImageFormat> for ImageFormat {
    fn from(wire: types::ImageFormat) -> Self {
        match wire {
            types::ImageFormat::Png => ImageFormat::Png,
            types::ImageFormat::Jpeg => ImageFormat::Jpeg,
        }
    }
}

impl From<types::MouseButton> for Button {
    fn from(wire: types::MouseButton) -> Self {
        match wire {
            types::MouseButton::Left => Button::Left,
            types::MouseButton::Right => Button::Right,
            types::MouseButton::Middle => Button::Middle,
        }
    }
}

impl From<types::ElementState> for ElementState {
    fn from(wire: types::ElementState) -> Self {
        match wire {
            types::ElementState::Attached => ElementState::Attached,
            types::ElementState::Detached => ElementState::Detached,
            types::ElementState::Visible => ElementState::Visible,
            types::ElementState::Hidden => ElementState::Hidden,
        }
    }
}

/// A call's `timeout` field (seconds; [`DEFAULT_TIMEOUT_SECS`] when absent).
fn call_timeout(value: Option<f64>) -> Result<Duration, ApiError> {
    validate::seconds(
        "timeout",
        value.unwrap_or(DEFAULT_TIMEOUT_SECS),
        TIMEOUT_RANGE,
    )
}

fn state_result(state: PageState) -> PageStateResult {
    PageStateResult {
        url: state.url,
        title: state.title,
        status: state.status,
    }
}

/// A success with no data.
pub(super) fn done(message: impl Into<String>) -> Json<Envelope<()>> {
    Json(Envelope {
        success: true,
        message: message.into(),
        data: None,
        hint: None,
    })
}

/// Text typed or filled in: at most [`browser::input::MAX_TYPED_CHARS`] characters.
pub(super) fn typed_text<'a>(field: &str, text: &'a str) -> Result<&'a str, ApiError> {
    validate::at_most_chars(field, text, browser::input::MAX_TYPED_CHARS)
}

/// A file error about a path field, naming the field.
pub(super) fn save_path_error(mut error: ApiError, field: &str) -> ApiError {
    error.message = format!("`{field}`: {}", error.message);
    if error.loc.is_some() {
        error.loc = Some(vec!["body".into(), field.into()]);
    }
    error
}

/// Writes `content` to a confined path (replacing the file); answers the path written.
pub(super) async fn write_file(
    state: &AppState,
    path: String,
    content: String,
) -> Result<String, ApiError> {
    files::run(state, move |files| {
        let outcome = files.write(&WriteRequest {
            path: OsStr::new(&path),
            content: &content,
            encoding: WriteEncoding::Raw,
            append: false,
            leading_newline: false,
            trailing_newline: false,
        })?;
        Ok(outcome.path.to_string_lossy().into_owned())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_validation_names_the_field() {
        assert!(
            call_timeout(Some(30000.0))
                .unwrap_err()
                .message
                .contains("timeout")
        );
        assert!(call_timeout(Some(0.0)).is_err());
        // Positive but too small to be met: refused, not a certain 504.
        assert!(call_timeout(Some(3.9e-140)).is_err());
        assert_eq!(call_timeout(None).unwrap(), Duration::from_secs(30));
    }
}
