//! [`DesktopAction`]: the closed set of desktop actions the loop can ask a [`crate::Computer`]
//! to perform, matching sandboxd's `POST /v1/browser/actions` vocabulary (`action_type`).
//!
//! Coordinates are pixels of the *observation image* the action was planned on (the screenshot
//! the model saw, possibly downscaled), never screen pixels; the computer maps them to the screen
//! through that observation's scale. Relative moves (`MOVE_REL`, `DRAG_REL`) are left out on
//! purpose: they cannot be checked against an observation.

use serde::{Deserialize, Serialize};

/// Longest `WAIT`, in seconds (sandboxd's limit).
pub const MAX_WAIT_SECONDS: f64 = 60.0;
/// Most points in one `DRAG_PATH` (sandboxd's limit).
pub const MAX_PATH_POINTS: usize = 10_000;
/// Longest pause after each drag point, in milliseconds (sandboxd's limit).
pub const MAX_STEP_MS: u64 = 1000;
/// Longest text typed in one action, in bytes (sandboxd's limit).
pub const MAX_TYPED_BYTES: usize = 100_000;
/// Spacing of the points a straight drag is cut into, in image pixels, so applications see the
/// pointer travel instead of jumping.
pub const DRAG_SEGMENT_PX: f64 = 20.0;

/// A mouse button.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Button {
    Left,
    Right,
    Middle,
}

/// One desktop action, tagged by `action_type` exactly as sandboxd names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "action_type",
    rename_all = "SCREAMING_SNAKE_CASE",
    deny_unknown_fields
)]
pub enum DesktopAction {
    /// Move the pointer to (x, y).
    MoveTo {
        x: f64,
        y: f64,
    },
    /// Click at (x, y), or where the pointer is. `num_clicks` 1-3; `modifiers` are key names
    /// held during the click (`ctrl`, `shift`, `alt`, `super`).
    Click {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        y: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<Button>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        num_clicks: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        modifiers: Option<Vec<String>>,
    },
    DoubleClick {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        y: Option<f64>,
    },
    TripleClick {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        y: Option<f64>,
    },
    RightClick {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        y: Option<f64>,
    },
    MouseDown {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<Button>,
    },
    MouseUp {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<Button>,
    },
    /// Press where the pointer is, move in a straight line to (x, y), release.
    DragTo {
        x: f64,
        y: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<Button>,
    },
    /// One whole stroke: move to the first point, press once, pass through every point,
    /// release once at the last. `step_ms` pauses after each point (sandboxd default 10).
    DragPath {
        path: Vec<[f64; 2]>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<Button>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step_ms: Option<u64>,
    },
    /// Scroll by wheel notches (one notch is one click of a mouse wheel, not pixels): positive
    /// `dy` scrolls down, positive `dx` right. At (x, y) if given.
    Scroll {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        y: Option<f64>,
        #[serde(default)]
        dx: i32,
        #[serde(default)]
        dy: i32,
    },
    /// Type text (any Unicode). `use_clipboard` pastes it instead.
    Typing {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        use_clipboard: Option<bool>,
    },
    /// Press and release a key or a chord (`ctrl+s`, `Return`).
    Press {
        key: String,
    },
    /// Press keys together in order, release them in reverse.
    Hotkey {
        keys: Vec<String>,
    },
    KeyDown {
        key: String,
    },
    KeyUp {
        key: String,
    },
    /// Sleep `duration` seconds (at most 60).
    Wait {
        duration: f64,
    },
    /// Report the pointer position.
    CursorPosition {},
    /// Wait until the screen stops changing.
    WaitSettled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quiet_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
}

/// A field of an action that is out of bounds, named as on the wire.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ActionError {
    pub field: &'static str,
    pub message: String,
}

impl ActionError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

