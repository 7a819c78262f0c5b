//! Desktop (computer use) routes: `GET /v1/browser/screenshot` and `POST /v1/browser/actions`
//! (AIO's paths), served in-process by [`crate::desktop_session`] (XTest input, MIT-SHM
//! capture). This module maps the wire types to the session's calls and their results and
//! errors back; [`take_screenshot`] and [`perform`] are shared with the MCP tools.

pub mod recording;
pub mod vnc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use desktop::{Button, DesktopError, ImageFormat};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::{AioJson, AioQuery};
use super::types::{
    self, ActionData, ActionResponse, CursorPosition, DesktopAction, DesktopScreenshotQuery,
    ErrorBody, ScreenshotInfo, SettleInfo,
};
use super::validate;
use crate::desktop_session::{Action, Point, Screenshot, SessionError};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(screenshot))
        .routes(routes!(actions))
        .merge(recording::routes())
}

/// A screenshot of the whole screen. Headers give the screen size, the image size, the
/// screenshot's id (for `screenshot_id` in actions) and its scale (screen pixels per image pixel).
#[utoipa::path(get, path = "/v1/browser/screenshot", tag = "desktop",
    params(DesktopScreenshotQuery),
    responses(
        (status = 200, description = "the image (PNG unless `format=jpeg`), with headers x-screen-width, x-screen-height, x-image-width, x-image-height, x-screenshot-id, x-scale-x, x-scale-y",
            content(("image/png"), ("image/jpeg"))),
        (status = 422, description = "bad query parameter", body = ErrorBody),
        (status = 503, description = "the X display is not available", body = ErrorBody),
    ))]
pub async fn screenshot(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<DesktopScreenshotQuery>,
) -> Result<Response, ApiError> {
    let shot = take_screenshot(&state, &query).await?;
    let image = shot.image;
    let mut response = image.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(image.mime));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let info = ScreenshotInfo {
        id: shot.id,
        screen_width: image.screen_width,
        screen_height: image.screen_height,
        image_width: image.width,
        image_height: image.height,
        scale_x: image.scale_x,
        scale_y: image.scale_y,
    };
    for (name, value) in info.headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}

/// Captures and encodes the screen as `query` asks.
pub async fn take_screenshot(
    state: &AppState,
    query: &DesktopScreenshotQuery,
) -> Result<Screenshot, ApiError> {
    let quality = validate::jpeg_quality(query.quality)?;
    let format = match query.format {
        None | Some(types::ImageFormat::Png) => ImageFormat::Png,
        Some(types::ImageFormat::Jpeg) => ImageFormat::Jpeg { quality },
    };
    let max_width = validate::image_side("max_width", query.max_width)?;
    let max_height = validate::image_side("max_height", query.max_height)?;
    let bounds = (max_width.is_some() || max_height.is_some()).then(|| {
        (
            max_width.unwrap_or(u32::MAX),
            max_height.unwrap_or(u32::MAX),
        )
    });
    Ok(state.desktop.screenshot(format, bounds).await?)
}

/// Performs one desktop action: AIO's 16 action types plus TRIPLE_CLICK, DRAG_PATH,
/// CURSOR_POSITION and WAIT_SETTLED, and modifiers on CLICK.
#[utoipa::path(post, path = "/v1/browser/actions", tag = "desktop",
    request_body = DesktopAction,
    responses(
        (status = 200, description = "the action was performed", body = ActionResponse),
        (status = 400, description = "malformed JSON", body = ErrorBody),
        (status = 422, description = "unknown action type or a bad field (named in the message)", body = ErrorBody),
        (status = 503, description = "the X display is not available", body = ErrorBody),
    ))]
pub async fn actions(
    State(state): State<AppState>,
    AioJson(action): AioJson<DesktopAction>,
) -> Result<Json<ActionResponse>, ApiError> {
    let data = perform(&state, action).await?;
    Ok(Json(ActionResponse {
        success: true,
        message: format!("{} performed", data.action_performed),
        status: "success".into(),
        action_performed: data.action_performed.clone(),
        data,
    }))
}

/// Performs `action` and reports where the pointer ended up.
pub async fn perform(state: &AppState, action: DesktopAction) -> Result<ActionData, ApiError> {
    let name = action.name();
    let (action, screenshot_id) = domain_action(action)?;
    let performed = state.desktop.perform(action, screenshot_id).await?;
    let (x, y) = performed.cursor;
    Ok(ActionData {
        status: "success".into(),
        action_performed: name.to_string(),
        cursor: Some(CursorPosition { x, y }),
        settle: performed.settle.map(|report| SettleInfo {
            settled: report.settled,
            waited_ms: u64::try_from(report.waited.as_millis()).unwrap_or(u64::MAX),
            frames: report.frames,
            last_change_ms: report
                .last_change
                .map(|at| u64::try_from(at.as_millis()).unwrap_or(u64::MAX)),
            quiet_ms: u64::try_from(report.quiet.as_millis()).unwrap_or(u64::MAX),
        }),
    })
}

