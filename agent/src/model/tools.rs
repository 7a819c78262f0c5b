//! What the adapters share about tools: the internal tool names, their descriptions and JSON
//! schemas (for function-calling providers), and the decoding of tool inputs into
//! [`ToolRequest`]s.
//!
//! The computer vocabulary decoded here is Anthropic's computer tool
//! (<https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool>):
//! `screenshot`, `left_click`, `right_click`, `middle_click`, `double_click`, `triple_click`,
//! `mouse_move`, `left_click_drag`, `left_mouse_down`, `left_mouse_up`, `scroll`
//! (`scroll_direction` + `scroll_amount` in wheel notches), `type`, `key` (xdotool-style chord),
//! `hold_key`, `wait`, `cursor_position`, `zoom` (`region`), plus `drag` (`path`) for
//! function-calling models, where a whole stroke is one call.

use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Value, json};

use super::ToolRequest;
use crate::action::{Button, DesktopAction, densify, straight_stroke};
use crate::computer::EditCommand;

pub const COMPUTER: &str = "computer";
pub const BASH: &str = "bash";
pub const EDITOR: &str = "text_editor";
pub const REQUEST_HUMAN: &str = "request_human";

pub const REQUEST_HUMAN_DESCRIPTION: &str = "Ask the person watching this computer a question and wait for their answer. Use it when you need information, a decision or a permission that only they can give (a password, a choice between options, a confirmation before something irreversible). Do not use it for things you can find out on the screen.";
pub const BASH_DESCRIPTION: &str = "Run a shell command line in a persistent bash session in the sandbox (the working directory and environment carry over). Returns the output and exit code. Set restart to true to start a fresh session. Start GUI programs in the background (`mtpaint >/dev/null 2>&1 &`).";
pub const EDITOR_DESCRIPTION: &str = "View, create and edit text files in the sandbox: view (a file or a directory, optional view_range [start, end] 1-based with -1 for the end), create (file_text), str_replace (old_str must occur exactly once; new_str replaces it), insert (new_str after line insert_line, 0 for the top).";
pub const COMPUTER_DESCRIPTION: &str = "Use the mouse and keyboard of the Linux desktop and take screenshots. Coordinates are pixels of the latest screenshot. Actions: screenshot; left_click, right_click, middle_click, double_click, triple_click (coordinate, optional text = modifier keys such as \"shift\"); mouse_move (coordinate); left_click_drag (start_coordinate to coordinate, one straight stroke); drag (path = [[x, y], ...], one stroke through every point, for curves and shapes); left_mouse_down, left_mouse_up; scroll (coordinate, scroll_direction up/down/left/right, scroll_amount in wheel notches); type (text); key (text = a key or chord like \"ctrl+s\" or \"Return\"); hold_key (text, duration seconds); wait (duration seconds); cursor_position; zoom (region = [x0, y0, x1, y1]).";

/// `{question}`.
pub fn request_human_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question for the person, self-contained."}
        },
        "required": ["question"]
    })
}

/// `{command, restart}`.
pub fn bash_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line to run."},
            "restart": {"type": "boolean", "description": "Start a fresh shell session."}
        },
        "required": ["command"]
    })
}

/// Anthropic's text-editor input as a JSON schema.
pub fn editor_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string", "description": "Absolute path of the file or directory."},
            "file_text": {"type": "string"},
            "old_str": {"type": "string"},
            "new_str": {"type": "string"},
            "insert_line": {"type": "integer"},
            "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
        },
        "required": ["command", "path"]
    })
}

/// The computer tool as a function, for function-calling models.
pub fn computer_schema() -> Value {
    let point = json!({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2});
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": [
                "screenshot", "left_click", "right_click", "middle_click", "double_click",
                "triple_click", "mouse_move", "left_click_drag", "drag", "left_mouse_down",
                "left_mouse_up", "scroll", "type", "key", "hold_key", "wait", "cursor_position",
                "zoom"
            ]},
            "coordinate": point,
            "start_coordinate": point,
            "path": {"type": "array", "items": point},
            "text": {"type": "string"},
            "scroll_direction": {"type": "string", "enum": ["up", "down", "left", "right"]},
            "scroll_amount": {"type": "integer", "minimum": 1},
            "duration": {"type": "number"},
            "region": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4}
        },
        "required": ["action"]
    })
}

fn invalid(tool: &str, message: impl Into<String>) -> ToolRequest {
    ToolRequest::Invalid {
        tool: tool.to_string(),
        message: message.into(),
    }
}

