//! `openai-chat:<model>`: any OpenAI-compatible Chat Completions server (vLLM, Ollama, SGLang,
//! OpenRouter), streamed, with function tools and image inputs.
//!
//! Wire format (OpenAI Chat Completions, as those servers implement it):
//! - `POST {base}/chat/completions`, `Authorization: Bearer` only when a key is configured;
//!   `stream: true` with `stream_options.include_usage`.
//! - Tools are functions: `computer` (Anthropic's action vocabulary plus `drag` with a `path`,
//!   so a whole stroke is one call), `bash`, `text_editor`, `request_human`; names go through
//!   [`ToolNames`].
//! - Images are `image_url` parts with base64 `data:` URLs. Tool messages carry text only, so
//!   the screenshot after a tool call follows in a user message.
//! - The stream: `choices[0].delta` with `content`, `reasoning_content` (vLLM, DeepSeek) or
//!   `reasoning` (OpenRouter), and `tool_calls` fragments (`index`, then `id`, `function.name`,
//!   `function.arguments` in pieces) reassembled per index; a last chunk with `usage`;
//!   `data: [DONE]`.
//! - The assistant message is sent back with its tool calls and, when the server produced it,
//!   its `reasoning_content` (servers that do not know the field ignore it).

use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::tools::{self, BASH, COMPUTER, EDITOR, REQUEST_HUMAN};
use super::{
    Model, ModelError, ModelInfo, ModelTurn, StopReason, ToolCall, ToolRequest, TurnRequest, Usage,
};
use crate::gateway::{
    Gateway, GatewayError, HttpOptions, StreamAssembler, StreamError, sensitive_header,
};
use crate::secret::Secret;
use crate::sse::SseEvent;
use crate::tool_names::ToolNames;
use crate::transcript::{ImageRef, Item};

/// Default screenshot bounds for open models.
pub const DEFAULT_BOUNDS: (u32, u32) = (1280, 800);

/// The Chat Completions adapter.
#[derive(Debug)]
pub struct ChatModel {
    info: ModelInfo,
    gateway: Gateway,
    url: String,
    headers: HeaderMap,
    names: ToolNames,
}

impl ChatModel {
    pub fn new(
        model: &str,
        key: Option<Secret>,
        base_url: &str,
        bounds: Option<(u32, u32)>,
        http: HttpOptions,
    ) -> Result<Self, GatewayError> {
        Gateway::check_url(base_url)?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &key
            && let Some(value) = sensitive_header(&format!("Bearer {}", key.expose()))
        {
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        Ok(Self {
            info: ModelInfo {
                provider: "openai-chat",
                model: model.to_string(),
                observation_bounds: Some(bounds.unwrap_or(DEFAULT_BOUNDS)),
            },
            gateway: Gateway::new("openai-chat", http, key.into_iter().collect())?,
            url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            headers,
            names: ToolNames::new([COMPUTER, BASH, EDITOR, REQUEST_HUMAN]),
        })
    }

    /// The request body for `request`.
    pub fn request_body(&self, request: &TurnRequest) -> Value {
        let function = |name: &str, description: String, parameters: Value| {
            json!({
                "type": "function",
                "function": {
                    "name": self.names.encode(name).unwrap_or(name),
                    "description": description,
                    "parameters": parameters,
                }
            })
        };
        let computer_description = format!(
            "{} The screenshots are {}x{} pixels.",
            tools::COMPUTER_DESCRIPTION,
            request.display.0,
            request.display.1
        );
        json!({
            "model": self.info.model,
            "messages": render_messages(request),
            "tools": [
                function(COMPUTER, computer_description, tools::computer_schema()),
                function(BASH, tools::BASH_DESCRIPTION.into(), tools::bash_schema()),
                function(EDITOR, tools::EDITOR_DESCRIPTION.into(), tools::editor_schema()),
                function(REQUEST_HUMAN, tools::REQUEST_HUMAN_DESCRIPTION.into(), tools::request_human_schema()),
            ],
            "tool_choice": "auto",
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    }

    fn decode_call(&self, id: String, name: &str, arguments: &str) -> ToolCall {
        let request = match serde_json::from_str::<Value>(if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        }) {
            Err(e) => ToolRequest::Invalid {
                tool: name.to_string(),
                message: format!("the arguments are not JSON: {e}"),
            },
            Ok(input) => match self.names.decode(name) {
                Some(COMPUTER) => tools::parse_computer(&input),
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
            channel: "function".into(),
            request,
            safety_checks: Vec::new(),
        }
    }

    fn turn(&self, reply: ChatReply, step: u32, attempts: u32) -> ModelTurn {
        let mut calls = Vec::new();
        let mut wire_calls = Vec::new();
        for (i, call) in reply.tool_calls.into_iter().enumerate() {
            // Some servers omit ids; the pairing still needs one.
            let id = call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("call_{step}_{i}"));
            wire_calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }));
            calls.push(self.decode_call(id, &call.name, &call.arguments));
        }
        let mut message = json!({
            "role": "assistant",
            "content": if reply.content.is_empty() { Value::Null } else { Value::String(reply.content.clone()) },
        });
        if !wire_calls.is_empty() {
            message["tool_calls"] = Value::Array(wire_calls);
        }
        if !reply.reasoning.is_empty() {
            message["reasoning_content"] = Value::String(reply.reasoning.clone());
        }
        let stop = match reply.finish_reason.as_deref() {
            _ if !calls.is_empty() => StopReason::ToolUse,
            Some("length") => StopReason::MaxTokens,
            Some("stop") | None => StopReason::EndTurn,
            Some(other) => StopReason::Other(other.to_string()),
        };
        ModelTurn {
            text: (!reply.content.trim().is_empty()).then_some(reply.content),
            reasoning: if reply.reasoning.is_empty() {
                Vec::new()
            } else {
                vec![reply.reasoning]
            },
            calls,
            usage: reply.usage,
            stop,
            raw: vec![message],
            attempts,
        }
    }
}

