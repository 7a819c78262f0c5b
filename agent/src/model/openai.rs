//! `openai:<model>`: the Responses API, streamed, with the computer tool.
//!
//! Wire format (<https://platform.openai.com/docs/guides/tools-computer-use>, API reference
//! of `computer_call` / `computer_call_output`):
//! - `POST {base}/responses` with `Authorization: Bearer`; `stream: true`.
//! - Tools: for `computer-use-preview*` models the preview tool
//!   `{"type": "computer_use_preview", "display_width", "display_height", "environment": "linux"}`
//!   (display size = the screenshot size sent; `truncation: "auto"` as that model requires);
//!   for other models (gpt-5.4 and later) the GA tool `{"type": "computer"}`.
//!   [`OpenAiOptions::computer_tool`] overrides the rule. `bash`, `text_editor` and
//!   `request_human` are function tools.
//! - `computer_call` items carry one `action` or a batched `actions` array (both accepted);
//!   they are answered with `computer_call_output` whose `output` is
//!   `{"type": "computer_screenshot", "image_url": "data:..."}` (the API reference's type; the
//!   guide's older samples write `input_image`).
//! - `pending_safety_checks` are never acknowledged by the adapter: the loop asks the person,
//!   and only their approval puts the checks in `acknowledged_safety_checks`.
//! - **Reasoning is passed back by including the items**, not with `previous_response_id`:
//!   requests use `store: false` and `include: ["reasoning.encrypted_content"]`, and every
//!   output item (reasoning with its encrypted content, messages, calls) is replayed unchanged.
//!   This keeps the conversation under the loop's control (images trimmed to the limit,
//!   restart from a checkpoint without server-side state).
//! - Stream events used: `response.output_item.done`, `response.completed`,
//!   `response.incomplete`, `response.failed`, `error`.
//! - A `computer_call_output` must carry a screenshot; for a call whose screenshot was dropped
//!   by the image limit a 1x1 placeholder is sent, and error texts for computer calls follow
//!   as a user message.
//! - OpenAI `scroll` amounts are pixels; they are converted to wheel notches (100 px each).

use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::tools::{self, BASH, EDITOR, REQUEST_HUMAN};
use super::{
    Model, ModelError, ModelInfo, ModelTurn, StopReason, ToolCall, ToolRequest, TurnRequest, Usage,
};
use crate::action::{Button, DesktopAction, densify};
use crate::gateway::{
    Gateway, GatewayError, HttpOptions, StreamAssembler, StreamError, sensitive_header,
};
use crate::secret::Secret;
use crate::sse::SseEvent;
use crate::tool_names::ToolNames;
use crate::transcript::{ImageRef, Item, SafetyCheck};

/// Pixels of an OpenAI scroll per wheel notch.
pub const PIXELS_PER_NOTCH: f64 = 100.0;

/// Which computer tool to offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiComputerTool {
    /// `computer_use_preview` with a declared display size.
    Preview,
    /// The GA `computer` tool.
    Ga,
}

impl OpenAiComputerTool {
    pub fn for_model(model: &str) -> Self {
        if model.starts_with("computer-use-preview") {
            OpenAiComputerTool::Preview
        } else {
            OpenAiComputerTool::Ga
        }
    }
}

/// Settings of the OpenAI adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiOptions {
    /// Overrides [`OpenAiComputerTool::for_model`].
    pub computer_tool: Option<OpenAiComputerTool>,
    /// `reasoning.summary` (`auto`, `concise`, `detailed`); not sent when `None`.
    pub reasoning_summary: Option<String>,
    /// Screenshot bounds for the preview tool (it was trained around 1024x768).
    pub preview_bounds: (u32, u32),
    /// Screenshot bounds for the GA tool.
    pub ga_bounds: (u32, u32),
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        Self {
            computer_tool: None,
            reasoning_summary: Some("concise".into()),
            preview_bounds: (1024, 768),
            ga_bounds: (1280, 800),
        }
    }
}

/// The OpenAI Responses adapter.
#[derive(Debug)]
pub struct OpenAiModel {
    info: ModelInfo,
    gateway: Gateway,
    url: String,
    headers: HeaderMap,
    options: OpenAiOptions,
    tool: OpenAiComputerTool,
    names: ToolNames,
}

