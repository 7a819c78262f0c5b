//! Desktop actions as sandboxd performs them: [`Action`] says what to do,
//! [`DesktopSession::check`] resolves it (points mapped from a screenshot's pixels to the
//! screen, key names parsed, counts, lengths and durations bounded) and
//! [`DesktopSession::perform`] runs it on the display.
//!
//! A refusal is [`SessionError::Invalid`] naming the field as the API spells it (`num_clicks`,
//! `x_offset`), as the browser's and the file service's errors do, so the API can point at it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use desktop::keys::{self as key_names, KeyNameError};
use desktop::{Button, Desktop, DesktopError, SettleReport};

use super::{DesktopSession, SessionError};

/// Longest [`Action::Wait`].
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// Longest quiet period and timeout of [`Action::WaitSettled`].
pub const MAX_SETTLE: Duration = Duration::from_secs(60);
/// [`Action::WaitSettled`]'s quiet period when none is given.
pub const DEFAULT_SETTLE_QUIET: Duration = Duration::from_millis(300);
/// [`Action::WaitSettled`]'s timeout when none is given.
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_millis(5000);
/// Pause after each point of a drag (see [`Desktop::drag`]) when none is given.
pub const DRAG_STEP: Duration = Duration::from_millis(10);
/// Longest pause after each point of a drag.
pub const MAX_DRAG_STEP: Duration = Duration::from_secs(1);
/// Longest drag along a path (its points times its step).
pub const MAX_DRAG: Duration = Duration::from_secs(60);
/// Fewest and most points of a drag path.
pub const DRAG_PATH_POINTS: std::ops::RangeInclusive<usize> = 2..=10_000;
/// Longest text typed or pasted, in bytes.
pub const MAX_TEXT_BYTES: usize = 100_000;
/// Largest coordinate, either sign, before mapping (anything larger is surely a mistake).
const MAX_COORDINATE: f64 = 1.0e6;
/// Largest relative move or drag, either sign, in screen pixels.
const MAX_OFFSET: f64 = 100_000.0;

/// A point as the caller gives it: screen pixels, or pixels of the screenshot the action names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
}

/// One desktop action. Offsets are screen pixels; points are mapped through the screenshot the
/// action names, if any.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    MoveTo(Point),
    MoveBy {
        x_offset: f64,
        y_offset: f64,
    },
    /// `num_clicks` clicks (1 to 3) at `at` (or where the pointer is), with `modifiers` (key
    /// names) held.
    Click {
        at: Option<Point>,
        button: Button,
        num_clicks: u32,
        modifiers: Vec<String>,
    },
    ButtonDown(Button),
    ButtonUp(Button),
    /// Press where the pointer is, move in a straight line to `to`, release.
    DragTo {
        to: Point,
        button: Button,
    },
    /// Press where the pointer is, move in a straight line by the offset, release.
    DragBy {
        x_offset: f64,
        y_offset: f64,
    },
    /// Press at the first point, move through every point, pausing `step_ms` at each, release
    /// at the last.
    DragPath {
        path: Vec<Point>,
        button: Button,
        step_ms: Option<u64>,
    },
    /// Wheel notches (positive `dy` down, positive `dx` right), at `at` if given.
    Scroll {
        at: Option<Point>,
        dx: i32,
        dy: i32,
    },
    /// Type `text` key by key, or paste it through the clipboard.
    Type {
        text: String,
        paste: bool,
    },
    /// A key, a chord (`ctrl+shift+t`) or a sequence of them.
    Press(String),
    KeyDown(String),
    KeyUp(String),
    /// Keys pressed together, in order, released in reverse.
    Hotkey(Vec<String>),
    /// A pause of `duration` seconds.
    Wait {
        duration: f64,
    },
    /// Until the screen stops changing for `quiet_ms`, at most `timeout_ms`.
    WaitSettled {
        quiet_ms: Option<u64>,
        timeout_ms: Option<u64>,
    },
    /// Nothing: the answer reports where the pointer is.
    CursorPosition,
}