/// The session's action for a wire action, and the screenshot its points were aimed on.
fn domain_action(action: DesktopAction) -> Result<(Action, Option<u64>), ApiError> {
    let point = |x, y| Point { x, y };
    Ok(match action {
        DesktopAction::MoveTo {
            x,
            y,
            screenshot_id,
        } => (Action::MoveTo(point(x, y)), screenshot_id),
        DesktopAction::MoveRel { x_offset, y_offset } => {
            (Action::MoveBy { x_offset, y_offset }, None)
        }
        DesktopAction::Click {
            x,
            y,
            button,
            num_clicks,
            modifiers,
            screenshot_id,
        } => (
            Action::Click {
                at: optional_point(x, y)?,
                button: button_named(button),
                num_clicks: num_clicks.unwrap_or(1),
                modifiers: modifiers.unwrap_or_default(),
            },
            screenshot_id,
        ),
        DesktopAction::MouseDown { button } => (Action::ButtonDown(button_named(button)), None),
        DesktopAction::MouseUp { button } => (Action::ButtonUp(button_named(button)), None),
        DesktopAction::RightClick {
            x,
            y,
            screenshot_id,
        } => (
            click(optional_point(x, y)?, Button::Right, 1),
            screenshot_id,
        ),
        DesktopAction::DoubleClick {
            x,
            y,
            screenshot_id,
        } => (click(optional_point(x, y)?, Button::Left, 2), screenshot_id),
        DesktopAction::TripleClick {
            x,
            y,
            screenshot_id,
        } => (click(optional_point(x, y)?, Button::Left, 3), screenshot_id),
        DesktopAction::DragTo {
            x,
            y,
            button,
            screenshot_id,
        } => (
            Action::DragTo {
                to: point(x, y),
                button: button_named(button),
            },
            screenshot_id,
        ),
        DesktopAction::DragRel { x_offset, y_offset } => {
            (Action::DragBy { x_offset, y_offset }, None)
        }
        DesktopAction::DragPath {
            path,
            button,
            step_ms,
            screenshot_id,
        } => (
            Action::DragPath {
                path: path.into_iter().map(|[x, y]| point(x, y)).collect(),
                button: button_named(button),
                step_ms,
            },
            screenshot_id,
        ),
        DesktopAction::Scroll {
            dx,
            dy,
            x,
            y,
            // The only unit is `notches`; the wire type refuses any other.
            unit: _,
            screenshot_id,
        } => (
            Action::Scroll {
                at: optional_point(x, y)?,
                dx: dx.unwrap_or(0),
                dy: dy.unwrap_or(0),
            },
            screenshot_id,
        ),
        DesktopAction::Typing {
            text,
            use_clipboard,
        } => (
            Action::Type {
                text,
                paste: use_clipboard == Some(true),
            },
            None,
        ),
        DesktopAction::Press { key } => (Action::Press(key), None),
        DesktopAction::KeyDown { key } => (Action::KeyDown(key), None),
        DesktopAction::KeyUp { key } => (Action::KeyUp(key), None),
        DesktopAction::Hotkey { keys } => (Action::Hotkey(keys), None),
        DesktopAction::Wait { duration } => (Action::Wait { duration }, None),
        DesktopAction::WaitSettled {
            quiet_ms,
            timeout_ms,
        } => (
            Action::WaitSettled {
                quiet_ms,
                timeout_ms,
            },
            None,
        ),
        DesktopAction::CursorPosition {} => (Action::CursorPosition, None),
    })
}

/// A click of `count` with no modifiers.
fn click(at: Option<Point>, button: Button, count: u32) -> Action {
    Action::Click {
        at,
        button,
        num_clicks: count,
        modifiers: Vec::new(),
    }
}