impl OpenAiModel {
    pub fn new(
        model: &str,
        key: Secret,
        base_url: &str,
        options: OpenAiOptions,
        http: HttpOptions,
    ) -> Result<Self, GatewayError> {
        Gateway::check_url(base_url)?;
        let tool = options
            .computer_tool
            .unwrap_or_else(|| OpenAiComputerTool::for_model(model));
        let mut headers = HeaderMap::new();
        if let Some(value) = sensitive_header(&format!("Bearer {}", key.expose())) {
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let bounds = match tool {
            OpenAiComputerTool::Preview => options.preview_bounds,
            OpenAiComputerTool::Ga => options.ga_bounds,
        };
        Ok(Self {
            info: ModelInfo {
                provider: "openai",
                model: model.to_string(),
                observation_bounds: Some(bounds),
            },
            gateway: Gateway::new("openai", http, vec![key])?,
            url: format!("{}/responses", base_url.trim_end_matches('/')),
            headers,
            options,
            tool,
            names: ToolNames::new([BASH, EDITOR, REQUEST_HUMAN]),
        })
    }

    /// The request body for `request`.
    pub fn request_body(&self, request: &TurnRequest) -> Value {
        let computer = match self.tool {
            OpenAiComputerTool::Preview => json!({
                "type": "computer_use_preview",
                "display_width": request.display.0,
                "display_height": request.display.1,
                "environment": "linux",
            }),
            OpenAiComputerTool::Ga => json!({"type": "computer"}),
        };
        let function = |name: &str, description: &str, parameters: Value| {
            json!({
                "type": "function",
                "name": self.names.encode(name).unwrap_or(name),
                "description": description,
                "parameters": parameters,
            })
        };
        let mut body = json!({
            "model": self.info.model,
            "instructions": request.system,
            "input": self.render_input(request),
            "tools": [
                computer,
                function(BASH, tools::BASH_DESCRIPTION, tools::bash_schema()),
                function(EDITOR, tools::EDITOR_DESCRIPTION, tools::editor_schema()),
                function(REQUEST_HUMAN, tools::REQUEST_HUMAN_DESCRIPTION, tools::request_human_schema()),
            ],
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "truncation": "auto",
        });
        if let Some(summary) = &self.options.reasoning_summary {
            body["reasoning"] = json!({"summary": summary});
        }
        body
    }

    fn image_url(&self, image: &ImageRef, request: &TurnRequest) -> Option<String> {
        match request.images.get(&image.observation_id) {
            Some(bytes) if !image.dropped => Some(tools::data_url(&image.mime, bytes)),
            _ => None,
        }
    }

    fn render_input(&self, request: &TurnRequest) -> Vec<Value> {
        let mut input = Vec::new();
        // Texts for computer calls, sent as one user message after the outputs.
        let mut notes: Vec<String> = Vec::new();
        let flush = |input: &mut Vec<Value>, notes: &mut Vec<String>| {
            if !notes.is_empty() {
                input.push(json!({
                    "role": "user",
                    "content": [{"type": "input_text", "text": notes.join("\n")}],
                }));
                notes.clear();
            }
        };
        for item in &request.items {
            if !matches!(item, Item::ToolResult(_)) {
                flush(&mut input, &mut notes);
            }
            match item {
                Item::User { text, image } => {
                    let mut content = vec![json!({"type": "input_text", "text": text})];
                    if let Some(image) = image {
                        content.push(match self.image_url(image, request) {
                            Some(url) => json!({"type": "input_image", "image_url": url}),
                            None => json!({"type": "input_text", "text": tools::dropped_image_text(&image.observation_id)}),
                        });
                    }
                    input.push(json!({"role": "user", "content": content}));
                }
                Item::Assistant { raw, .. } => input.extend(raw.iter().cloned()),
                Item::ToolResult(result) if result.channel == "computer_call" => {
                    let url = result
                        .image
                        .as_ref()
                        .and_then(|image| self.image_url(image, request))
                        .unwrap_or_else(|| tools::data_url("image/png", tools::placeholder_png()));
                    let mut screenshot = json!({"type": "computer_screenshot", "image_url": url});
                    if self.tool == OpenAiComputerTool::Ga {
                        screenshot["detail"] = json!("original");
                    }
                    let mut output = json!({
                        "type": "computer_call_output",
                        "call_id": result.call_id,
                        "output": screenshot,
                    });
                    if !result.acknowledged_safety_checks.is_empty() {
                        output["acknowledged_safety_checks"] =
                            json!(result.acknowledged_safety_checks);
                    }
                    input.push(output);
                    if result.is_error || !result.text.is_empty() {
                        notes.push(format!("[{}] {}", result.call_id, result.text));
                    }
                }
                Item::ToolResult(result) => {
                    let mut text = result.text.clone();
                    if let Some(image) = &result.image
                        && image.dropped
                    {
                        text.push_str(&format!(
                            " {}",
                            tools::dropped_image_text(&image.observation_id)
                        ));
                    }
                    input.push(json!({
                        "type": "function_call_output",
                        "call_id": result.call_id,
                        "output": text,
                    }));
                    // Function outputs are text only: an image (a zoom) follows as a message.
                    if let Some(image) = &result.image
                        && let Some(url) = self.image_url(image, request)
                    {
                        input.push(json!({
                            "role": "user",
                            "content": [{"type": "input_image", "image_url": url}],
                        }));
                    }
                }
            }
        }
        flush(&mut input, &mut notes);
        input
    }

    fn decode_function(&self, item: &Value) -> ToolCall {
        let id = item
            .get("call_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let name = item.get("name").and_then(Value::as_str).unwrap_or_default();
        let arguments = item
            .get("arguments")
            .and_then(Value::as_str)
            .unwrap_or("{}");
        let request = match serde_json::from_str::<Value>(arguments) {
            Err(e) => ToolRequest::Invalid {
                tool: name.to_string(),
                message: format!("the arguments are not JSON: {e}"),
            },
            Ok(input) => match self.names.decode(name) {
                Some(BASH) => tools::parse_bash(&input),
                Some(EDITOR) => tools::parse_editor(&input),
                Some(REQUEST_HUMAN) => tools::parse_request_human(&input),
                _ => ToolRequest::Invalid {
                    tool: name.to_string(),
                    message: format!("there is no tool named {name:?}"),
                },
            },
        };
        ToolCall {
            id,
            channel: "function_call".into(),
            request,
            safety_checks: Vec::new(),
        }
    }

    fn turn(&self, reply: OpenAiReply, attempts: u32) -> ModelTurn {
        let mut text = String::new();
        let mut reasoning = Vec::new();
        let mut calls = Vec::new();
        for item in &reply.items {
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    for part in item
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(t) = part.get("text").and_then(Value::as_str) {
                            text.push_str(t);
                        }
                    }
                }
                Some("reasoning") => {
                    for part in item
                        .get("summary")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(t) = part.get("text").and_then(Value::as_str)
                            && !t.is_empty()
                        {
                            reasoning.push(t.to_string());
                        }
                    }
                }
                Some("computer_call") => calls.push(decode_computer_call(item)),
                Some("function_call") => calls.push(self.decode_function(item)),
                _ => {}
            }
        }
        let stop = if !calls.is_empty() {
            StopReason::ToolUse
        } else if reply.status.as_deref() == Some("incomplete") {
            match reply.incomplete_reason.as_deref() {
                Some("max_output_tokens") => StopReason::MaxTokens,
                other => StopReason::Other(other.unwrap_or("incomplete").to_string()),
            }
        } else {
            StopReason::EndTurn
        };
        ModelTurn {
            text: (!text.trim().is_empty()).then_some(text),
            reasoning,
            calls,
            usage: reply.usage,
            stop,
            raw: reply.items,
            attempts,
        }
    }
}