impl DesktopAction {
    /// The `action_type`, as sent.
    pub fn name(&self) -> &'static str {
        match self {
            DesktopAction::MoveTo { .. } => "MOVE_TO",
            DesktopAction::Click { .. } => "CLICK",
            DesktopAction::DoubleClick { .. } => "DOUBLE_CLICK",
            DesktopAction::TripleClick { .. } => "TRIPLE_CLICK",
            DesktopAction::RightClick { .. } => "RIGHT_CLICK",
            DesktopAction::MouseDown { .. } => "MOUSE_DOWN",
            DesktopAction::MouseUp { .. } => "MOUSE_UP",
            DesktopAction::DragTo { .. } => "DRAG_TO",
            DesktopAction::DragPath { .. } => "DRAG_PATH",
            DesktopAction::Scroll { .. } => "SCROLL",
            DesktopAction::Typing { .. } => "TYPING",
            DesktopAction::Press { .. } => "PRESS",
            DesktopAction::Hotkey { .. } => "HOTKEY",
            DesktopAction::KeyDown { .. } => "KEY_DOWN",
            DesktopAction::KeyUp { .. } => "KEY_UP",
            DesktopAction::Wait { .. } => "WAIT",
            DesktopAction::CursorPosition {} => "CURSOR_POSITION",
            DesktopAction::WaitSettled { .. } => "WAIT_SETTLED",
        }
    }

    /// Every coordinate the action aims at, in observation-image pixels.
    pub fn points(&self) -> Vec<(f64, f64)> {
        let pair = |x: &Option<f64>, y: &Option<f64>| match (x, y) {
            (Some(x), Some(y)) => vec![(*x, *y)],
            _ => Vec::new(),
        };
        match self {
            DesktopAction::MoveTo { x, y } | DesktopAction::DragTo { x, y, .. } => vec![(*x, *y)],
            DesktopAction::Click { x, y, .. }
            | DesktopAction::DoubleClick { x, y }
            | DesktopAction::TripleClick { x, y }
            | DesktopAction::RightClick { x, y }
            | DesktopAction::Scroll { x, y, .. } => pair(x, y),
            DesktopAction::DragPath { path, .. } => path.iter().map(|[x, y]| (*x, *y)).collect(),
            _ => Vec::new(),
        }
    }

    /// The same action with every coordinate passed through `map`.
    pub fn map_points(&self, map: impl Fn(f64, f64) -> (f64, f64)) -> DesktopAction {
        let pair = |x: &Option<f64>, y: &Option<f64>| match (x, y) {
            (Some(x), Some(y)) => {
                let (x, y) = map(*x, *y);
                (Some(x), Some(y))
            }
            _ => (*x, *y),
        };
        let mut out = self.clone();
        match &mut out {
            DesktopAction::MoveTo { x, y } | DesktopAction::DragTo { x, y, .. } => {
                (*x, *y) = map(*x, *y);
            }
            DesktopAction::Click { x, y, .. }
            | DesktopAction::DoubleClick { x, y }
            | DesktopAction::TripleClick { x, y }
            | DesktopAction::RightClick { x, y }
            | DesktopAction::Scroll { x, y, .. } => {
                (*x, *y) = pair(x, y);
            }
            DesktopAction::DragPath { path, .. } => {
                for point in path.iter_mut() {
                    let (x, y) = map(point[0], point[1]);
                    *point = [x, y];
                }
            }
            _ => {}
        }
        out
    }

    /// Whether the action can change what is on the screen (so the loop waits for the screen
    /// to settle after it). Waits and pointer queries cannot.
    pub fn changes_screen(&self) -> bool {
        !matches!(
            self,
            DesktopAction::Wait { .. }
                | DesktopAction::CursorPosition {}
                | DesktopAction::WaitSettled { .. }
        )
    }

    /// Checks every field that does not depend on an observation: counts, lengths, durations,
    /// a half-given coordinate. Coordinates against the observation are checked by the loop.
    pub fn validate(&self) -> Result<(), ActionError> {
        let half = |x: &Option<f64>, y: &Option<f64>| match (x, y) {
            (Some(_), None) => Err(ActionError::new("y", "x is given but y is missing")),
            (None, Some(_)) => Err(ActionError::new("x", "y is given but x is missing")),
            _ => Ok(()),
        };
        match self {
            DesktopAction::Click {
                x, y, num_clicks, ..
            } => {
                half(x, y)?;
                if let Some(n) = num_clicks
                    && !(1..=3).contains(n)
                {
                    return Err(ActionError::new(
                        "num_clicks",
                        format!("num_clicks must be 1, 2 or 3, got {n}"),
                    ));
                }
                Ok(())
            }
            DesktopAction::DoubleClick { x, y }
            | DesktopAction::TripleClick { x, y }
            | DesktopAction::RightClick { x, y }
            | DesktopAction::Scroll { x, y, .. } => half(x, y),
            DesktopAction::DragPath { path, step_ms, .. } => {
                if path.len() < 2 || path.len() > MAX_PATH_POINTS {
                    return Err(ActionError::new(
                        "path",
                        format!(
                            "path needs between 2 and {MAX_PATH_POINTS} points, got {}",
                            path.len()
                        ),
                    ));
                }
                if let Some(step) = step_ms
                    && *step > MAX_STEP_MS
                {
                    return Err(ActionError::new(
                        "step_ms",
                        format!("step_ms must be at most {MAX_STEP_MS}, got {step}"),
                    ));
                }
                Ok(())
            }
            DesktopAction::Typing { text, .. } => {
                if text.is_empty() {
                    return Err(ActionError::new("text", "text must not be empty"));
                }
                if text.len() > MAX_TYPED_BYTES {
                    return Err(ActionError::new(
                        "text",
                        format!("text is longer than {MAX_TYPED_BYTES} bytes"),
                    ));
                }
                Ok(())
            }
            DesktopAction::Press { key }
            | DesktopAction::KeyDown { key }
            | DesktopAction::KeyUp { key } => {
                if key.trim().is_empty() {
                    return Err(ActionError::new("key", "key must name a key"));
                }
                Ok(())
            }
            DesktopAction::Hotkey { keys } => {
                if keys.is_empty() || keys.iter().any(|k| k.trim().is_empty()) {
                    return Err(ActionError::new("keys", "keys must name at least one key"));
                }
                Ok(())
            }
            DesktopAction::Wait { duration } => {
                if !duration.is_finite() || *duration <= 0.0 || *duration > MAX_WAIT_SECONDS {
                    return Err(ActionError::new(
                        "duration",
                        format!(
                            "duration must be more than 0 and at most {MAX_WAIT_SECONDS} seconds"
                        ),
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The points of a straight stroke from `start` to `end`, at most [`DRAG_SEGMENT_PX`] apart
/// (at least the two ends), for a `DRAG_PATH`.
pub fn straight_stroke(start: (f64, f64), end: (f64, f64)) -> Vec<[f64; 2]> {
    densify(&[[start.0, start.1], [end.0, end.1]])
}

/// `points` with extra points on every segment longer than [`DRAG_SEGMENT_PX`], so a drag
/// through them is seen as continuous motion. Keeps every original point.
pub fn densify(points: &[[f64; 2]]) -> Vec<[f64; 2]> {
    let mut out: Vec<[f64; 2]> = Vec::with_capacity(points.len());
    for (i, point) in points.iter().enumerate() {
        if i == 0 {
            out.push(*point);
            continue;
        }
        let [x0, y0] = points[i - 1];
        let [x1, y1] = *point;
        let length = (x1 - x0).hypot(y1 - y0);
        let steps = ((length / DRAG_SEGMENT_PX).ceil() as usize).max(1);
        for s in 1..=steps {
            let t = s as f64 / steps as f64;
            out.push([(x0 + (x1 - x0) * t).round(), (y0 + (y1 - y0) * t).round()]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serialises_as_sandboxd_names_it() -> anyhow::Result<()> {
        let click = DesktopAction::Click {
            x: Some(10.0),
            y: Some(20.0),
            button: Some(Button::Right),
            num_clicks: None,
            modifiers: Some(vec!["ctrl".into()]),
        };
        assert_eq!(
            serde_json::to_value(&click)?,
            json!({"action_type": "CLICK", "x": 10.0, "y": 20.0, "button": "right", "modifiers": ["ctrl"]})
        );
        let drag: DesktopAction = serde_json::from_value(
            json!({"action_type": "DRAG_PATH", "path": [[1, 2], [3, 4]], "step_ms": 5}),
        )?;
        assert_eq!(drag.name(), "DRAG_PATH");
        assert_eq!(drag.points(), vec![(1.0, 2.0), (3.0, 4.0)]);
        let cursor: DesktopAction =
            serde_json::from_value(json!({"action_type": "CURSOR_POSITION"}))?;
        assert_eq!(cursor, DesktopAction::CursorPosition {});
        Ok(())
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        let typo =
            serde_json::from_value::<DesktopAction>(json!({"action_type": "CLICK", "xx": 1}));
        assert!(typo.is_err());
        let unknown = serde_json::from_value::<DesktopAction>(
            json!({"action_type": "MOVE_REL", "x_offset": 1}),
        );
        assert!(unknown.is_err());
    }

    #[test]
    fn validate_names_the_field() {
        let bad = DesktopAction::DragPath {
            path: vec![[0.0, 0.0]],
            button: None,
            step_ms: None,
        };
        assert_eq!(bad.validate().err().map(|e| e.field), Some("path"));
        let half = DesktopAction::Click {
            x: Some(1.0),
            y: None,
            button: None,
            num_clicks: None,
            modifiers: None,
        };
        assert_eq!(half.validate().err().map(|e| e.field), Some("y"));
        let wait = DesktopAction::Wait { duration: 61.0 };
        assert_eq!(wait.validate().err().map(|e| e.field), Some("duration"));
        let empty = DesktopAction::Hotkey { keys: vec![] };
        assert_eq!(empty.validate().err().map(|e| e.field), Some("keys"));
    }

    #[test]
    fn strokes_are_dense_and_keep_their_ends() {
        let stroke = straight_stroke((0.0, 0.0), (100.0, 0.0));
        assert_eq!(stroke.first(), Some(&[0.0, 0.0]));
        assert_eq!(stroke.last(), Some(&[100.0, 0.0]));
        assert_eq!(stroke.len(), 6);
        assert!(
            stroke
                .windows(2)
                .all(|w| (w[1][0] - w[0][0]).abs() <= DRAG_SEGMENT_PX)
        );
        let corner = densify(&[[0.0, 0.0], [10.0, 0.0], [10.0, 50.0]]);
        assert!(corner.contains(&[10.0, 0.0]));
        assert_eq!(corner.last(), Some(&[10.0, 50.0]));
    }
}
