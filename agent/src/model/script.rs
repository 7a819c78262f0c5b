//! `script:<path>`: replays a JSON list of steps, one step per turn, with no model. The demo
//! and most tests use it.
//!
//! # File format
//!
//! Either a JSON array of steps, or an object:
//!
//! ```json
//! {
//!   "name": "draw-red-triangle",
//!   "description": "free text",
//!   "coordinates": "fraction",
//!   "steps": [
//!     {"action": "SHELL", "command": "mtpaint >/dev/null 2>&1 &", "comment": "optional"},
//!     {"action": "WAIT_SETTLED", "quiet_ms": 500, "timeout_ms": 10000},
//!     {"action": "DRAG_PATH", "path": [[0.5, 0.3], [0.6, 0.5], [0.4, 0.5], [0.5, 0.3]]},
//!     {"action": "HOTKEY", "keys": ["ctrl", "s"]},
//!     {"action": "FINAL", "answer": "saved ~/outputs/red-triangle.png"}
//!   ]
//! }
//! ```
//!
//! - `action` is a desktop action exactly as sandboxd names it (`MOVE_TO`, `CLICK`,
//!   `DOUBLE_CLICK`, `TRIPLE_CLICK`, `RIGHT_CLICK`, `MOUSE_DOWN`, `MOUSE_UP`, `DRAG_TO`,
//!   `DRAG_PATH`, `SCROLL` (wheel notches), `TYPING`, `PRESS`, `HOTKEY`, `KEY_DOWN`, `KEY_UP`,
//!   `WAIT`, `CURSOR_POSITION`, `WAIT_SETTLED`) with that action's fields, or one of:
//!   - `SHELL` `{command, timeout_s?}`: a command line in the sandbox's shell session; it
//!     answers after `timeout_s` (default 30) even if the command still runs;
//!   - `WRITE_FILE` `{path, content, encoding?: "utf-8" | "base64"}`;
//!   - `SCREENSHOT` `{}`: just a new screenshot;
//!   - `REQUEST_HUMAN` `{question}`: asks the person and waits for the answer;
//!   - `FINAL` `{answer}`: ends the run, completed, with this answer.
//! - `comment` is allowed on every step and ignored. Any other field is an error.
//! - `coordinates`: `"pixels"` (default) are pixels of the screenshot, which for scripts is the
//!   full screen; `"fraction"` are fractions (0 to 1) of the screenshot's width and height, so a
//!   script works on any screen size.
//! - A `DRAG_PATH` is one stroke; points are added between the given ones (at most 20 pixels
//!   apart) so the program under the pointer sees it move, not jump.
//! - Every step is checked when the file is loaded: an unknown action, a missing or unknown
//!   field, or an out-of-range value is an error naming the step index (0-based) and action.
//! - A step that fails when run (the sandbox refuses it) fails the run; after a restart, a step
//!   whose outcome is unknown is not run again, the script goes on with the next one.
//! - Without a `FINAL` step the run completes after the last step.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Model, ModelError, ModelInfo, ModelTurn, StopReason, ToolCall, ToolRequest, TurnRequest, Usage,
};
use crate::action::{DesktopAction, densify};
use crate::transcript::Item;

/// Largest script file.
pub const MAX_SCRIPT_BYTES: u64 = 4 * 1024 * 1024;
/// Most steps in a script.
pub const MAX_STEPS: usize = 10_000;
/// Longest `timeout_s` of a `SHELL` step.
pub const MAX_SHELL_SECONDS: f64 = 600.0;

/// The desktop actions a step may name.
const DESKTOP_ACTIONS: &[&str] = &[
    "MOVE_TO",
    "CLICK",
    "DOUBLE_CLICK",
    "TRIPLE_CLICK",
    "RIGHT_CLICK",
    "MOUSE_DOWN",
    "MOUSE_UP",
    "DRAG_TO",
    "DRAG_PATH",
    "SCROLL",
    "TYPING",
    "PRESS",
    "HOTKEY",
    "KEY_DOWN",
    "KEY_UP",
    "WAIT",
    "CURSOR_POSITION",
    "WAIT_SETTLED",
];