/// What a performed action leaves behind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Performed {
    /// Where the pointer is afterwards, in screen pixels.
    pub cursor: (i32, i32),
    /// For [`Action::WaitSettled`].
    pub settle: Option<SettleReport>,
}

/// An action whose coordinates are screen pixels and whose names and bounds were checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked(Step);

#[derive(Debug, Clone, PartialEq)]
enum Step {
    MoveTo(i32, i32),
    MoveBy(i32, i32),
    Click {
        at: Option<(i32, i32)>,
        button: Button,
        count: u32,
        modifiers: Vec<String>,
    },
    Down(Button),
    Up(Button),
    Path(Vec<(i32, i32)>, Button, Duration),
    DragTo((i32, i32), Button),
    DragBy((i32, i32), Button),
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
    Wait(Duration),
    Settle {
        quiet: Duration,
        timeout: Duration,
    },
    Nothing,
}

fn invalid(field: &'static str, message: impl Into<String>) -> SessionError {
    SessionError::Invalid {
        field,
        message: message.into(),
    }
}

/// A key name refused in `field`.
fn key_error(field: &'static str, error: KeyNameError) -> SessionError {
    invalid(field, format!("{field}: {error}"))
}

fn offset(field: &'static str, value: f64) -> Result<i32, SessionError> {
    if !value.is_finite() || value.abs() > MAX_OFFSET {
        return Err(invalid(field, format!("{field} must be a finite offset")));
    }
    // Finite and within ±100000: the conversion is exact after rounding.
    Ok(value.round() as i32)
}

impl DesktopSession {
    /// Checks `action` and resolves its points (through screenshot `screenshot_id`'s transform
    /// when given) without touching the display.
    pub fn check(
        &self,
        action: Action,
        screenshot_id: Option<u64>,
    ) -> Result<Checked, SessionError> {
        let at = |point: Point| self.screen_point(point, screenshot_id);
        let step = match action {
            Action::MoveTo(to) => {
                let (x, y) = at(to)?;
                Step::MoveTo(x, y)
            }
            Action::MoveBy { x_offset, y_offset } => {
                Step::MoveBy(offset("x_offset", x_offset)?, offset("y_offset", y_offset)?)
            }
            Action::Click {
                at: point,
                button,
                num_clicks,
                modifiers,
            } => {
                check_click(num_clicks, &modifiers)?;
                Step::Click {
                    at: point.map(at).transpose()?,
                    button,
                    count: num_clicks,
                    modifiers,
                }
            }
            Action::ButtonDown(button) => Step::Down(button),
            Action::ButtonUp(button) => Step::Up(button),
            Action::DragTo { to, button } => Step::DragTo(at(to)?, button),
            Action::DragBy { x_offset, y_offset } => Step::DragBy(
                (offset("x_offset", x_offset)?, offset("y_offset", y_offset)?),
                Button::Left,
            ),
            Action::DragPath {
                path,
                button,
                step_ms,
            } => {
                let step = check_drag_path(path.len(), step_ms)?;
                let points = path.into_iter().map(at).collect::<Result<Vec<_>, _>>()?;
                Step::Path(points, button, step)
            }
            Action::Scroll { at: point, dx, dy } => {
                check_scroll(dx, dy)?;
                Step::Scroll {
                    at: point.map(at).transpose()?,
                    dx,
                    dy,
                }
            }
            Action::Type { text, paste } => check_text(text, paste)?,
            Action::Press(key) => {
                key_names::parse_sequence(&key).map_err(|e| key_error("key", e))?;
                Step::Press(key)
            }
            Action::KeyDown(key) => {
                key_names::parse_chord(&key).map_err(|e| key_error("key", e))?;
                Step::KeyDown(key)
            }
            Action::KeyUp(key) => {
                key_names::parse_chord(&key).map_err(|e| key_error("key", e))?;
                Step::KeyUp(key)
            }
            Action::Hotkey(keys) => {
                if keys.is_empty() {
                    return Err(invalid("keys", "keys must name at least one key"));
                }
                key_names::parse_hotkey(&keys).map_err(|e| key_error("keys", e))?;
                Step::Hotkey(keys)
            }
            Action::Wait { duration } => Step::Wait(check_wait(duration)?),
            Action::WaitSettled {
                quiet_ms,
                timeout_ms,
            } => check_settle(quiet_ms, timeout_ms)?,
            Action::CursorPosition => Step::Nothing,
        };
        Ok(Checked(step))
    }

