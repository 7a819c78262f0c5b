//! [`ProviderServer`]: an HTTP server on 127.0.0.1:0 that speaks a model provider's wire
//! protocol with scripted replies (the one allowed stand-in). It records what the adapter sent
//! (path, headers, JSON body) and answers each request with the next [`Reply`]: an SSE stream
//! (whole, one byte per chunk, or cut with the connection dropped), an error status with
//! headers and a JSON body, or a reply held back for a while.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::net::TcpListener;

/// How an SSE body is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunking {
    /// In one piece.
    Whole,
    /// One byte per chunk.
    PerByte,
    /// The first `n` bytes, then the connection is dropped.
    DropAfter(usize),
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    Sse {
        body: String,
        chunking: Chunking,
    },
    Error {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// `reply`, after `delay`.
    Delayed(Duration, Box<Reply>),
}

impl Reply {
    pub fn sse(body: String) -> Self {
        Reply::Sse {
            body,
            chunking: Chunking::Whole,
        }
    }

    pub fn error(status: u16, body: &str) -> Self {
        Reply::Error {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
}

/// What the adapter sent.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The server; it stops when dropped.
pub struct ProviderServer {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProviderServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ProviderServer {
    pub async fn start(replies: Vec<Reply>) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared::default());
        shared
            .replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(replies);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let app = Router::new().fallback(answer).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, shared, task })
    }

    pub fn push(&self, reply: Reply) {
        self.shared
            .replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.requests().into_iter().map(|r| r.body).collect()
    }
}

async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    let headers = request.headers().clone();
    let bytes = axum::body::to_bytes(request.into_body(), 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    shared
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Recorded {
            path,
            headers,
            body,
        });
    let reply = shared
        .replies
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front();
    match reply {
        Some(reply) => respond(reply).await,
        None => status(500, "no scripted reply left"),
    }
}

fn status(code: u16, body: &str) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
}

async fn respond(reply: Reply) -> Response {
    let mut reply = reply;
    while let Reply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    match reply {
        Reply::Error {
            status: code,
            headers,
            body,
        } => {
            let mut response = status(code, &body);
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(&value),
                ) {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
        Reply::Sse { body, chunking } => {
            let bytes = Bytes::from(body);
            let stream_body = match chunking {
                Chunking::Whole => Body::from(bytes),
                Chunking::PerByte => {
                    let pieces: Vec<Result<Bytes, Infallible>> = (0..bytes.len())
                        .map(|i| Ok(bytes.slice(i..i + 1)))
                        .collect();
                    Body::from_stream(futures_util::stream::iter(pieces).then(|piece| async move {
                        tokio::task::yield_now().await;
                        piece
                    }))
                }
                Chunking::DropAfter(n) => {
                    let first = bytes.slice(..n.min(bytes.len()));
                    let pieces: Vec<Result<Bytes, std::io::Error>> = vec![
                        Ok(first),
                        Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "dropped by the test server",
                        )),
                    ];
                    // The error comes after a pause, so the status line and the first bytes
                    // are on the wire: the client sees a cut body, not a refused request.
                    Body::from_stream(futures_util::stream::iter(pieces).then(|piece| async move {
                        if piece.is_err() {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        piece
                    }))
                }
            };
            let mut response = Response::new(stream_body);
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            response
        }
        Reply::Delayed(..) => status(500, "unreachable"),
    }
}
