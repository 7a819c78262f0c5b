//! `anthropic:<model>`: the Messages API, streamed, with Anthropic's native tools.
//!
//! Wire format (<https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool>,
//! <https://docs.claude.com/en/docs/build-with-claude/streaming>):
//! - `POST {base}/v1/messages` with `x-api-key`, `anthropic-version: 2023-06-01` and the
//!   computer-use beta header; `stream: true`.
//! - Tools: the computer tool `computer_20251124` (beta `computer-use-2025-11-24`, with
//!   `enable_zoom` and the `zoom` action) or `computer_20250124` (beta
//!   `computer-use-2025-01-24`), both with `display_width_px`/`display_height_px` equal to the
//!   screenshot size sent; `bash_20250124`; the text editor `text_editor_20250728` named
//!   `str_replace_based_edit_tool` (Claude 4) or `text_editor_20250124` named
//!   `str_replace_editor` (Claude 3.7); and `request_human` as a custom tool.
//! - **Which computer tool version** ([`ComputerToolVersion::for_model`]): `computer_20251124`
//!   for Opus 4.5 and later Opus models, and for every model of version 4.6 or later (Opus 4.6,
//!   Sonnet 4.6, Opus 4.7); `computer_20250124` for older versions (Sonnet 4.5, Haiku 4.5,
//!   Opus 4.1, Sonnet 4, Claude 3.7). A name that cannot be read gets the newest version.
//!   [`AnthropicOptions::computer_tool`] overrides the rule.
//! - Stream events: `message_start` (input usage), `content_block_start`,
//!   `content_block_delta` (`text_delta`, `input_json_delta`, `thinking_delta`,
//!   `signature_delta`), `content_block_stop`, `message_delta` (stop reason, output usage),
//!   `message_stop`, `ping`, `error`.
//! - The assistant's content blocks are sent back unchanged on the next turn, `thinking` and
//!   `redacted_thinking` blocks with their signatures included, as the API requires during tool
//!   use; every `tool_use` id is answered by exactly one `tool_result`.
//! - Screenshots are downscaled to fit 1280x800 by default: under the 1568-pixel long edge and
//!   1.15-megapixel limits above which the API downsamples (and coordinates would drift).

use std::collections::BTreeMap;

use async_trait::async_trait;
use base64::Engine;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::tools::{self, BASH, COMPUTER, REQUEST_HUMAN};
use super::{
    Model, ModelError, ModelInfo, ModelTurn, StopReason, ToolCall, ToolRequest, TurnRequest, Usage,
};
use crate::gateway::{
    Gateway, GatewayError, HttpOptions, StreamAssembler, StreamError, insert_header,
    sensitive_header,
};
use crate::secret::Secret;
use crate::sse::SseEvent;
use crate::tool_names::ToolNames;
use crate::transcript::{ImageRef, Item};

/// Anthropic's API version header.
pub const API_VERSION: &str = "2023-06-01";

/// The two computer tool versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputerToolVersion {
    /// `computer_20250124`, beta `computer-use-2025-01-24`.
    V20250124,
    /// `computer_20251124`, beta `computer-use-2025-11-24`; adds `zoom`.
    V20251124,
}

impl ComputerToolVersion {
    pub fn tool_type(self) -> &'static str {
        match self {
            ComputerToolVersion::V20250124 => "computer_20250124",
            ComputerToolVersion::V20251124 => "computer_20251124",
        }
    }

    pub fn beta(self) -> &'static str {
        match self {
            ComputerToolVersion::V20250124 => "computer-use-2025-01-24",
            ComputerToolVersion::V20251124 => "computer-use-2025-11-24",
        }
    }

    /// The version the model supports (see the module documentation for the rule).
    pub fn for_model(model: &str) -> Self {
        match model_version(model) {
            Some((family, major, minor)) => {
                let version = (major, minor);
                if version >= (4, 6) || (family == Some("opus") && version >= (4, 5)) {
                    ComputerToolVersion::V20251124
                } else {
                    ComputerToolVersion::V20250124
                }
            }
            None => ComputerToolVersion::V20251124,
        }
    }
}