    /// Checks and performs `action` (see [`DesktopSession::check`]), then reads where the
    /// pointer is. The display is used from a blocking thread.
    pub async fn perform(
        self: &Arc<Self>,
        action: Action,
        screenshot_id: Option<u64>,
    ) -> Result<Performed, SessionError> {
        let Checked(step) = self.check(action, screenshot_id)?;
        let mut settle = None;
        match step {
            Step::Wait(duration) => tokio::time::sleep(duration).await,
            Step::Settle { quiet, timeout } => {
                self.settle_waits_used.store(true, Ordering::Relaxed);
                let before = self.take_screen_before_action();
                let report = self
                    .blocking(move |d| d.wait_until_settled_after(before, quiet, timeout))
                    .await?;
                settle = Some(report);
            }
            Step::Nothing => {}
            step => {
                // The screen as it was before the action, so a WAIT_SETTLED after it can tell
                // whether the effect is already on screen (one capture, a few milliseconds).
                // Only where settle waits are asked for: a client that never waits (most AIO
                // clients) does not pay for it. The first wait of a session, with no frame to
                // compare, applies its whole quiet period.
                let fingerprint = self.settle_waits_used.load(Ordering::Relaxed);
                let before = self
                    .blocking(move |d| {
                        let before = if fingerprint {
                            Some(d.capture()?.fingerprint())
                        } else {
                            None
                        };
                        run(d, &step)?;
                        Ok(before)
                    })
                    .await?;
                if let Some(before) = before {
                    self.set_screen_before_action(before);
                }
            }
        }
        let cursor = self.blocking(|d| d.cursor_position()).await?;
        Ok(Performed { cursor, settle })
    }

    /// A point in screen pixels: as given, or mapped from the named screenshot's pixels.
    fn screen_point(
        &self,
        point: Point,
        screenshot_id: Option<u64>,
    ) -> Result<(i32, i32), SessionError> {
        for (axis, value) in [("x", point.x), ("y", point.y)] {
            if !value.is_finite() || value.abs() > MAX_COORDINATE {
                return Err(invalid(axis, format!("{axis} must be a finite coordinate")));
            }
        }
        let (x, y) = match screenshot_id {
            None => (point.x, point.y),
            Some(id) => self
                .transform(id)
                .ok_or_else(|| {
                    invalid(
                        "screenshot_id",
                        format!("screenshot_id {id} is unknown or too old; take a new screenshot"),
                    )
                })?
                .to_screen(point.x, point.y),
        };
        // Within ±1e6 (or mapped onto the screen): the conversion is exact after rounding.
        Ok((x.round() as i32, y.round() as i32))
    }
}

/// A click's count and modifier keys.
fn check_click(num_clicks: u32, modifiers: &[String]) -> Result<(), SessionError> {
    if !(1..=3).contains(&num_clicks) {
        return Err(invalid(
            "num_clicks",
            DesktopError::ClickCount(num_clicks).to_string(),
        ));
    }
    if !modifiers.is_empty() {
        key_names::parse_hotkey(modifiers).map_err(|e| key_error("modifiers", e))?;
    }
    Ok(())
}

/// A drag path's length in points and its pace; the time between two points.
fn check_drag_path(points: usize, step_ms: Option<u64>) -> Result<Duration, SessionError> {
    let step = step_ms.map_or(DRAG_STEP, Duration::from_millis);
    let count = u32::try_from(points).unwrap_or(u32::MAX);
    if step > MAX_DRAG_STEP || step.saturating_mul(count) > MAX_DRAG {
        return Err(invalid(
            "step_ms",
            format!(
                "step_ms must be at most {} and the whole drag at most {} s",
                MAX_DRAG_STEP.as_millis(),
                MAX_DRAG.as_secs()
            ),
        ));
    }
    if !DRAG_PATH_POINTS.contains(&points) {
        return Err(invalid(
            "path",
            format!(
                "path needs between {} and {} points, got {points}",
                DRAG_PATH_POINTS.start(),
                DRAG_PATH_POINTS.end(),
            ),
        ));
    }
    Ok(step)
}

