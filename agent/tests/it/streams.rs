//! Recorded provider streams cut at every byte boundary (and with CRLF line endings) give the
//! same answer as the whole stream; every prefix that misses the stream's end is reported as
//! incomplete, never as an answer.

use crate::common;

use agent::gateway::{StreamAssembler, StreamError};
use agent::model::anthropic::AnthropicAssembler;
use agent::model::chat::ChatAssembler;
use agent::model::openai::OpenAiAssembler;
use agent::sse::SseDecoder;
use common::streams;
use serde_json::json;

fn assemble<A: StreamAssembler>(
    chunks: &[&[u8]],
    make: &impl Fn() -> A,
) -> Result<A::Output, StreamError> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    let mut assembler = make();
    for chunk in chunks {
        decoder
            .push(chunk, &mut events)
            .map_err(|e| StreamError::Protocol(e.to_string()))?;
        for event in events.drain(..) {
            assembler.event(event)?;
        }
    }
    assembler.finish()
}

/// Checks every split of `stream` (LF and CRLF) against the whole, and every prefix before
/// `end_marker` for an incomplete answer.
fn check_every_split<A>(stream: &str, end_marker: &str, make: impl Fn() -> A)
where
    A: StreamAssembler,
    A::Output: PartialEq + std::fmt::Debug,
{
    for variant in [stream.to_string(), stream.replace('\n', "\r\n")] {
        let bytes = variant.as_bytes();
        let whole = assemble(&[bytes], &make);
        assert!(whole.is_ok(), "the whole stream assembles: {whole:?}");
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(assemble(&[a, b], &make), whole, "cut at byte {cut}");
        }
        // Byte by byte.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(assemble(&singles, &make), whole);
        // Every prefix that stops before the end event is incomplete.
        let end = variant.find(end_marker).unwrap_or(variant.len());
        for cut in 0..end {
            match assemble(&[&bytes[..cut]], &make) {
                Err(StreamError::Incomplete(_)) => {}
                other => panic!("prefix of {cut} bytes gave {other:?}"),
            }
        }
    }
}

#[test]
fn anthropic_stream_survives_any_split() {
    let stream = streams::anthropic(
        &[
            streams::thinking("I should click the Paint entry — 画图", "sig-Zm9vYmFy=="),
            streams::text("Opening the menu 🎨"),
            streams::tool_use(
                "toolu_01",
                "computer",
                json!({"action": "left_click", "coordinate": [640, 400], "text": "ctrl"}),
            ),
        ],
        "tool_use",
    );
    check_every_split(&stream, "event: message_stop", AnthropicAssembler::default);
    let reply = assemble(&[stream.as_bytes()], &AnthropicAssembler::default)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(reply.blocks.len(), 3);
    assert_eq!(
        reply.blocks[0]["thinking"],
        "I should click the Paint entry — 画图"
    );
    assert_eq!(reply.blocks[0]["signature"], "sig-Zm9vYmFy==");
    assert_eq!(reply.blocks[1]["text"], "Opening the menu 🎨");
    assert_eq!(reply.blocks[2]["input"]["coordinate"], json!([640, 400]));
    assert_eq!(reply.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(reply.usage.input_tokens, 100);
    assert_eq!(reply.usage.output_tokens, 42);
    assert_eq!(reply.usage.cache_read_input_tokens, 7);
}

#[test]
fn openai_stream_survives_any_split() {
    let stream = streams::openai(&[
        streams::openai_reasoning("rs_1", "Need to open Paint — 画图", "gAAAAB-encrypted=="),
        streams::openai_computer_call(
            "cu_1",
            "call_1",
            json!({"type": "drag", "path": [{"x": 10, "y": 10}, {"x": 90, "y": 40}]}),
            json!([{"id": "sc_1", "code": "malicious_instructions", "message": "Check"}]),
        ),
    ]);
    check_every_split(
        &stream,
        "event: response.completed",
        OpenAiAssembler::default,
    );
    let reply = assemble(&[stream.as_bytes()], &OpenAiAssembler::default)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(reply.items.len(), 2);
    assert_eq!(reply.items[0]["encrypted_content"], "gAAAAB-encrypted==");
    assert_eq!(reply.usage.reasoning_tokens, 12);
}

#[test]
fn chat_stream_survives_any_split() {
    let stream = streams::chat(
        "Drawing now ✏️",
        "The canvas is in the middle — 中间",
        &[
            streams::chat_call(
                "call_a",
                "computer",
                json!({"action": "drag", "path": [[1, 2], [30, 40], [5, 60]]}),
            ),
            streams::chat_call("call_b", "bash", json!({"command": "ls ~/outputs"})),
        ],
    );
    check_every_split(
        &stream,
        "\"finish_reason\":\"tool_calls\"",
        ChatAssembler::default,
    );
    let reply =
        assemble(&[stream.as_bytes()], &ChatAssembler::default).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(reply.content, "Drawing now ✏️");
    assert_eq!(reply.reasoning, "The canvas is in the middle — 中间");
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(reply.tool_calls[1].id.as_deref(), Some("call_b"));
    let args: serde_json::Value =
        serde_json::from_str(&reply.tool_calls[0].arguments).unwrap_or_default();
    assert_eq!(args["path"], json!([[1, 2], [30, 40], [5, 60]]));
    assert_eq!(reply.usage.input_tokens, 300);
}

#[test]
fn errors_inside_streams_are_provider_errors() {
    let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    assert_eq!(
        assemble(&[anthropic.as_bytes()], &AnthropicAssembler::default).err(),
        Some(StreamError::Provider {
            kind: "overloaded_error".into(),
            message: "Overloaded".into()
        })
    );
    let openai = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}}}\n\n";
    assert!(matches!(
        assemble(&[openai.as_bytes()], &OpenAiAssembler::default),
        Err(StreamError::Provider { kind, .. }) if kind == "server_error"
    ));
    let chat = "data: {\"error\":{\"message\":\"model not loaded\",\"type\":\"invalid_request_error\"}}\n\n";
    assert!(matches!(
        assemble(&[chat.as_bytes()], &ChatAssembler::default),
        Err(StreamError::Provider { kind, .. }) if kind == "invalid_request_error"
    ));
}