/// A point given as optional `x` and `y`: both or neither.
fn optional_point(x: Option<f64>, y: Option<f64>) -> Result<Option<Point>, ApiError> {
    match (x, y) {
        (Some(x), Some(y)) => Ok(Some(Point { x, y })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(ApiError::invalid("y", "x is given but y is missing")),
        (None, Some(_)) => Err(ApiError::invalid("x", "y is given but x is missing")),
    }
}

/// The desktop button of a wire name (left when absent).
fn button_named(name: Option<types::DesktopButton>) -> Button {
    match name {
        None | Some(types::DesktopButton::Left) => Button::Left,
        Some(types::DesktopButton::Middle) => Button::Middle,
        Some(types::DesktopButton::Right) => Button::Right,
        Some(types::DesktopButton::Back) => Button::Back,
        Some(types::DesktopButton::Forward) => Button::Forward,
    }
}

impl From<SessionError> for ApiError {
    fn from(error: SessionError) -> Self {
        match error {
            SessionError::Invalid { field, message } => ApiError::invalid(field, message),
            SessionError::Desktop(error) => desktop_error(error),
            error @ SessionError::Interrupted(_) => ApiError::internal(error.to_string()),
        }
    }
}

/// Maps a desktop error to an answer: bad input is a 422 naming the field, an unreachable
/// display a 503. Key names, click counts and scroll lengths are checked by the session, which
/// knows the field; should the desktop still refuse one, the answer names the body.
pub fn desktop_error(error: DesktopError) -> ApiError {
    let message = error.to_string();
    match error {
        DesktopError::OutOfRange { axis, .. } => ApiError::invalid(axis, message),
        DesktopError::KeyName(_) | DesktopError::ClickCount(_) | DesktopError::ScrollTooLong(_) => {
            ApiError::invalid_at(vec!["body".into()], message)
        }
        DesktopError::DragPathTooShort(_) => ApiError::invalid("path", message),
        DesktopError::Untypable(_)
        | DesktopError::NoSpareKeycode { .. }
        | DesktopError::ClipboardTooLarge { .. } => ApiError::invalid("text", message),
        DesktopError::Connect { .. }
        | DesktopError::NoScreen { .. }
        | DesktopError::MissingExtension(_)
        | DesktopError::X11 { .. } => {
            ApiError::unavailable(format!("the X display is not available: {message}"))
        }
        _ => ApiError::internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::desktop_session::DesktopSession;

    /// A wire action mapped and checked as [`perform`] does, without a display.
    fn check(action: serde_json::Value) -> Result<(), ApiError> {
        let action: DesktopAction = serde_json::from_value(action).expect("a well-formed action");
        let (action, screenshot_id) = domain_action(action)?;
        DesktopSession::new(":none").check(action, screenshot_id)?;
        Ok(())
    }

    /// Where a refused action's error points: (`loc`, message).
    fn refusal(action: serde_json::Value) -> (Vec<String>, String) {
        match check(action) {
            Ok(()) => panic!("the action was accepted"),
            Err(error) => {
                assert_eq!(error.status, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
                (error.loc.unwrap_or_default(), error.message)
            }
        }
    }

    fn at(field: &str) -> Vec<String> {
        vec!["body".to_string(), field.to_string()]
    }

    #[test]
    fn refusals_name_the_field_that_was_wrong() {
        use serde_json::json;
        for (action, field, mention) in [
            (
                json!({"action_type": "HOTKEY", "keys": ["ctrl", "nosuchkey"]}),
                "keys",
                "nosuchkey",
            ),
            (json!({"action_type": "HOTKEY", "keys": []}), "keys", "keys"),
            (
                json!({"action_type": "PRESS", "key": "ctrl+nosuchkey"}),
                "key",
                "nosuchkey",
            ),
            (
                json!({"action_type": "KEY_DOWN", "key": "ctrl++c"}),
                "key",
                "ctrl++c",
            ),
            (
                json!({"action_type": "KEY_UP", "key": "nosuchkey"}),
                "key",
                "nosuchkey",
            ),
            (
                json!({"action_type": "CLICK", "modifiers": ["shift", "nosuchkey"]}),
                "modifiers",
                "nosuchkey",
            ),
            (
                json!({"action_type": "CLICK", "num_clicks": 4}),
                "num_clicks",
                "4",
            ),
            (
                json!({"action_type": "SCROLL", "dx": 5000, "dy": 1}),
                "dx",
                "5000",
            ),
            (
                json!({"action_type": "SCROLL", "dx": 1, "dy": -5000}),
                "dy",
                "-5000",
            ),
            (
                json!({"action_type": "SCROLL", "dx": 5000, "dy": 5000}),
                "dx",
                "dx",
            ),
            (json!({"action_type": "CLICK", "x": 5}), "y", "y is missing"),
            (
                json!({"action_type": "SCROLL", "dy": 1, "y": 5}),
                "x",
                "x is missing",
            ),
            (
                json!({"action_type": "MOVE_TO", "x": 1, "y": 2, "screenshot_id": 99}),
                "screenshot_id",
                "99",
            ),
            (
                json!({"action_type": "DRAG_REL", "x_offset": 1, "y_offset": 1e9}),
                "y_offset",
                "y_offset",
            ),
            (
                json!({"action_type": "DRAG_PATH", "path": [[1, 2]]}),
                "path",
                "got 1",
            ),
            (
                json!({"action_type": "WAIT", "duration": 0}),
                "duration",
                "duration",
            ),
            (
                json!({"action_type": "WAIT_SETTLED", "quiet_ms": 0}),
                "quiet_ms",
                "quiet_ms",
            ),
        ] {
            let (loc, message) = refusal(action.clone());
            assert_eq!(loc, at(field), "{action}: {message}");
            assert!(message.contains(mention), "{action}: {message}");
        }
    }

    #[test]
    fn good_names_and_lengths_pass() {
        use serde_json::json;
        for action in [
            json!({"action_type": "HOTKEY", "keys": ["ctrl", "shift", "t"]}),
            json!({"action_type": "PRESS", "key": "ctrl+a BackSpace"}),
            json!({"action_type": "KEY_DOWN", "key": "shift"}),
            json!({"action_type": "CLICK", "modifiers": ["ctrl"], "num_clicks": 3}),
            json!({"action_type": "SCROLL", "dx": -1000, "dy": 1000}),
        ] {
            assert!(check(action.clone()).is_ok(), "{action}");
        }
    }
}