/// A scroll's notches on each axis.
fn check_scroll(dx: i32, dy: i32) -> Result<(), SessionError> {
    for (field, notches) in [("dx", dx), ("dy", dy)] {
        if notches.unsigned_abs() > desktop::MAX_SCROLL_NOTCHES.unsigned_abs() {
            return Err(invalid(
                field,
                format!("{field}: {}", DesktopError::ScrollTooLong(notches)),
            ));
        }
    }
    Ok(())
}

/// Text to type (or paste): not empty, bounded.
fn check_text(text: String, paste: bool) -> Result<Step, SessionError> {
    if text.is_empty() {
        return Err(invalid("text", "text must not be empty"));
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(invalid(
            "text",
            format!("text is longer than {MAX_TEXT_BYTES} bytes"),
        ));
    }
    Ok(if paste {
        Step::Paste(text)
    } else {
        Step::Type(text)
    })
}

/// A wait of `duration` seconds.
fn check_wait(duration: f64) -> Result<Duration, SessionError> {
    if !duration.is_finite() || duration <= 0.0 || duration > MAX_WAIT.as_secs_f64() {
        return Err(invalid(
            "duration",
            format!(
                "duration must be more than 0 and at most {} seconds",
                MAX_WAIT.as_secs()
            ),
        ));
    }
    // Finite, positive and at most a minute: `from_secs_f64` cannot panic.
    Ok(Duration::from_secs_f64(duration))
}

/// A wait for the screen to settle.
fn check_settle(quiet_ms: Option<u64>, timeout_ms: Option<u64>) -> Result<Step, SessionError> {
    let quiet = quiet_ms.map_or(DEFAULT_SETTLE_QUIET, Duration::from_millis);
    let timeout = timeout_ms.map_or(DEFAULT_SETTLE_TIMEOUT, Duration::from_millis);
    let max_ms = MAX_SETTLE.as_millis();
    if quiet.is_zero() || quiet > MAX_SETTLE {
        return Err(invalid(
            "quiet_ms",
            format!("quiet_ms must be between 1 and {max_ms}"),
        ));
    }
    if timeout > MAX_SETTLE {
        return Err(invalid(
            "timeout_ms",
            format!("timeout_ms must be at most {max_ms}"),
        ));
    }
    Ok(Step::Settle { quiet, timeout })
}

