//! The gateway against a provider-speaking test server: retries on 429 (honouring
//! retry-after) and 5xx, a connection dropped mid-stream (retried; a typed transport error once
//! the attempts are used up), client errors not retried and reported with the provider's error
//! type and no key, a stream sent one byte per chunk, timeouts.

use crate::common;

use std::time::{Duration, Instant};

use agent::gateway::{GatewayError, HttpOptions, RetryPolicy, TransportPhase};
use agent::model::anthropic::{AnthropicModel, AnthropicOptions};
use agent::{Model, ModelError, Secret, TurnRequest};
use common::provider::{Chunking, ProviderServer, Reply};
use common::streams;

const KEY: &str = "sk-ant-test-0123456789abcdef";

fn options(max_attempts: u32) -> HttpOptions {
    HttpOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            max_attempts,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
            max_retry_after: Duration::from_secs(5),
        },
    }
}

fn model(server: &ProviderServer, http: HttpOptions) -> anyhow::Result<AnthropicModel> {
    Ok(AnthropicModel::new(
        "claude-opus-4-5",
        Secret::new(KEY),
        &server.url,
        AnthropicOptions::default(),
        http,
    )?)
}

fn request() -> TurnRequest {
    TurnRequest {
        system: "system".into(),
        items: vec![agent::transcript::Item::User {
            text: "Task: hi".into(),
            image: None,
        }],
        images: Default::default(),
        display: (1280, 800),
        step: 1,
    }
}

fn final_reply() -> Reply {
    Reply::sse(streams::anthropic_final("done"))
}

fn gateway_error(result: Result<agent::ModelTurn, ModelError>) -> GatewayError {
    match result {
        Err(ModelError::Gateway(error)) => error,
        other => panic!("expected a gateway error, got {other:?}"),
    }
}

#[tokio::test]
async fn sends_the_key_version_and_beta_headers() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![final_reply()]).await?;
    let adapter = model(&server, options(1))?;
    assert!(
        !format!("{adapter:?}").contains(KEY),
        "the adapter's Debug shows no key"
    );
    let turn = adapter.next_turn(request()).await?;
    assert_eq!(turn.text.as_deref(), Some("done"));
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(
        sent.headers.get("x-api-key").and_then(|v| v.to_str().ok()),
        Some(KEY)
    );
    assert_eq!(
        sent.headers
            .get("anthropic-version")
            .and_then(|v| v.to_str().ok()),
        Some("2023-06-01")
    );
    assert_eq!(
        sent.headers
            .get("anthropic-beta")
            .and_then(|v| v.to_str().ok()),
        Some("computer-use-2025-11-24")
    );
    assert_eq!(sent.body["stream"], true);
    Ok(())
}

#[tokio::test]
async fn rate_limited_then_success_waits_as_asked() -> anyhow::Result<()> {
    let limited = Reply::Error {
        status: 429,
        headers: vec![("retry-after-ms".into(), "300".into())],
        body: r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#
            .into(),
    };
    let server = ProviderServer::start(vec![limited, final_reply()]).await?;
    let started = Instant::now();
    let turn = model(&server, options(3))?.next_turn(request()).await?;
    assert_eq!(turn.attempts, 2);
    assert_eq!(server.requests().len(), 2);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the retry waited less than retry-after asked"
    );
    Ok(())
}