/// A script that cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("script {path}: cannot be read: {message}")]
    Read { path: PathBuf, message: String },
    /// Missing, unreadable or outside the scripts directory: one answer for all three, so the
    /// message does not tell whether a file exists elsewhere on the host.
    #[error("script {path}: no such script in the scripts directory")]
    NotInRoot { path: PathBuf },
    #[error("script {path}: larger than {MAX_SCRIPT_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("script: not valid JSON: {message}")]
    Json { message: String },
    #[error("script: {message}")]
    Shape { message: String },
    #[error("script: has no steps")]
    Empty,
    #[error("script: more than {MAX_STEPS} steps")]
    TooManySteps,
    #[error("script step {index}: has no \"action\"")]
    MissingAction { index: usize },
    #[error("script step {index}: unknown action {action:?}")]
    UnknownAction { index: usize, action: String },
    #[error("script step {index} ({action}): {message}")]
    Step {
        index: usize,
        action: String,
        message: String,
    },
}

/// How a script's coordinates are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Coordinates {
    #[default]
    Pixels,
    Fraction,
}

/// One checked step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub action: String,
    pub request: ToolRequest,
}

/// A loaded script.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    pub name: Option<String>,
    pub coordinates: Coordinates,
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    #[allow(dead_code)] // Documentation for people; kept so the field is allowed.
    description: Option<String>,
    #[serde(default)]
    coordinates: Coordinates,
    steps: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellStep {
    command: String,
    #[serde(default)]
    timeout_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteFileStep {
    path: String,
    content: String,
    #[serde(default)]
    encoding: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuestionStep {
    question: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinalStep {
    answer: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyStep {}

impl Script {
    /// Parses and checks a script.
    pub fn parse(text: &str) -> Result<Self, ScriptError> {
        let value: Value = serde_json::from_str(text).map_err(|e| ScriptError::Json {
            message: e.to_string(),
        })?;
        let file = match value {
            Value::Array(steps) => ScriptFile {
                name: None,
                description: None,
                coordinates: Coordinates::Pixels,
                steps,
            },
            object @ Value::Object(_) => {
                serde_path_to_error::deserialize(object).map_err(|e| ScriptError::Shape {
                    message: format!("{}: {}", e.path(), e.inner()),
                })?
            }
            _ => {
                return Err(ScriptError::Shape {
                    message: "a script is an array of steps or an object with \"steps\"".into(),
                });
            }
        };
        if file.steps.is_empty() {
            return Err(ScriptError::Empty);
        }
        if file.steps.len() > MAX_STEPS {
            return Err(ScriptError::TooManySteps);
        }
        let steps = file
            .steps
            .iter()
            .enumerate()
            .map(|(index, step)| parse_step(index, step, file.coordinates))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Script {
            name: file.name,
            coordinates: file.coordinates,
            steps,
        })
    }
}

fn parse_step(index: usize, value: &Value, coordinates: Coordinates) -> Result<Step, ScriptError> {
    let Some(object) = value.as_object() else {
        return Err(ScriptError::Step {
            index,
            action: "?".into(),
            message: "a step must be a JSON object".into(),
        });
    };
    let Some(action) = object.get("action").and_then(Value::as_str) else {
        return Err(ScriptError::MissingAction { index });
    };
    let mut fields = object.clone();
    fields.remove("action");
    fields.remove("comment");
    let step_error = |message: String| ScriptError::Step {
        index,
        action: action.to_string(),
        message,
    };
    fn fields_of<T: serde::de::DeserializeOwned>(
        fields: serde_json::Map<String, Value>,
    ) -> Result<T, String> {
        serde_path_to_error::deserialize(Value::Object(fields)).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.inner().to_string()
            } else {
                format!("{path}: {}", e.inner())
            }
        })
    }
    let request = match action {
        "SHELL" => {
            let step: ShellStep = fields_of(fields).map_err(step_error)?;
            if step.command.trim().is_empty() {
                return Err(step_error("command must not be empty".into()));
            }
            let seconds = step.timeout_s.unwrap_or(30.0);
            if !(seconds > 0.0 && seconds <= MAX_SHELL_SECONDS) {
                return Err(step_error(format!(
                    "timeout_s must be more than 0 and at most {MAX_SHELL_SECONDS}"
                )));
            }
            ToolRequest::Shell {
                command: step.command,
                restart: false,
                timeout_s: Some(seconds),
            }
        }
        "WRITE_FILE" => {
            let step: WriteFileStep = fields_of(fields).map_err(step_error)?;
            let content = match step.encoding.as_deref() {
                None | Some("utf-8") | Some("utf8") => step.content.into_bytes(),
                Some("base64") => base64::engine::general_purpose::STANDARD
                    .decode(step.content.trim())
                    .map_err(|e| step_error(format!("content is not base64: {e}")))?,
                Some(other) => {
                    return Err(step_error(format!(
                        "encoding must be utf-8 or base64, got {other:?}"
                    )));
                }
            };
            ToolRequest::WriteFile {
                path: step.path,
                size: content.len(),
                content,
            }
        }
        "SCREENSHOT" => {
            let _: EmptyStep = fields_of(fields).map_err(step_error)?;
            ToolRequest::Screenshot
        }
        "REQUEST_HUMAN" => {
            let step: QuestionStep = fields_of(fields).map_err(step_error)?;
            if step.question.trim().is_empty() {
                return Err(step_error("question must not be empty".into()));
            }
            ToolRequest::RequestHuman {
                question: step.question,
            }
        }
        "FINAL" => {
            let step: FinalStep = fields_of(fields).map_err(step_error)?;
            ToolRequest::Finish {
                answer: step.answer,
            }
        }
        desktop if DESKTOP_ACTIONS.contains(&desktop) => {
            fields.insert("action_type".into(), Value::String(desktop.to_string()));
            let parsed: DesktopAction = fields_of(fields).map_err(step_error)?;
            parsed.validate().map_err(|e| step_error(e.to_string()))?;
            for (x, y) in parsed.points() {
                let ok = match coordinates {
                    Coordinates::Pixels => x.is_finite() && y.is_finite() && x >= 0.0 && y >= 0.0,
                    Coordinates::Fraction => (0.0..=1.0).contains(&x) && (0.0..=1.0).contains(&y),
                };
                if !ok {
                    return Err(step_error(match coordinates {
                        Coordinates::Pixels => format!("({x}, {y}) is not a pixel position"),
                        Coordinates::Fraction => format!(
                            "({x}, {y}) is not a fraction of the screen: with \"coordinates\": \"fraction\" both must be between 0 and 1"
                        ),
                    }));
                }
            }
            ToolRequest::Desktop {
                actions: vec![parsed],
            }
        }
        other => {
            return Err(ScriptError::UnknownAction {
                index,
                action: other.to_string(),
            });
        }
    };
    Ok(Step {
        action: action.to_string(),
        request,
    })
}