/// The family (`opus`, `sonnet`, `haiku`) and version of a Claude model id such as
/// `claude-opus-4-5-20251101`, `claude-sonnet-4-20250514` or `claude-3-7-sonnet-20250219`.
fn model_version(model: &str) -> Option<(Option<&'static str>, u32, u32)> {
    let rest = model.strip_prefix("claude-")?;
    let mut family = None;
    let mut numbers = Vec::new();
    for part in rest.split(['-', '.', '@']) {
        match part {
            "opus" => family = Some("opus"),
            "sonnet" => family = Some("sonnet"),
            "haiku" => family = Some("haiku"),
            // Dates (8 digits) are not version numbers.
            p if !p.is_empty() && p.len() <= 2 && p.bytes().all(|b| b.is_ascii_digit()) => {
                numbers.push(p.parse::<u32>().ok()?);
            }
            _ => {}
        }
    }
    let major = *numbers.first()?;
    Some((family, major, numbers.get(1).copied().unwrap_or(0)))
}

/// Settings of the Anthropic adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnthropicOptions {
    pub max_tokens: u32,
    /// Extended thinking with this budget (tokens); off when `None`.
    pub thinking_budget: Option<u32>,
    /// Overrides [`ComputerToolVersion::for_model`].
    pub computer_tool: Option<ComputerToolVersion>,
    /// Offer the `zoom` action (computer_20251124 only).
    pub enable_zoom: bool,
    /// Screenshots are downscaled to fit this box.
    pub observation_bounds: (u32, u32),
}

impl Default for AnthropicOptions {
    fn default() -> Self {
        Self {
            max_tokens: 4096,
            thinking_budget: None,
            computer_tool: None,
            enable_zoom: true,
            observation_bounds: (1280, 800),
        }
    }
}

/// The Anthropic adapter.
#[derive(Debug)]
pub struct AnthropicModel {
    info: ModelInfo,
    gateway: Gateway,
    url: String,
    headers: HeaderMap,
    options: AnthropicOptions,
    version: ComputerToolVersion,
    /// `text_editor_20250728` + `str_replace_based_edit_tool`, or the 3.7 pair.
    editor: (&'static str, &'static str),
    names: ToolNames,
}

impl AnthropicModel {
    pub fn new(
        model: &str,
        key: Secret,
        base_url: &str,
        options: AnthropicOptions,
        http: HttpOptions,
    ) -> Result<Self, GatewayError> {
        Gateway::check_url(base_url)?;
        let version = options
            .computer_tool
            .unwrap_or_else(|| ComputerToolVersion::for_model(model));
        let editor = match model_version(model) {
            Some((_, 3, _)) => ("text_editor_20250124", "str_replace_editor"),
            _ => ("text_editor_20250728", "str_replace_based_edit_tool"),
        };
        let mut headers = HeaderMap::new();
        if let Some(value) = sensitive_header(key.expose()) {
            headers.insert("x-api-key", value);
        }
        insert_header(&mut headers, "anthropic-version", API_VERSION);
        insert_header(&mut headers, "anthropic-beta", version.beta());
        Ok(Self {
            info: ModelInfo {
                provider: "anthropic",
                model: model.to_string(),
                observation_bounds: Some(options.observation_bounds),
            },
            gateway: Gateway::new("anthropic", http, vec![key])?,
            url: format!("{}/v1/messages", base_url.trim_end_matches('/')),
            headers,
            options,
            version,
            editor,
            names: ToolNames::new([REQUEST_HUMAN]),
        })
    }

    /// The computer tool version in use.
    pub fn computer_tool(&self) -> ComputerToolVersion {
        self.version
    }