#[async_trait]
impl Model for OpenAiModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn next_turn(&self, request: TurnRequest) -> Result<ModelTurn, ModelError> {
        let body = self.request_body(&request);
        let report = self
            .gateway
            .post_stream(&self.url, &self.headers, &body, OpenAiAssembler::default)
            .await?;
        Ok(self.turn(report.output, report.attempts))
    }
}

/// A `computer_call` into a request: its `actions` (batched) or `action`.
fn decode_computer_call(item: &Value) -> ToolCall {
    let id = item
        .get("call_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let actions: Vec<Value> = match (item.get("actions"), item.get("action")) {
        (Some(Value::Array(list)), _) if !list.is_empty() => list.clone(),
        (_, Some(action)) => vec![action.clone()],
        _ => Vec::new(),
    };
    let safety_checks: Vec<SafetyCheck> = item
        .get("pending_safety_checks")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let request = decode_actions(&actions).unwrap_or_else(|message| ToolRequest::Invalid {
        tool: "computer".into(),
        message,
    });
    ToolCall {
        id,
        channel: "computer_call".into(),
        request,
        safety_checks,
    }
}

fn decode_actions(actions: &[Value]) -> Result<ToolRequest, String> {
    if actions.is_empty() {
        return Err("the computer call has no action".into());
    }
    let mut desktop = Vec::new();
    for action in actions {
        match action.get("type").and_then(Value::as_str) {
            Some("screenshot") => {}
            _ => desktop.extend(decode_action(action)?),
        }
    }
    if desktop.is_empty() {
        return Ok(ToolRequest::Screenshot);
    }
    Ok(ToolRequest::Desktop { actions: desktop })
}