fn string_field<'a>(input: &'a Value, field: &str) -> Option<&'a str> {
    input.get(field).and_then(Value::as_str)
}

/// `{question}` into a request.
pub fn parse_request_human(input: &Value) -> ToolRequest {
    match string_field(input, "question").map(str::trim) {
        Some(question) if !question.is_empty() => ToolRequest::RequestHuman {
            question: question.to_string(),
        },
        _ => invalid(
            REQUEST_HUMAN,
            "question is required and must be a non-empty string",
        ),
    }
}

/// `{command, restart}` into a request.
pub fn parse_bash(input: &Value) -> ToolRequest {
    let restart = input
        .get("restart")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match string_field(input, "command") {
        Some(command) if !command.trim().is_empty() => ToolRequest::Shell {
            command: command.to_string(),
            restart,
            timeout_s: None,
        },
        _ if restart => ToolRequest::Shell {
            command: String::new(),
            restart,
            timeout_s: None,
        },
        _ => invalid(BASH, "command is required and must be a non-empty string"),
    }
}

/// The text-editor input into a request.
pub fn parse_editor(input: &Value) -> ToolRequest {
    let Some(path) = string_field(input, "path").map(str::to_string) else {
        return invalid(EDITOR, "path is required");
    };
    let text = |field: &str| string_field(input, field).map(str::to_string);
    let command = match string_field(input, "command") {
        Some("view") => {
            let range = input
                .get("view_range")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_i64).collect::<Vec<_>>());
            let view_range = match range.as_deref() {
                None => None,
                Some([start, end]) => Some([*start, *end]),
                Some(_) => return invalid(EDITOR, "view_range must be [start, end]"),
            };
            EditCommand::View { path, view_range }
        }
        Some("create") => match text("file_text") {
            Some(file_text) => EditCommand::Create { path, file_text },
            None => return invalid(EDITOR, "file_text is required by create"),
        },
        Some("str_replace") => match text("old_str") {
            Some(old_str) => EditCommand::StrReplace {
                path,
                old_str,
                new_str: text("new_str").unwrap_or_default(),
            },
            None => return invalid(EDITOR, "old_str is required by str_replace"),
        },
        Some("insert") => {
            let line = input.get("insert_line").and_then(Value::as_u64);
            match (line, text("new_str").or_else(|| text("insert_text"))) {
                (Some(insert_line), Some(new_str)) => EditCommand::Insert {
                    path,
                    insert_line,
                    new_str,
                },
                _ => return invalid(EDITOR, "insert needs insert_line and new_str"),
            }
        }
        Some("undo_edit") => EditCommand::UndoEdit { path },
        Some(other) => return invalid(EDITOR, format!("unknown command {other:?}")),
        None => return invalid(EDITOR, "command is required"),
    };
    ToolRequest::Edit { command }
}

fn point(input: &Value, field: &str) -> Result<Option<(f64, f64)>, String> {
    match input.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) if items.len() == 2 => {
            match (items[0].as_f64(), items[1].as_f64()) {
                (Some(x), Some(y)) => Ok(Some((x, y))),
                _ => Err(format!("{field} must be [x, y] numbers")),
            }
        }
        Some(_) => Err(format!("{field} must be [x, y]")),
    }
}

fn required_point(input: &Value, field: &str, action: &str) -> Result<(f64, f64), String> {
    point(input, field)?.ok_or_else(|| format!("{field} is required by {action}"))
}