    /// The request body for `request`.
    pub fn request_body(&self, request: &TurnRequest) -> Value {
        let mut computer = json!({
            "type": self.version.tool_type(),
            "name": COMPUTER,
            "display_width_px": request.display.0,
            "display_height_px": request.display.1,
        });
        if self.version == ComputerToolVersion::V20251124 && self.options.enable_zoom {
            computer["enable_zoom"] = json!(true);
        }
        let tools = json!([
            computer,
            {"type": "bash_20250124", "name": BASH},
            {"type": self.editor.0, "name": self.editor.1},
            {
                "name": self.names.encode(REQUEST_HUMAN).unwrap_or(REQUEST_HUMAN),
                "description": tools::REQUEST_HUMAN_DESCRIPTION,
                "input_schema": tools::request_human_schema(),
            }
        ]);
        let mut max_tokens = self.options.max_tokens;
        let mut body = json!({
            "model": self.info.model,
            "system": request.system,
            "messages": render_messages(request),
            "tools": tools,
            "stream": true,
        });
        if let Some(budget) = self.options.thinking_budget {
            if max_tokens <= budget {
                max_tokens = budget + 4096;
            }
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body["max_tokens"] = json!(max_tokens);
        body
    }

    fn decode_call(&self, block: &Value) -> ToolCall {
        let id = block
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let name = block
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
        let request = if name == COMPUTER {
            tools::parse_computer(&input)
        } else if name == BASH {
            tools::parse_bash(&input)
        } else if name == self.editor.1 {
            tools::parse_editor(&input)
        } else if self.names.decode(name) == Some(REQUEST_HUMAN) {
            tools::parse_request_human(&input)
        } else {
            ToolRequest::Invalid {
                tool: name.to_string(),
                message: format!("there is no tool named {name:?}"),
            }
        };
        ToolCall {
            id,
            channel: "tool_use".into(),
            request,
            safety_checks: Vec::new(),
        }
    }

    fn turn(&self, reply: AnthropicReply, attempts: u32) -> ModelTurn {
        let mut text = String::new();
        let mut reasoning = Vec::new();
        let mut calls = Vec::new();
        for block in &reply.blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    if let Some(t) = block.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                }
                Some("thinking") => {
                    if let Some(t) = block.get("thinking").and_then(Value::as_str)
                        && !t.is_empty()
                    {
                        reasoning.push(t.to_string());
                    }
                }
                Some("tool_use") => calls.push(self.decode_call(block)),
                _ => {}
            }
        }
        let stop = match reply.stop_reason.as_deref() {
            Some("end_turn") | Some("stop_sequence") | None => StopReason::EndTurn,
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_string()),
        };
        ModelTurn {
            text: (!text.trim().is_empty()).then_some(text),
            reasoning,
            calls,
            usage: reply.usage,
            stop,
            raw: reply.blocks,
            attempts,
        }
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn next_turn(&self, request: TurnRequest) -> Result<ModelTurn, ModelError> {
        let body = self.request_body(&request);
        let report = self
            .gateway
            .post_stream(&self.url, &self.headers, &body, AnthropicAssembler::default)
            .await?;
        Ok(self.turn(report.output, report.attempts))
    }
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn image_block(image: &ImageRef, request: &TurnRequest) -> Value {
    match request.images.get(&image.observation_id) {
        Some(bytes) if !image.dropped => json!({
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": image.mime,
                "data": base64::engine::general_purpose::STANDARD.encode(bytes),
            }
        }),
        _ => text_block(&tools::dropped_image_text(&image.observation_id)),
    }
}

/// The transcript as Messages API messages: consecutive blocks of one role share a message.
fn render_messages(request: &TurnRequest) -> Vec<Value> {
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match messages.last_mut() {
        Some((last, blocks)) if *last == role => blocks.push(block),
        _ => messages.push((role, vec![block])),
    };
    for item in &request.items {
        match item {
            Item::User { text, image } => {
                if !text.is_empty() {
                    push("user", text_block(text));
                }
                if let Some(image) = image {
                    push("user", image_block(image, request));
                }
            }
            Item::Assistant { raw, .. } => {
                for block in raw {
                    push("assistant", block.clone());
                }
            }
            Item::ToolResult(result) => {
                let mut content = Vec::new();
                if !result.text.is_empty() {
                    content.push(text_block(&result.text));
                }
                if let Some(image) = &result.image {
                    content.push(image_block(image, request));
                }
                if content.is_empty() {
                    content.push(text_block("ok"));
                }
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": result.call_id,
                    "content": content,
                });
                if result.is_error {
                    block["is_error"] = json!(true);
                }
                push("user", block);
            }
        }
    }
    messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// A whole streamed message.
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicReply {
    /// The content blocks, tool inputs parsed.
    pub blocks: Vec<Value>,
    pub usage: Usage,
    pub stop_reason: Option<String>,
}

