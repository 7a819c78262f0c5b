//! Desktop (computer use) routes: `GET /v1/browser/screenshot` and `POST /v1/browser/actions`
//! (AIO's paths), served in-process through the `desktop` crate: XTest input, MIT-SHM capture.
//! [`take_screenshot`] and [`perform`] are shared with the MCP tools.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use desktop::keys::{self as key_names, KeyNameError};
use desktop::{Button, DesktopError, EncodedImage, ImageFormat, fit_within};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::{AioJson, AioQuery};
use super::types::{
    self, ActionData, ActionResponse, CursorPosition, DesktopAction, DesktopScreenshotQuery,
    ErrorBody, ScreenshotInfo, SettleInfo,
};
use crate::desktop_session::DesktopSession;

/// Longest `WAIT`.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Longest `WAIT_SETTLED` timeout.
const MAX_SETTLE: Duration = Duration::from_secs(60);
/// Pause after each point of a drag (see `desktop::Desktop::drag`).
const DRAG_STEP: Duration = Duration::from_millis(10);
/// Longest drag.
const MAX_DRAG: Duration = Duration::from_secs(60);
/// Spacing of the points a straight drag is cut into.
const DRAG_SEGMENT: f64 = 20.0;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(screenshot))
        .routes(routes!(actions))
}