/// A script action as it is sent for a `display` of (width, height) pixels: fractions turned
/// into pixels (rounded, inside the screen) and strokes made dense (see [`dense_strokes`]).
pub fn place(
    action: &DesktopAction,
    coordinates: Coordinates,
    (width, height): (u32, u32),
) -> DesktopAction {
    let placed = match coordinates {
        Coordinates::Pixels => action.clone(),
        Coordinates::Fraction => action.map_points(|x, y| {
            (
                (x * f64::from(width))
                    .round()
                    .min(f64::from(width.saturating_sub(1))),
                (y * f64::from(height))
                    .round()
                    .min(f64::from(height.saturating_sub(1))),
            )
        }),
    };
    dense_strokes(placed)
}

/// A `DRAG_PATH` with points at most [`crate::action::DRAG_SEGMENT_PX`] apart, so the
/// application under the pointer sees a continuous stroke.
fn dense_strokes(action: DesktopAction) -> DesktopAction {
    match action {
        DesktopAction::DragPath {
            path,
            button,
            step_ms,
        } => DesktopAction::DragPath {
            path: densify(&path),
            button,
            step_ms,
        },
        other => other,
    }
}

/// The script provider.
#[derive(Debug)]
pub struct ScriptModel {
    info: ModelInfo,
    script: Script,
}

impl ScriptModel {
    /// Loads and checks the script at `path`.
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let read_error = |e: std::io::Error| ScriptError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let metadata = std::fs::metadata(path).map_err(read_error)?;
        if !metadata.is_file() {
            return Err(ScriptError::Read {
                path: path.to_path_buf(),
                message: "not a regular file".into(),
            });
        }
        if metadata.len() > MAX_SCRIPT_BYTES {
            return Err(ScriptError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read_error)?;
        let script = Script::parse(&text)?;
        Ok(Self::new(path.display().to_string(), script))
    }

    pub fn new(name: String, script: Script) -> Self {
        Self {
            info: ModelInfo {
                provider: "script",
                model: name,
                observation_bounds: None,
            },
            script,
        }
    }

    pub fn script(&self) -> &Script {
        &self.script
    }
}