/// Modifier keys given as `text` on clicks and scrolls (`"shift"`, `"ctrl+shift"`).
fn modifiers(input: &Value) -> Vec<String> {
    string_field(input, "text")
        .map(|t| {
            t.split('+')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Wraps `actions` in key presses of `modifiers` (held around them).
fn held(modifiers: &[String], actions: Vec<DesktopAction>) -> Vec<DesktopAction> {
    let mut out: Vec<DesktopAction> = modifiers
        .iter()
        .map(|k| DesktopAction::KeyDown { key: k.clone() })
        .collect();
    out.extend(actions);
    out.extend(
        modifiers
            .iter()
            .rev()
            .map(|k| DesktopAction::KeyUp { key: k.clone() }),
    );
    out
}

fn duration(input: &Value, default: f64) -> f64 {
    input
        .get("duration")
        .and_then(Value::as_f64)
        .unwrap_or(default)
}

/// An Anthropic-style computer input into a request. Errors become [`ToolRequest::Invalid`]
/// answered to the model.
pub fn parse_computer(input: &Value) -> ToolRequest {
    match computer_actions(input) {
        Ok(request) => request,
        Err(message) => invalid(COMPUTER, message),
    }
}

fn click(input: &Value, button: Button, num_clicks: u32) -> Result<Vec<DesktopAction>, String> {
    let at = point(input, "coordinate")?;
    let modifiers = modifiers(input);
    Ok(vec![DesktopAction::Click {
        x: at.map(|p| p.0),
        y: at.map(|p| p.1),
        button: (button != Button::Left).then_some(button),
        num_clicks: (num_clicks != 1).then_some(num_clicks),
        modifiers: (!modifiers.is_empty()).then_some(modifiers),
    }])
}

fn computer_actions(input: &Value) -> Result<ToolRequest, String> {
    let Some(action) = string_field(input, "action") else {
        return Err("action is required".into());
    };
    let desktop = |actions: Vec<DesktopAction>| Ok(ToolRequest::Desktop { actions });
    let text = || {
        string_field(input, "text")
            .map(str::to_string)
            .ok_or_else(|| format!("text is required by {action}"))
    };
    match action {
        "screenshot" => Ok(ToolRequest::Screenshot),
        "left_click" => desktop(click(input, Button::Left, 1)?),
        "right_click" => desktop(click(input, Button::Right, 1)?),
        "middle_click" => desktop(click(input, Button::Middle, 1)?),
        "double_click" => desktop(click(input, Button::Left, 2)?),
        "triple_click" => desktop(click(input, Button::Left, 3)?),
        "mouse_move" => {
            let (x, y) = required_point(input, "coordinate", action)?;
            desktop(vec![DesktopAction::MoveTo { x, y }])
        }
        "left_click_drag" => {
            let start = required_point(input, "start_coordinate", action)?;
            let end = required_point(input, "coordinate", action)?;
            desktop(vec![DesktopAction::DragPath {
                path: straight_stroke(start, end),
                button: None,
                step_ms: None,
            }])
        }
        "drag" => {
            let Some(points) = input.get("path").and_then(Value::as_array) else {
                return Err("path is required by drag".into());
            };
            let mut path = Vec::with_capacity(points.len());
            for p in points {
                match p.as_array().map(|a| a.as_slice()) {
                    Some([x, y]) => match (x.as_f64(), y.as_f64()) {
                        (Some(x), Some(y)) => path.push([x, y]),
                        _ => return Err("path points must be [x, y] numbers".into()),
                    },
                    _ => return Err("path points must be [x, y]".into()),
                }
            }
            if path.len() < 2 {
                return Err("path needs at least two points".into());
            }
            desktop(vec![DesktopAction::DragPath {
                path: densify(&path),
                button: None,
                step_ms: None,
            }])
        }
        "left_mouse_down" | "left_mouse_up" => {
            let mut actions = Vec::new();
            if let Some((x, y)) = point(input, "coordinate")? {
                actions.push(DesktopAction::MoveTo { x, y });
            }
            actions.push(if action == "left_mouse_down" {
                DesktopAction::MouseDown { button: None }
            } else {
                DesktopAction::MouseUp { button: None }
            });
            desktop(actions)
        }
        "scroll" => {
            let at = point(input, "coordinate")?;
            let amount = input
                .get("scroll_amount")
                .and_then(Value::as_i64)
                .unwrap_or(3)
                .clamp(1, 100) as i32;
            let (dx, dy) = match string_field(input, "scroll_direction") {
                Some("up") => (0, -amount),
                Some("down") => (0, amount),
                Some("left") => (-amount, 0),
                Some("right") => (amount, 0),
                _ => return Err("scroll_direction must be up, down, left or right".into()),
            };
            let scroll = DesktopAction::Scroll {
                x: at.map(|p| p.0),
                y: at.map(|p| p.1),
                dx,
                dy,
            };
            desktop(held(&modifiers(input), vec![scroll]))
        }
        "type" => desktop(vec![DesktopAction::Typing {
            text: text()?,
            use_clipboard: None,
        }]),
        "key" => {
            // xdotool's `key` takes several chords separated by spaces.
            let keys = text()?;
            let presses: Vec<DesktopAction> = keys
                .split_whitespace()
                .map(|k| DesktopAction::Press { key: k.to_string() })
                .collect();
            if presses.is_empty() {
                return Err("text must name a key".into());
            }
            desktop(presses)
        }
        "hold_key" => {
            let key = text()?;
            let seconds = duration(input, 1.0);
            desktop(vec![
                DesktopAction::KeyDown { key: key.clone() },
                DesktopAction::Wait { duration: seconds },
                DesktopAction::KeyUp { key },
            ])
        }
        "wait" => desktop(vec![DesktopAction::Wait {
            duration: duration(input, 1.0),
        }]),
        "cursor_position" => desktop(vec![DesktopAction::CursorPosition {}]),
        "zoom" => {
            let region: Option<Vec<f64>> = input
                .get("region")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_f64).collect());
            match region.as_deref() {
                Some([x0, y0, x1, y1]) => Ok(ToolRequest::Zoom {
                    region: [*x0, *y0, *x1, *y1],
                }),
                _ => Err("region must be [x0, y0, x1, y1]".into()),
            }
        }
        other => Err(format!("unknown action {other:?}")),
    }
}

/// `data:<mime>;base64,<bytes>`.
pub fn data_url(mime: &str, bytes: &[u8]) -> String {
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A 1x1 grey PNG, sent where a provider demands an image that was dropped.
pub fn placeholder_png() -> &'static [u8] {
    static PNG: OnceLock<Vec<u8>> = OnceLock::new();
    PNG.get_or_init(|| {
        let mut out = Vec::new();
        let pixel = image::RgbImage::from_pixel(1, 1, image::Rgb([128, 128, 128]));
        // Encoding one pixel into memory cannot fail; an empty image is the harmless fallback.
        let _ = image::DynamicImage::ImageRgb8(pixel)
            .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png);
        out
    })
}