/// A screenshot of the whole screen. Headers give the screen size, the image size, the
/// screenshot's id (for `screenshot_id` in actions) and its scale (screen pixels per image pixel).
#[utoipa::path(get, path = "/v1/browser/screenshot", tag = "desktop",
    params(DesktopScreenshotQuery),
    responses(
        (status = 200, description = "the image (PNG unless `format=jpeg`), with headers x-screen-width, x-screen-height, x-image-width, x-image-height, x-screenshot-id, x-scale-x, x-scale-y", content_type = "image/png"),
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

/// JPEG quality when a screenshot asks for none.
pub const DEFAULT_JPEG_QUALITY: u8 = 80;

/// The one rule for the `quality` query parameter of both screenshot routes (the desktop's and
/// the browser page's): when given, whatever the format, from 1 to 100; absent, 80.
pub fn jpeg_quality(quality: Option<i64>) -> Result<u8, ApiError> {
    let Some(quality) = quality else {
        return Ok(DEFAULT_JPEG_QUALITY);
    };
    u8::try_from(quality)
        .ok()
        .filter(|q| (1..=100).contains(q))
        .ok_or_else(|| {
            ApiError::invalid_at(
                vec!["query".into(), "quality".into()],
                format!("quality must be from 1 to 100, got {quality}"),
            )
        })
}

/// A captured, encoded screenshot and the id its transform is remembered under.
pub struct Screenshot {
    pub image: EncodedImage,
    pub id: u64,
}

/// Captures and encodes the screen as `query` asks.
pub async fn take_screenshot(
    state: &AppState,
    query: &DesktopScreenshotQuery,
) -> Result<Screenshot, ApiError> {
    let quality = jpeg_quality(query.quality)?;
    let format = match query.format {
        None | Some(types::ImageFormat::Png) => ImageFormat::Png,
        Some(types::ImageFormat::Jpeg) => ImageFormat::Jpeg { quality },
    };
    for (name, value) in [
        ("max_width", query.max_width),
        ("max_height", query.max_height),
    ] {
        if let Some(value) = value
            && !(16..=desktop::MAX_IMAGE_SIDE).contains(&value)
        {
            return Err(ApiError::invalid_at(
                vec!["query".into(), name.into()],
                format!(
                    "{name} must be between 16 and {}, got {value}",
                    desktop::MAX_IMAGE_SIDE
                ),
            ));
        }
    }
    let bounds = (
        query.max_width.unwrap_or(u32::MAX),
        query.max_height.unwrap_or(u32::MAX),
    );
    let resize = query.max_width.is_some() || query.max_height.is_some();
    let session = state.desktop.clone();
    let image = blocking(move || {
        session.with(|desktop| {
            let target = if resize {
                Some(fit_within(desktop.screen_size()?, bounds))
            } else {
                None
            };
            desktop.screenshot(format, target)
        })
    })
    .await?;
    let id = state.desktop.record(&image);
    Ok(Screenshot { image, id })
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
    let session = state.desktop.clone();
    let mut settle = None;
    match action {
        DesktopAction::Wait { duration } => {
            if !duration.is_finite() || duration <= 0.0 || duration > MAX_WAIT.as_secs_f64() {
                return Err(ApiError::invalid(
                    "duration",
                    format!(
                        "duration must be more than 0 and at most {} seconds",
                        MAX_WAIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_secs_f64(duration)).await;
        }
        DesktopAction::WaitSettled {
            quiet_ms,
            timeout_ms,
        } => {
            let quiet = Duration::from_millis(quiet_ms.unwrap_or(300));
            let timeout = Duration::from_millis(timeout_ms.unwrap_or(5000));
            if quiet.is_zero() || quiet > MAX_SETTLE {
                return Err(ApiError::invalid(
                    "quiet_ms",
                    "quiet_ms must be between 1 and 60000",
                ));
            }
            if timeout > MAX_SETTLE {
                return Err(ApiError::invalid(
                    "timeout_ms",
                    "timeout_ms must be at most 60000",
                ));
            }
            let report =
                blocking(move || session.with(|d| d.wait_until_settled(quiet, timeout))).await?;
            settle = Some(SettleInfo {
                settled: report.settled,
                waited_ms: report.waited.as_millis() as u64,
                frames: report.frames,
            });
        }
        other => {
            let resolved = resolve(&state.desktop, other)?;
            blocking(move || session.with(|d| run(d, &resolved))).await?;
        }
    }
    let session = state.desktop.clone();
    let (x, y) = blocking(move || session.with(|d| d.cursor_position())).await?;
    Ok(ActionData {
        status: "success".into(),
        action_performed: name.to_string(),
        cursor: Some(CursorPosition { x, y }),
        settle,
    })
}

/// An action with its coordinates on the screen and its names checked.
enum Resolved {
    MoveTo(i32, i32),
    MoveRel(i32, i32),
    Click {
        at: Option<(i32, i32)>,
        button: Button,
        count: u32,
        modifiers: Vec<String>,
    },
    Down(Button),
    Up(Button),
    Drag(Vec<(i32, i32)>, Button, Duration),
    DragFromPointer((i32, i32), Button, bool),
    Scroll {
        at: Option<(i32, i32)>,
        dx: i32,
        dy: i32,
    },
    Type(String),
    Paste(String),
    Press(String),
    KeyDown(String),
    KeyUp(String),
    Hotkey(Vec<String>),
    Nothing,
}

fn resolve(session: &DesktopSession, action: DesktopAction) -> Result<Resolved, ApiError> {
    let at = |x: Option<f64>,
              y: Option<f64>,
              shot: Option<u64>|
     -> Result<Option<(i32, i32)>, ApiError> {
        match (x, y) {
            (Some(x), Some(y)) => point(session, x, y, shot).map(Some),
            (None, None) => Ok(None),
            (Some(_), None) => Err(ApiError::invalid("y", "x is given but y is missing")),
            (None, Some(_)) => Err(ApiError::invalid("x", "y is given but x is missing")),
        }
    };
    Ok(match action {
        DesktopAction::MoveTo {
            x,
            y,
            screenshot_id,
        } => {
            let (x, y) = point(session, x, y, screenshot_id)?;
            Resolved::MoveTo(x, y)
        }
        DesktopAction::MoveRel { x_offset, y_offset } => {
            Resolved::MoveRel(offset("x_offset", x_offset)?, offset("y_offset", y_offset)?)
        }
        DesktopAction::Click {
            x,
            y,
            button,
            num_clicks,
            modifiers,
            screenshot_id,
        } => {
            let count = num_clicks.unwrap_or(1);
            if !(1..=3).contains(&count) {
                return Err(ApiError::invalid(
                    "num_clicks",
                    DesktopError::ClickCount(count).to_string(),
                ));
            }
            let modifiers = modifiers.unwrap_or_default();
            if !modifiers.is_empty() {
                key_names::parse_hotkey(&modifiers).map_err(|e| key_error("modifiers", e))?;
            }
            Resolved::Click {
                at: at(x, y, screenshot_id)?,
                button: button_named(button),
                count,
                modifiers,
            }
        }
        DesktopAction::MouseDown { button } => Resolved::Down(button_named(button)),
        DesktopAction::MouseUp { button } => Resolved::Up(button_named(button)),
        DesktopAction::RightClick {
            x,
            y,
            screenshot_id,
        } => Resolved::Click {
            at: at(x, y, screenshot_id)?,
            button: Button::Right,
            count: 1,
            modifiers: Vec::new(),
        },
        DesktopAction::DoubleClick {
            x,
            y,
            screenshot_id,
        } => Resolved::Click {
            at: at(x, y, screenshot_id)?,
            button: Button::Left,
            count: 2,
            modifiers: Vec::new(),
        },
        DesktopAction::TripleClick {
            x,
            y,
            screenshot_id,
        } => Resolved::Click {
            at: at(x, y, screenshot_id)?,
            button: Button::Left,
            count: 3,
            modifiers: Vec::new(),
        },
        DesktopAction::DragTo {
            x,
            y,
            button,
            screenshot_id,
        } => Resolved::DragFromPointer(
            point(session, x, y, screenshot_id)?,
            button_named(button),
            false,
        ),
        DesktopAction::DragRel { x_offset, y_offset } => Resolved::DragFromPointer(
            (offset("x_offset", x_offset)?, offset("y_offset", y_offset)?),
            Button::Left,
            true,
        ),
        DesktopAction::DragPath {
            path,
            button,
            step_ms,
            screenshot_id,
        } => {
            let step = Duration::from_millis(step_ms.unwrap_or(DRAG_STEP.as_millis() as u64));
            if step > Duration::from_secs(1) || step.saturating_mul(path.len() as u32) > MAX_DRAG {
                return Err(ApiError::invalid(
                    "step_ms",
                    format!(
                        "step_ms must be at most 1000 and the whole drag at most {} s",
                        MAX_DRAG.as_secs()
                    ),
                ));
            }
            if path.len() < 2 || path.len() > 10_000 {
                return Err(ApiError::invalid(
                    "path",
                    format!("path needs between 2 and 10000 points, got {}", path.len()),
                ));
            }
            let points = path
                .iter()
                .map(|[x, y]| point(session, *x, *y, screenshot_id))
                .collect::<Result<Vec<_>, _>>()?;
            Resolved::Drag(points, button_named(button), step)
        }
        DesktopAction::Scroll {
            dx,
            dy,
            x,
            y,
            // The only unit is `notches`; the wire type refuses any other.
            unit: _,
            screenshot_id,
        } => {
            let (dx, dy) = (dx.unwrap_or(0), dy.unwrap_or(0));
            for (field, notches) in [("dx", dx), ("dy", dy)] {
                if notches.unsigned_abs() > desktop::MAX_SCROLL_NOTCHES.unsigned_abs() {
                    return Err(ApiError::invalid(
                        field,
                        format!("{field}: {}", DesktopError::ScrollTooLong(notches)),
                    ));
                }
            }
            Resolved::Scroll {
                at: at(x, y, screenshot_id)?,
                dx,
                dy,
            }
        }
        DesktopAction::Typing {
            text,
            use_clipboard,
        } => {
            if text.is_empty() {
                return Err(ApiError::invalid("text", "text must not be empty"));
            }
            if text.len() > 100_000 {
                return Err(ApiError::invalid(
                    "text",
                    "text is longer than 100000 bytes",
                ));
            }
            if use_clipboard == Some(true) {
                Resolved::Paste(text)
            } else {
                Resolved::Type(text)
            }
        }
        DesktopAction::Press { key } => {
            key_names::parse_sequence(&key).map_err(|e| key_error("key", e))?;
            Resolved::Press(key)
        }
        DesktopAction::KeyDown { key } => {
            key_names::parse_chord(&key).map_err(|e| key_error("key", e))?;
            Resolved::KeyDown(key)
        }
        DesktopAction::KeyUp { key } => {
            key_names::parse_chord(&key).map_err(|e| key_error("key", e))?;
            Resolved::KeyUp(key)
        }
        DesktopAction::Hotkey { keys } => {
            if keys.is_empty() {
                return Err(ApiError::invalid("keys", "keys must name at least one key"));
            }
            key_names::parse_hotkey(&keys).map_err(|e| key_error("keys", e))?;
            Resolved::Hotkey(keys)
        }
        DesktopAction::CursorPosition {} => Resolved::Nothing,
        DesktopAction::Wait { .. } | DesktopAction::WaitSettled { .. } => Resolved::Nothing,
    })
}

/// A key name refused in `field`.
fn key_error(field: &str, error: KeyNameError) -> ApiError {
    ApiError::invalid(field, format!("{field}: {error}"))
}

fn run(desktop: &desktop::Desktop, action: &Resolved) -> Result<(), DesktopError> {
    match action {
        Resolved::MoveTo(x, y) => desktop.move_to(*x, *y),
        Resolved::MoveRel(dx, dy) => desktop.move_rel(*dx, *dy).map(drop),
        Resolved::Click {
            at,
            button,
            count,
            modifiers,
        } => {
            if let Some((x, y)) = at {
                desktop.move_to(*x, *y)?;
            }
            let modifiers: Vec<&str> = modifiers.iter().map(String::as_str).collect();
            desktop.click(*button, *count, &modifiers)
        }
        Resolved::Down(button) => desktop.button_down(*button),
        Resolved::Up(button) => desktop.button_up(*button),
        Resolved::Drag(path, button, step) => desktop.drag(path, *button, *step),
        Resolved::DragFromPointer(target, button, relative) => {
            let start = desktop.cursor_position()?;
            let end = if *relative {
                (start.0 + target.0, start.1 + target.1)
            } else {
                *target
            };
            desktop.drag(&straight_path(start, end), *button, DRAG_STEP)
        }
        Resolved::Scroll { at, dx, dy } => {
            if let Some((x, y)) = at {
                desktop.move_to(*x, *y)?;
            }
            desktop.scroll(*dx, *dy)
        }
        Resolved::Type(text) => desktop.type_text(text),
        Resolved::Paste(text) => desktop.paste_text(text),
        Resolved::Press(key) => desktop.press(key),
        Resolved::KeyDown(key) => desktop.key_down(key),
        Resolved::KeyUp(key) => desktop.key_up(key),
        Resolved::Hotkey(keys) => {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            desktop.hotkey(&keys)
        }
        Resolved::Nothing => Ok(()),
    }
}

/// The points of a straight drag from `start` to `end`, at most `DRAG_SEGMENT` pixels apart
/// (and at most 50 of them), so applications see the pointer travel rather than jump.
fn straight_path(start: (i32, i32), end: (i32, i32)) -> Vec<(i32, i32)> {
    let (dx, dy) = (f64::from(end.0 - start.0), f64::from(end.1 - start.1));
    let steps = ((dx.hypot(dy) / DRAG_SEGMENT).ceil() as usize).clamp(1, 50);
    (0..=steps)
        .map(|i| {
            let t = i as f64 / steps as f64;
            (
                (f64::from(start.0) + dx * t).round() as i32,
                (f64::from(start.1) + dy * t).round() as i32,
            )
        })
        .collect()
}

/// A point in screen pixels: as given, or mapped from the named screenshot's pixels.
fn point(
    session: &DesktopSession,
    x: f64,
    y: f64,
    screenshot_id: Option<u64>,
) -> Result<(i32, i32), ApiError> {
    for (axis, value) in [("x", x), ("y", y)] {
        if !value.is_finite() || value.abs() > 1.0e6 {
            return Err(ApiError::invalid(
                axis,
                format!("{axis} must be a finite coordinate"),
            ));
        }
    }
    let (x, y) = match screenshot_id {
        None => (x, y),
        Some(id) => session
            .transform(id)
            .ok_or_else(|| {
                ApiError::invalid(
                    "screenshot_id",
                    format!("screenshot_id {id} is unknown or too old; take a new screenshot"),
                )
            })?
            .to_screen(x, y),
    };
    Ok((x.round() as i32, y.round() as i32))
}

fn offset(field: &str, value: f64) -> Result<i32, ApiError> {
    if !value.is_finite() || value.abs() > 100_000.0 {
        return Err(ApiError::invalid(
            field,
            format!("{field} must be a finite offset"),
        ));
    }
    Ok(value.round() as i32)
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

/// Runs a blocking desktop call off the async workers and maps its error.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, DesktopError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result.map_err(desktop_error),
        Err(error) => Err(ApiError::internal(format!("desktop call failed: {error}"))),
    }
}

/// Maps a desktop error to an answer: bad input is a 422 naming the field, an unreachable
/// display a 503. Key names, click counts and scroll lengths are checked by [`resolve`], which
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

    /// Where a refused action's error points: (`loc`, message).
    fn refusal(action: serde_json::Value) -> (Vec<String>, String) {
        let action: DesktopAction = serde_json::from_value(action).expect("a well-formed action");
        match resolve(&DesktopSession::new(":none"), action) {
            Ok(_) => panic!("the action was accepted"),
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
        ] {
            let (loc, message) = refusal(action.clone());
            assert_eq!(loc, at(field), "{action}: {message}");
            assert!(message.contains(mention), "{action}: {message}");
        }
    }

    #[test]
    fn jpeg_quality_is_1_to_100_and_80_by_default() {
        assert_eq!(jpeg_quality(None).ok(), Some(DEFAULT_JPEG_QUALITY));
        assert_eq!(jpeg_quality(Some(1)).ok(), Some(1));
        assert_eq!(jpeg_quality(Some(100)).ok(), Some(100));
        for bad in [0, 101, 256, 257, -1, i64::MAX] {
            let error = jpeg_quality(Some(bad)).expect_err("refused");
            assert_eq!(error.loc, Some(vec!["query".into(), "quality".into()]));
            assert!(
                error.message.ends_with(&format!("got {bad}")),
                "{}",
                error.message
            );
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
            let action: DesktopAction = serde_json::from_value(action).expect("well-formed");
            assert!(resolve(&DesktopSession::new(":none"), action).is_ok());
        }
    }
}