#[tokio::test]
async fn server_errors_and_overload_are_retried() -> anyhow::Result<()> {
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let server = ProviderServer::start(vec![
        Reply::error(500, "oops"),
        Reply::error(503, "busy"),
        Reply::error(529, overloaded),
        final_reply(),
    ])
    .await?;
    let turn = model(&server, options(5))?.next_turn(request()).await?;
    assert_eq!(turn.attempts, 4);

    let server = ProviderServer::start(vec![
        Reply::error(502, "bad gateway"),
        Reply::error(500, "still"),
    ])
    .await?;
    let error = gateway_error(model(&server, options(2))?.next_turn(request()).await);
    assert!(
        matches!(
            error,
            GatewayError::Http {
                status: 500,
                attempts: 2,
                ..
            }
        ),
        "{error:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_is_retried() -> anyhow::Result<()> {
    let body = streams::anthropic_final("the whole answer");
    let server = ProviderServer::start(vec![
        Reply::Sse {
            body: body.clone(),
            chunking: Chunking::DropAfter(body.len() / 2),
        },
        Reply::sse(body),
    ])
    .await?;
    let turn = model(&server, options(3))?.next_turn(request()).await?;
    assert_eq!(turn.text.as_deref(), Some("the whole answer"));
    assert_eq!(turn.attempts, 2);
    Ok(())
}

#[tokio::test]
async fn dropped_every_time_is_a_typed_transport_error() -> anyhow::Result<()> {
    let body = streams::anthropic_final("never complete");
    let dropped = Reply::Sse {
        body: body.clone(),
        chunking: Chunking::DropAfter(120),
    };
    let server = ProviderServer::start(vec![dropped.clone(), dropped.clone(), dropped]).await?;
    let error = gateway_error(model(&server, options(3))?.next_turn(request()).await);
    assert!(
        matches!(
            error,
            GatewayError::Transport {
                phase: TransportPhase::Body,
                attempts: 3,
                ..
            }
        ),
        "{error:?}"
    );
    // A stream that ends cleanly before message_stop counts as cut as well.
    let cut = body[..body.find("event: message_stop").unwrap_or(body.len())].to_string();
    let server = ProviderServer::start(vec![Reply::sse(cut)]).await?;
    let error = gateway_error(model(&server, options(1))?.next_turn(request()).await);
    assert!(
        matches!(
            error,
            GatewayError::Transport {
                phase: TransportPhase::Body,
                ..
            }
        ),
        "{error:?}"
    );
    Ok(())
}

#[tokio::test]
async fn client_errors_are_typed_not_retried_and_never_show_the_key() -> anyhow::Result<()> {
    let body = format!(
        r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#
    );
    let server = ProviderServer::start(vec![Reply::error(401, &body), final_reply()]).await?;
    let error = gateway_error(model(&server, options(5))?.next_turn(request()).await);
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
    match &error {
        GatewayError::Http {
            status,
            provider_type,
            attempts,
            ..
        } => {
            assert_eq!(*status, 401);
            assert_eq!(provider_type.as_deref(), Some("authentication_error"));
            assert_eq!(*attempts, 1);
        }
        other => panic!("{other:?}"),
    }
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains("0123456789abcdef"), "the key leaked: {text}");
    }
    assert!(error.to_string().contains("authentication_error"));
    Ok(())
}

#[tokio::test]
async fn a_stream_sent_one_byte_per_chunk_is_read_whole() -> anyhow::Result<()> {
    let body = streams::anthropic(
        &[
            streams::thinking("think — 想", "sig"),
            streams::text("héllo"),
            streams::tool_use(
                "toolu_9",
                "computer",
                serde_json::json!({"action": "screenshot"}),
            ),
        ],
        "tool_use",
    );
    let server = ProviderServer::start(vec![Reply::Sse {
        body,
        chunking: Chunking::PerByte,
    }])
    .await?;
    let turn = model(&server, options(1))?.next_turn(request()).await?;
    assert_eq!(turn.text.as_deref(), Some("héllo"));
    assert_eq!(turn.reasoning, vec!["think — 想".to_string()]);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].id, "toolu_9");
    Ok(())
}

#[tokio::test]
async fn timeouts_and_long_retry_afters_end_the_call() -> anyhow::Result<()> {
    let server = ProviderServer::start(vec![Reply::Delayed(
        Duration::from_secs(20),
        Box::new(final_reply()),
    )])
    .await?;
    let http = HttpOptions {
        request_timeout: Duration::from_millis(300),
        ..options(1)
    };
    let error = gateway_error(model(&server, http)?.next_turn(request()).await);
    assert!(
        matches!(
            error,
            GatewayError::Transport {
                timed_out: true,
                ..
            }
        ),
        "{error:?}"
    );

    let too_long = Reply::Error {
        status: 429,
        headers: vec![("retry-after".into(), "3600".into())],
        body: "{}".into(),
    };
    let server = ProviderServer::start(vec![too_long, final_reply()]).await?;
    let error = gateway_error(model(&server, options(5))?.next_turn(request()).await);
    assert!(
        matches!(error, GatewayError::Http { status: 429, attempts: 1, retry_after: Some(d), .. } if d == Duration::from_secs(3600)),
        "{error:?}"
    );
    Ok(())
}