/// What the model is told in place of a dropped screenshot.
pub fn dropped_image_text(observation_id: &str) -> String {
    format!("[screenshot {observation_id} omitted to save context]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(request: ToolRequest) -> Vec<DesktopAction> {
        match request {
            ToolRequest::Desktop { actions } => actions,
            other => panic!("not desktop actions: {other:?}"),
        }
    }

    #[test]
    fn clicks_with_modifiers_and_counts() {
        let got = actions(parse_computer(
            &json!({"action": "double_click", "coordinate": [10, 20], "text": "shift"}),
        ));
        assert_eq!(
            got,
            vec![DesktopAction::Click {
                x: Some(10.0),
                y: Some(20.0),
                button: None,
                num_clicks: Some(2),
                modifiers: Some(vec!["shift".into()]),
            }]
        );
    }

    #[test]
    fn a_drag_is_one_dense_stroke() {
        let got = actions(parse_computer(
            &json!({"action": "left_click_drag", "start_coordinate": [0, 0], "coordinate": [100, 0]}),
        ));
        assert_eq!(got.len(), 1);
        assert!(matches!(&got[0], DesktopAction::DragPath { path, .. } if path.len() == 6));
        let curve = actions(parse_computer(
            &json!({"action": "drag", "path": [[0, 0], [50, 0], [50, 50]]}),
        ));
        assert!(matches!(&curve[0], DesktopAction::DragPath { path, .. } if path.len() >= 3));
    }

    #[test]
    fn scroll_is_in_notches_and_holds_modifiers() {
        let got = actions(parse_computer(&json!({
            "action": "scroll", "coordinate": [5, 5], "scroll_direction": "up",
            "scroll_amount": 2, "text": "ctrl"
        })));
        assert_eq!(got.len(), 3);
        assert!(matches!(
            &got[1],
            DesktopAction::Scroll { dy: -2, dx: 0, .. }
        ));
    }

    #[test]
    fn bad_inputs_become_invalid_requests() {
        for input in [
            json!({}),
            json!({"action": "fly"}),
            json!({"action": "mouse_move"}),
            json!({"action": "left_click", "coordinate": "here"}),
            json!({"action": "zoom", "region": [1, 2]}),
        ] {
            assert!(
                matches!(parse_computer(&input), ToolRequest::Invalid { .. }),
                "{input}"
            );
        }
        assert!(matches!(
            parse_bash(&json!({})),
            ToolRequest::Invalid { .. }
        ));
        assert!(matches!(
            parse_editor(&json!({"command": "view"})),
            ToolRequest::Invalid { .. }
        ));
        assert!(matches!(
            parse_request_human(&json!({"question": " "})),
            ToolRequest::Invalid { .. }
        ));
    }

    #[test]
    fn placeholder_is_a_png() {
        assert!(placeholder_png().starts_with(b"\x89PNG"));
    }
}
