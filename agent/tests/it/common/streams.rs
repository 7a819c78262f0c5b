//! Provider streams as the providers send them (event names and payload shapes from their
//! streaming documentation), built from a short description of the answer. Text, thinking and
//! tool inputs are cut into several deltas, as real streams do.

use serde_json::{Value, json};

/// `text` cut into `n` pieces at character boundaries.
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let size = chars.len().div_ceil(n.max(1));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A block of an Anthropic answer.
pub enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

pub fn text(t: &str) -> Block {
    Block::Text(t.into())
}

pub fn thinking(t: &str, signature: &str) -> Block {
    Block::Thinking {
        thinking: t.into(),
        signature: signature.into(),
    }
}

pub fn tool_use(id: &str, name: &str, input: Value) -> Block {
    Block::ToolUse {
        id: id.into(),
        name: name.into(),
        input,
    }
}

/// A Messages API stream (`message_start` ... `message_stop`).
pub fn anthropic(blocks: &[Block], stop_reason: &str) -> String {
    let mut out = event(
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": "msg_test", "type": "message", "role": "assistant", "content": [],
            "model": "claude-test", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 7}
        }}),
    );
    out.push_str(&event("ping", &json!({"type": "ping"})));
    for (index, block) in blocks.iter().enumerate() {
        let delta = |delta: Value| {
            event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            )
        };
        match block {
            Block::Text(text) => {
                out.push_str(&event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
                for piece in pieces(text, 2) {
                    out.push_str(&delta(json!({"type": "text_delta", "text": piece})));
                }
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                out.push_str(&event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": ""}})));
                for piece in pieces(thinking, 2) {
                    out.push_str(&delta(json!({"type": "thinking_delta", "thinking": piece})));
                }
                out.push_str(&delta(
                    json!({"type": "signature_delta", "signature": signature}),
                ));
            }
            Block::Redacted(data) => {
                out.push_str(&event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "redacted_thinking", "data": data}})));
            }
            Block::ToolUse { id, name, input } => {
                out.push_str(&event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
                for piece in pieces(&input.to_string(), 3) {
                    out.push_str(&delta(
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
            }
        }
        out.push_str(&event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    out.push_str(&event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 42}}),
    ));
    out.push_str(&event("message_stop", &json!({"type": "message_stop"})));
    out
}

/// An Anthropic answer that calls the computer tool once.
pub fn anthropic_action(id: &str, input: Value) -> String {
    anthropic(&[tool_use(id, "computer", input)], "tool_use")
}

/// An Anthropic final answer.
pub fn anthropic_final(text_: &str) -> String {
    anthropic(&[text(text_)], "end_turn")
}

/// A Responses API stream ending with `response.completed`.
pub fn openai(items: &[Value]) -> String {
    let mut out = event(
        "response.created",
        &json!({"type": "response.created", "response": {"id": "resp_test", "status": "in_progress", "output": []}}),
    );
    for (index, item) in items.iter().enumerate() {
        out.push_str(&event(
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": index, "item": {"type": item["type"], "id": item.get("id")}}),
        ));
        if item["type"] == "message" {
            let text = item
                .pointer("/content/0/text")
                .and_then(Value::as_str)
                .unwrap_or_default();
            for piece in pieces(text, 2) {
                out.push_str(&event(
                    "response.output_text.delta",
                    &json!({"type": "response.output_text.delta", "output_index": index, "content_index": 0, "delta": piece}),
                ));
            }
        }
        out.push_str(&event(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ));
    }
    out.push_str(&event(
        "response.completed",
        &json!({"type": "response.completed", "response": {
            "id": "resp_test", "status": "completed", "output": items,
            "usage": {"input_tokens": 200, "output_tokens": 30,
                      "input_tokens_details": {"cached_tokens": 5},
                      "output_tokens_details": {"reasoning_tokens": 12}}
        }}),
    ));
    out
}

pub fn openai_reasoning(id: &str, summary: &str, encrypted: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": summary}], "encrypted_content": encrypted})
}

pub fn openai_message(id: &str, text: &str) -> Value {
    json!({"type": "message", "id": id, "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

pub fn openai_computer_call(id: &str, call_id: &str, action: Value, checks: Value) -> Value {
    json!({"type": "computer_call", "id": id, "call_id": call_id, "action": action,
           "pending_safety_checks": checks, "status": "completed"})
}

pub fn openai_function_call(id: &str, call_id: &str, name: &str, arguments: &Value) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
           "arguments": arguments.to_string(), "status": "completed"})
}

/// A tool call of a chat answer.
pub struct ChatCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

pub fn chat_call(id: &str, name: &str, arguments: Value) -> ChatCall {
    ChatCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}

/// A Chat Completions stream (`data:` chunks, then `data: [DONE]`).
pub fn chat(content: &str, reasoning: &str, calls: &[ChatCall]) -> String {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "test",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut out = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    if !reasoning.is_empty() {
        for piece in pieces(reasoning, 2) {
            out.push_str(&chunk(json!({"reasoning_content": piece}), Value::Null));
        }
    }
    if !content.is_empty() {
        for piece in pieces(content, 2) {
            out.push_str(&chunk(json!({"content": piece}), Value::Null));
        }
    }
    for (index, call) in calls.iter().enumerate() {
        out.push_str(&chunk(
            json!({"tool_calls": [{"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in pieces(&call.arguments.to_string(), 3) {
            out.push_str(&chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push_str(&chunk(json!({}), json!(finish)));
    out.push_str(&format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": [],
               "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}})
    ));
    out.push_str("data: [DONE]\n\n");
    out
}