/// Runs a checked step on the display (waits are not steps that reach it).
fn run(desktop: &Desktop, step: &Step) -> Result<(), DesktopError> {
    match step {
        Step::MoveTo(x, y) => desktop.move_to(*x, *y),
        Step::MoveBy(dx, dy) => desktop.move_rel(*dx, *dy).map(drop),
        Step::Click {
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
        Step::Down(button) => desktop.button_down(*button),
        Step::Up(button) => desktop.button_up(*button),
        Step::Path(path, button, step) => desktop.drag(path, *button, *step),
        Step::DragTo(end, button) => desktop.drag_to(*end, *button, DRAG_STEP),
        Step::DragBy(offset, button) => desktop.drag_by(*offset, *button, DRAG_STEP),
        Step::Scroll { at, dx, dy } => {
            if let Some((x, y)) = at {
                desktop.move_to(*x, *y)?;
            }
            desktop.scroll(*dx, *dy)
        }
        Step::Type(text) => desktop.type_text(text),
        Step::Paste(text) => desktop.paste_text(text),
        Step::Press(key) => desktop.press(key),
        Step::KeyDown(key) => desktop.key_down(key),
        Step::KeyUp(key) => desktop.key_up(key),
        Step::Hotkey(keys) => {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            desktop.hotkey(&keys)
        }
        Step::Wait(_) | Step::Settle { .. } | Step::Nothing => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> DesktopSession {
        DesktopSession::new(":none")
    }

    /// The field a refused action names.
    fn refused_field(action: Action, screenshot_id: Option<u64>) -> &'static str {
        match session().check(action, screenshot_id) {
            Err(SessionError::Invalid { field, .. }) => field,
            other => panic!("not refused as invalid: {other:?}"),
        }
    }

    fn point(x: f64, y: f64) -> Point {
        Point { x, y }
    }

    #[test]
    fn bounds_are_checked_before_the_display_is_touched() {
        let path = |n: usize| (0..n).map(|i| point(i as f64, 0.0)).collect::<Vec<_>>();
        for (action, field) in [
            (
                Action::DragPath {
                    path: path(1),
                    button: Button::Left,
                    step_ms: None,
                },
                "path",
            ),
            (
                Action::DragPath {
                    path: path(3),
                    button: Button::Left,
                    step_ms: Some(1001),
                },
                "step_ms",
            ),
            (
                // 10 ms after each of 7000 points is 70 s: over the minute.
                Action::DragPath {
                    path: path(7000),
                    button: Button::Left,
                    step_ms: None,
                },
                "step_ms",
            ),
            (Action::Wait { duration: 0.0 }, "duration"),
            (Action::Wait { duration: 61.0 }, "duration"),
            (
                Action::WaitSettled {
                    quiet_ms: Some(0),
                    timeout_ms: None,
                },
                "quiet_ms",
            ),
            (
                Action::WaitSettled {
                    quiet_ms: None,
                    timeout_ms: Some(60_001),
                },
                "timeout_ms",
            ),
            (
                Action::Type {
                    text: String::new(),
                    paste: false,
                },
                "text",
            ),
            (
                Action::Type {
                    text: "x".repeat(MAX_TEXT_BYTES + 1),
                    paste: true,
                },
                "text",
            ),
            (
                Action::MoveBy {
                    x_offset: 1.0,
                    y_offset: f64::NAN,
                },
                "y_offset",
            ),
            (Action::MoveTo(point(f64::INFINITY, 0.0)), "x"),
            (
                Action::DragTo {
                    to: point(0.0, -2.0e6),
                    button: Button::Left,
                },
                "y",
            ),
        ] {
            assert_eq!(refused_field(action.clone(), None), field, "{action:?}");
        }
    }

    #[test]
    fn points_are_mapped_through_the_named_screenshot() {
        let session = session();
        assert_eq!(
            refused_field(Action::MoveTo(point(1.0, 1.0)), Some(7)),
            "screenshot_id"
        );
        assert_eq!(
            session.check(Action::MoveTo(point(10.4, 19.6)), None).ok(),
            Some(Checked(Step::MoveTo(10, 20)))
        );
        // A screenshot at half size: image pixel (100, 50) is screen pixel (201, 101).
        let id = session.record(&desktop::EncodedImage {
            bytes: Vec::new(),
            width: 640,
            height: 400,
            mime: "image/png",
            screen_width: 1280,
            screen_height: 800,
            scale_x: 2.0,
            scale_y: 2.0,
        });
        assert_eq!(
            session
                .check(
                    Action::DragPath {
                        path: vec![point(100.0, 50.0), point(639.0, 399.0)],
                        button: Button::Right,
                        step_ms: Some(0),
                    },
                    Some(id)
                )
                .ok(),
            Some(Checked(Step::Path(
                vec![(201, 101), (1279, 799)],
                Button::Right,
                Duration::ZERO
            )))
        );
        assert_eq!(
            session
                .check(
                    Action::DragBy {
                        x_offset: -3.6,
                        y_offset: 4.0
                    },
                    None
                )
                .ok(),
            Some(Checked(Step::DragBy((-4, 4), Button::Left)))
        );
        assert_eq!(
            session.check(Action::Wait { duration: 0.5 }, None).ok(),
            Some(Checked(Step::Wait(Duration::from_millis(500))))
        );
        assert_eq!(
            session
                .check(
                    Action::WaitSettled {
                        quiet_ms: None,
                        timeout_ms: None
                    },
                    None
                )
                .ok(),
            Some(Checked(Step::Settle {
                quiet: DEFAULT_SETTLE_QUIET,
                timeout: DEFAULT_SETTLE_TIMEOUT
            }))
        );
    }
}