#[async_trait]
impl Model for ScriptModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn next_turn(&self, request: TurnRequest) -> Result<ModelTurn, ModelError> {
        // The next step is the number of steps already in the conversation, so a restart
        // goes on after the last step started (never running it twice).
        let index = request
            .items
            .iter()
            .filter(|item| matches!(item, Item::Assistant { provider, .. } if provider == "script"))
            .count();
        if let Some(Item::ToolResult(result)) = request
            .items
            .iter()
            .rev()
            .find(|item| matches!(item, Item::ToolResult(_)))
            && result.is_error
        {
            let failed = index.saturating_sub(1);
            let action = self
                .script
                .steps
                .get(failed)
                .map(|s| s.action.as_str())
                .unwrap_or("?");
            return Err(ModelError::Script(format!(
                "script step {failed} ({action}) failed: {}",
                result.text
            )));
        }
        let Some(step) = self.script.steps.get(index) else {
            return Ok(ModelTurn {
                text: Some(format!(
                    "The script {} has run all its {} steps.",
                    self.script.name.as_deref().unwrap_or(&self.info.model),
                    self.script.steps.len()
                )),
                reasoning: Vec::new(),
                calls: Vec::new(),
                usage: Usage::default(),
                stop: StopReason::EndTurn,
                raw: vec![json!({"script_end": true})],
                attempts: 0,
            });
        };
        let (width, height) = request.display;
        let request_for_screen = match &step.request {
            ToolRequest::Desktop { actions } => ToolRequest::Desktop {
                actions: actions
                    .iter()
                    .map(|a| place(a, self.script.coordinates, (width, height)))
                    .collect(),
            },
            other => other.clone(),
        };
        let id = format!("script-{index}");
        Ok(ModelTurn {
            text: None,
            reasoning: Vec::new(),
            calls: vec![ToolCall {
                id: id.clone(),
                channel: "script".into(),
                request: request_for_screen,
                safety_checks: Vec::new(),
            }],
            usage: Usage::default(),
            stop: StopReason::ToolUse,
            raw: vec![json!({"step": index, "action": step.action, "id": id})],
            attempts: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_step_parses() -> anyhow::Result<()> {
        let script = Script::parse(
            r#"{"name": "t", "coordinates": "fraction", "steps": [
                {"action": "SHELL", "command": "true", "timeout_s": 5, "comment": "hi"},
                {"action": "WRITE_FILE", "path": "/tmp/a", "content": "aGk=", "encoding": "base64"},
                {"action": "SCREENSHOT"},
                {"action": "DRAG_PATH", "path": [[0.1, 0.1], [0.9, 0.9]], "step_ms": 5},
                {"action": "HOTKEY", "keys": ["ctrl", "s"]},
                {"action": "WAIT_SETTLED", "timeout_ms": 1000},
                {"action": "REQUEST_HUMAN", "question": "ok?"},
                {"action": "FINAL", "answer": "done"}
            ]}"#,
        )?;
        assert_eq!(script.steps.len(), 8);
        assert!(matches!(
            script.steps[0].request,
            ToolRequest::Shell {
                timeout_s: Some(5.0),
                ..
            }
        ));
        assert!(
            matches!(&script.steps[1].request, ToolRequest::WriteFile { content, .. } if content == b"hi")
        );
        assert!(matches!(
            script.steps[7].request,
            ToolRequest::Finish { .. }
        ));
        Ok(())
    }

    fn error(text: &str) -> String {
        Script::parse(text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "parsed".into())
    }

    #[test]
    fn errors_name_the_step_and_the_action() {
        assert_eq!(
            error(r#"[{"action": "SCREENSHOT"}, {"action": "TELEPORT", "x": 1}]"#),
            "script step 1: unknown action \"TELEPORT\""
        );
        assert_eq!(
            error(r#"[{"action": "CLICK", "x": 1, "yy": 2}]"#),
            "script step 0 (CLICK): unknown field `yy`, expected one of `x`, `y`, `button`, `num_clicks`, `modifiers`"
        );
        assert!(
            error(r#"[{"action": "DRAG_PATH", "path": [[1, 2]]}]"#)
                .starts_with("script step 0 (DRAG_PATH): path:")
        );
        assert!(error(r#"[{"action": "SHELL"}]"#).contains("missing field `command`"));
        assert_eq!(error(r#"[{"x": 1}]"#), "script step 0: has no \"action\"");
        assert!(
            error(
                r#"{"coordinates": "fraction", "steps": [{"action": "MOVE_TO", "x": 640, "y": 1}]}"#
            )
            .contains("not a fraction")
        );
        assert_eq!(error("[]"), "script: has no steps");
        assert!(error("{").starts_with("script: not valid JSON"));
        assert!(error(r#"{"steps": [], "extra": 1}"#).contains("unknown field `extra`"));
    }

    #[test]
    fn the_shipped_example_parses() -> anyhow::Result<()> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/draw-red-triangle.json");
        let model = ScriptModel::load(&path)?;
        let script = model.script();
        assert!(script.steps.iter().any(|s| s.action == "DRAG_PATH"));
        assert!(script.steps.iter().any(|s| s.action == "FINAL"));
        Ok(())
    }
}