fn coordinate(action: &Value, kind: &str) -> Result<(f64, f64), String> {
    match (
        action.get("x").and_then(Value::as_f64),
        action.get("y").and_then(Value::as_f64),
    ) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(format!("{kind} needs numeric x and y")),
    }
}

/// Modifier keys some computer actions carry in `keys`.
fn held_keys(action: &Value) -> Vec<String> {
    action
        .get("keys")
        .and_then(Value::as_array)
        .map(|keys| {
            keys.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn notches(pixels: f64) -> i32 {
    if pixels == 0.0 || !pixels.is_finite() {
        return 0;
    }
    let n = (pixels / PIXELS_PER_NOTCH).round() as i32;
    if n == 0 {
        pixels.signum() as i32
    } else {
        n.clamp(-100, 100)
    }
}

/// One OpenAI action into desktop actions.
fn decode_action(action: &Value) -> Result<Vec<DesktopAction>, String> {
    let kind = action
        .get("type")
        .and_then(Value::as_str)
        .ok_or("an action has no type")?;
    let wrap = |inner: Vec<DesktopAction>| {
        let keys = held_keys(action);
        let mut out: Vec<DesktopAction> = keys
            .iter()
            .map(|k| DesktopAction::KeyDown { key: k.clone() })
            .collect();
        out.extend(inner);
        out.extend(
            keys.iter()
                .rev()
                .map(|k| DesktopAction::KeyUp { key: k.clone() }),
        );
        out
    };
    Ok(match kind {
        "click" => {
            let (x, y) = coordinate(action, kind)?;
            let button = match action
                .get("button")
                .and_then(Value::as_str)
                .unwrap_or("left")
            {
                "left" => None,
                "right" => Some(Button::Right),
                "wheel" | "middle" => Some(Button::Middle),
                other => return Err(format!("mouse button {other:?} is not supported")),
            };
            let keys = held_keys(action);
            vec![DesktopAction::Click {
                x: Some(x),
                y: Some(y),
                button,
                num_clicks: None,
                modifiers: (!keys.is_empty()).then_some(keys),
            }]
        }
        "double_click" => {
            let (x, y) = coordinate(action, kind)?;
            let keys = held_keys(action);
            vec![DesktopAction::Click {
                x: Some(x),
                y: Some(y),
                button: None,
                num_clicks: Some(2),
                modifiers: (!keys.is_empty()).then_some(keys),
            }]
        }
        "move" => {
            let (x, y) = coordinate(action, kind)?;
            wrap(vec![DesktopAction::MoveTo { x, y }])
        }
        "scroll" => {
            let (x, y) = coordinate(action, kind)?;
            let dx = notches(
                action
                    .get("scroll_x")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0),
            );
            let dy = notches(
                action
                    .get("scroll_y")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0),
            );
            wrap(vec![DesktopAction::Scroll {
                x: Some(x),
                y: Some(y),
                dx,
                dy,
            }])
        }
        "drag" => {
            let points: Vec<[f64; 2]> = action
                .get("path")
                .and_then(Value::as_array)
                .ok_or("drag needs a path")?
                .iter()
                .map(|p| coordinate(p, "a drag point").map(|(x, y)| [x, y]))
                .collect::<Result<_, _>>()?;
            if points.len() < 2 {
                return Err("drag needs at least two points".into());
            }
            wrap(vec![DesktopAction::DragPath {
                path: densify(&points),
                button: None,
                step_ms: None,
            }])
        }
        "type" => {
            let text = action
                .get("text")
                .and_then(Value::as_str)
                .ok_or("type needs text")?;
            vec![DesktopAction::Typing {
                text: text.to_string(),
                use_clipboard: None,
            }]
        }
        "keypress" => {
            let keys = held_keys(action);
            match keys.len() {
                0 => return Err("keypress needs keys".into()),
                1 => vec![DesktopAction::Press {
                    key: keys[0].clone(),
                }],
                _ => vec![DesktopAction::Hotkey { keys }],
            }
        }
        "wait" => vec![DesktopAction::Wait {
            duration: action
                .get("ms")
                .and_then(Value::as_f64)
                .map(|ms| ms / 1000.0)
                .unwrap_or(1.0),
        }],
        other => return Err(format!("unknown computer action {other:?}")),
    })
}

/// A whole streamed response.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiReply {
    pub items: Vec<Value>,
    pub usage: Usage,
    pub status: Option<String>,
    pub incomplete_reason: Option<String>,
}

/// Rebuilds a response from the stream.
#[derive(Debug, Default)]
pub struct OpenAiAssembler {
    items: BTreeMap<u64, Value>,
    response: Option<Value>,
}