#[async_trait]
impl Model for ChatModel {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    async fn next_turn(&self, request: TurnRequest) -> Result<ModelTurn, ModelError> {
        let body = self.request_body(&request);
        let report = self
            .gateway
            .post_stream(&self.url, &self.headers, &body, ChatAssembler::default)
            .await?;
        Ok(self.turn(report.output, request.step, report.attempts))
    }
}

fn image_part(image: &ImageRef, request: &TurnRequest) -> Value {
    match request.images.get(&image.observation_id) {
        Some(bytes) if !image.dropped => json!({
            "type": "image_url",
            "image_url": {"url": tools::data_url(&image.mime, bytes)},
        }),
        _ => json!({"type": "text", "text": tools::dropped_image_text(&image.observation_id)}),
    }
}

fn render_messages(request: &TurnRequest) -> Vec<Value> {
    let mut messages = vec![json!({"role": "system", "content": request.system})];
    // Images of tool results, sent in one user message after the run of tool messages.
    let mut pending: Vec<Value> = Vec::new();
    let flush = |messages: &mut Vec<Value>, pending: &mut Vec<Value>| {
        if !pending.is_empty() {
            let mut content =
                vec![json!({"type": "text", "text": "Screenshot after the tool calls above:"})];
            content.append(pending);
            messages.push(json!({"role": "user", "content": content}));
        }
    };
    for item in &request.items {
        if !matches!(item, Item::ToolResult(_)) {
            flush(&mut messages, &mut pending);
        }
        match item {
            Item::User { text, image } => {
                let mut content = vec![json!({"type": "text", "text": text})];
                if let Some(image) = image {
                    content.push(image_part(image, request));
                }
                messages.push(json!({"role": "user", "content": content}));
            }
            Item::Assistant { raw, .. } => messages.extend(raw.iter().cloned()),
            Item::ToolResult(result) => {
                let text = if result.text.is_empty() {
                    "ok".to_string()
                } else if result.is_error {
                    format!("Error: {}", result.text)
                } else {
                    result.text.clone()
                };
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": result.call_id,
                    "content": text,
                }));
                if let Some(image) = &result.image {
                    pending.push(image_part(image, request));
                }
            }
        }
    }
    flush(&mut messages, &mut pending);
    messages
}

/// One reassembled tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatToolCall {
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

/// A whole streamed completion.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatReply {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ChatToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Usage,
}

/// Rebuilds a completion from the stream.
#[derive(Debug, Default)]
pub struct ChatAssembler {
    reply: ChatReply,
    calls: BTreeMap<u64, ChatToolCall>,
    done: bool,
}

impl StreamAssembler for ChatAssembler {
    type Output = ChatReply;

    fn event(&mut self, event: SseEvent) -> Result<(), StreamError> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| StreamError::Protocol(format!("a chunk is not JSON: {e}")))?;
        if let Some(error) = data.get("error") {
            return Err(StreamError::Provider {
                kind: error
                    .get("type")
                    .or_else(|| error.get("code"))
                    .and_then(|v| {
                        v.as_str()
                            .map(str::to_string)
                            .or_else(|| Some(v.to_string()))
                    })
                    .unwrap_or_else(|| "error".into()),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            });
        }
        if let Some(usage) = data.get("usage").filter(|u| u.is_object()) {
            let number =
                |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
            self.reply.usage = Usage {
                input_tokens: number("/prompt_tokens"),
                output_tokens: number("/completion_tokens"),
                cache_read_input_tokens: number("/prompt_tokens_details/cached_tokens"),
                cache_creation_input_tokens: 0,
                reasoning_tokens: number("/completion_tokens_details/reasoning_tokens"),
            };
        }
        let Some(choice) = data.pointer("/choices/0") else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.reply.finish_reason = Some(reason.to_string());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.reply.content.push_str(text);
        }
        for field in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta.get(field).and_then(Value::as_str) {
                self.reply.reasoning.push_str(text);
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(self.calls.len() as u64);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = call.get("id").and_then(Value::as_str)
                && !id.is_empty()
            {
                entry.id = Some(id.to_string());
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                entry.name.push_str(name);
            }
            if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
                entry.arguments.push_str(arguments);
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<ChatReply, StreamError> {
        if !self.done && self.reply.finish_reason.is_none() {
            return Err(StreamError::Incomplete(
                "the stream ended before [DONE] or a finish_reason".into(),
            ));
        }
        self.reply.tool_calls = self.calls.into_values().collect();
        Ok(self.reply)
    }
}