/// Rebuilds a message from the stream.
#[derive(Debug, Default)]
pub struct AnthropicAssembler {
    blocks: BTreeMap<u64, (Value, String)>,
    usage: Usage,
    stop_reason: Option<String>,
    stopped: bool,
}

fn protocol(message: impl Into<String>) -> StreamError {
    StreamError::Protocol(message.into())
}

impl AnthropicAssembler {
    fn usage_from(&mut self, usage: &Value) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64);
        if let Some(n) = field("input_tokens") {
            self.usage.input_tokens = n;
        }
        if let Some(n) = field("output_tokens") {
            self.usage.output_tokens = n;
        }
        if let Some(n) = field("cache_read_input_tokens") {
            self.usage.cache_read_input_tokens = n;
        }
        if let Some(n) = field("cache_creation_input_tokens") {
            self.usage.cache_creation_input_tokens = n;
        }
    }
}

impl StreamAssembler for AnthropicAssembler {
    type Output = AnthropicReply;

    fn event(&mut self, event: SseEvent) -> Result<(), StreamError> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| protocol(format!("an event is not JSON: {e}")))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = || {
            data.get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| protocol(format!("{kind} without an index")))
        };
        match kind {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.usage_from(usage);
                }
            }
            "content_block_start" => {
                // Deltas write into the block, so it must be an object.
                let block = data
                    .get("content_block")
                    .filter(|b| b.is_object())
                    .cloned()
                    .ok_or_else(|| protocol("content_block_start without a block object"))?;
                self.blocks.insert(index()?, (block, String::new()));
            }
            "content_block_delta" => {
                let index = index()?;
                let (block, partial_json) = self
                    .blocks
                    .get_mut(&index)
                    .ok_or_else(|| protocol(format!("a delta for unknown block {index}")))?;
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                let append = |block: &mut Value, field: &str, piece: Option<&str>| {
                    let piece = piece.unwrap_or_default();
                    let current = block.get(field).and_then(Value::as_str).unwrap_or_default();
                    block[field] = Value::String(format!("{current}{piece}"));
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        append(block, "text", delta.get("text").and_then(Value::as_str))
                    }
                    Some("thinking_delta") => append(
                        block,
                        "thinking",
                        delta.get("thinking").and_then(Value::as_str),
                    ),
                    Some("signature_delta") => append(
                        block,
                        "signature",
                        delta.get("signature").and_then(Value::as_str),
                    ),
                    Some("input_json_delta") => partial_json.push_str(
                        delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                    ),
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index()?;
                if let Some((block, partial_json)) = self.blocks.get_mut(&index)
                    && !partial_json.trim().is_empty()
                {
                    let input: Value = serde_json::from_str(partial_json).map_err(|e| {
                        protocol(format!("the input of block {index} is not JSON: {e}"))
                    })?;
                    block["input"] = input;
                    partial_json.clear();
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    self.usage_from(usage);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let kind = data
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
                    .to_string();
                let message = data
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                return Err(StreamError::Provider { kind, message });
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<AnthropicReply, StreamError> {
        if !self.stopped {
            return Err(StreamError::Incomplete(
                "the stream ended before message_stop".into(),
            ));
        }
        Ok(AnthropicReply {
            // The API refuses empty text blocks in requests, and this answer goes back.
            blocks: self
                .blocks
                .into_values()
                .map(|(block, _)| block)
                .filter(|block| {
                    !(block["type"] == "text"
                        && block["text"].as_str().is_none_or(|t| t.is_empty()))
                })
                .collect(),
            usage: self.usage,
            stop_reason: self.stop_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_version_follows_the_model() {
        use ComputerToolVersion::*;
        for (model, expected) in [
            ("claude-opus-4-5-20251101", V20251124),
            ("claude-opus-4-5", V20251124),
            ("claude-opus-4-6", V20251124),
            ("claude-sonnet-4-6", V20251124),
            ("claude-opus-4-7", V20251124),
            ("claude-sonnet-4-5-20250929", V20250124),
            ("claude-haiku-4-5", V20250124),
            ("claude-opus-4-1-20250805", V20250124),
            ("claude-sonnet-4-20250514", V20250124),
            ("claude-3-7-sonnet-20250219", V20250124),
            ("something-new", V20251124),
        ] {
            assert_eq!(ComputerToolVersion::for_model(model), expected, "{model}");
        }
    }
}