impl StreamAssembler for OpenAiAssembler {
    type Output = OpenAiReply;

    fn event(&mut self, event: SseEvent) -> Result<(), StreamError> {
        if event.data.trim() == "[DONE]" {
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| StreamError::Protocol(format!("an event is not JSON: {e}")))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        match kind {
            "response.output_item.done" => {
                let index = data
                    .get("output_index")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.items.keys().next_back().map(|k| k + 1).unwrap_or(0));
                if let Some(item) = data.get("item") {
                    self.items.insert(index, item.clone());
                }
            }
            "response.completed" | "response.incomplete" => {
                self.response = data.get("response").cloned();
            }
            "response.failed" => {
                let error = data
                    .pointer("/response/error")
                    .cloned()
                    .unwrap_or(Value::Null);
                return Err(StreamError::Provider {
                    kind: error
                        .get("code")
                        .and_then(Value::as_str)
                        .unwrap_or("response_failed")
                        .to_string(),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                });
            }
            "error" => {
                let error = data.get("error").unwrap_or(&data);
                return Err(StreamError::Provider {
                    kind: error
                        .get("code")
                        .or_else(|| error.get("type"))
                        .and_then(Value::as_str)
                        .filter(|k| *k != "error")
                        .unwrap_or("error")
                        .to_string(),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<OpenAiReply, StreamError> {
        let Some(response) = self.response else {
            return Err(StreamError::Incomplete(
                "the stream ended before response.completed".into(),
            ));
        };
        let items = match response.get("output").and_then(Value::as_array) {
            Some(output) if !output.is_empty() => output.clone(),
            _ => self.items.into_values().collect(),
        };
        let usage = response.get("usage").cloned().unwrap_or(Value::Null);
        let number = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
        Ok(OpenAiReply {
            items,
            usage: Usage {
                input_tokens: number("/input_tokens"),
                output_tokens: number("/output_tokens"),
                cache_read_input_tokens: number("/input_tokens_details/cached_tokens"),
                cache_creation_input_tokens: 0,
                reasoning_tokens: number("/output_tokens_details/reasoning_tokens"),
            },
            status: response
                .get("status")
                .and_then(Value::as_str)
                .map(str::to_string),
            incomplete_reason: response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_batched_actions_decode() {
        let single = decode_computer_call(&json!({
            "type": "computer_call", "call_id": "c1",
            "action": {"type": "click", "button": "left", "x": 10, "y": 20},
            "pending_safety_checks": []
        }));
        assert_eq!(single.id, "c1");
        assert!(matches!(&single.request, ToolRequest::Desktop { actions } if actions.len() == 1));

        let batched = decode_computer_call(&json!({
            "type": "computer_call", "call_id": "c2",
            "actions": [
                {"type": "move", "x": 1, "y": 2},
                {"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 100, "y": 0}]},
                {"type": "keypress", "keys": ["CTRL", "S"]},
                {"type": "scroll", "x": 5, "y": 5, "scroll_x": 0, "scroll_y": 250}
            ],
            "pending_safety_checks": [{"id": "sc1", "code": "malicious_instructions", "message": "careful"}]
        }));
        let ToolRequest::Desktop { actions } = &batched.request else {
            panic!("not desktop: {:?}", batched.request);
        };
        assert_eq!(actions.len(), 4);
        assert!(matches!(&actions[1], DesktopAction::DragPath { path, .. } if path.len() == 6));
        assert!(matches!(&actions[2], DesktopAction::Hotkey { keys } if keys.len() == 2));
        assert!(matches!(&actions[3], DesktopAction::Scroll { dy: 3, .. }));
        assert_eq!(batched.safety_checks.len(), 1);
        assert_eq!(
            batched.safety_checks[0].code.as_deref(),
            Some("malicious_instructions")
        );

        let screenshot = decode_computer_call(&json!({
            "type": "computer_call", "call_id": "c3", "action": {"type": "screenshot"}
        }));
        assert_eq!(screenshot.request, ToolRequest::Screenshot);
        let bad = decode_computer_call(&json!({
            "type": "computer_call", "call_id": "c4", "action": {"type": "click", "button": "back", "x": 1, "y": 1}
        }));
        assert!(matches!(bad.request, ToolRequest::Invalid { .. }));
    }

    #[test]
    fn scroll_pixels_become_notches() {
        assert_eq!(notches(0.0), 0);
        assert_eq!(notches(30.0), 1);
        assert_eq!(notches(-30.0), -1);
        assert_eq!(notches(260.0), 3);
    }
}
