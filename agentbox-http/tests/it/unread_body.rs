//! The unread-body layer on a tiny axum app behind a real TCP listener, with real clients: a
//! pooled hyper client (the one reqwest is built on) and a raw socket that shows the bytes.
//!
//! The app refuses the way both servers do, without reading the body: 401 from a key check in
//! front of the route, 404 from the fallback, 405 for a wrong method, and 413 after reading
//! only a first chunk. Each refused call carries a 200 KB body and is followed by a valid call
//! on the same pool (or socket), which must succeed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentbox_http::unread_body::UnreadBodyLayer;
use anyhow::{Context, bail};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

/// The size of every refused call's body.
const REFUSED_BODY: usize = 200 * 1024;
/// Rounds of (401, 404, 405, 413) each followed by a valid call.
const ROUNDS: usize = 100;

/// How the app is served.
#[derive(Clone, Copy)]
enum Serve {
    /// Without the layer: hyper on its own.
    Bare,
    /// With the layer, draining up to this many bytes.
    Layered(u64),
}

/// A running app: its address and how many connections it accepted.
struct App {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
}

async fn refuse_without_key(request: Request, next: Next) -> Response {
    if request
        .headers()
        .get("x-key")
        .is_some_and(|k| k == "secret")
    {
        next.run(request).await
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

/// Reads the body to its end and tells its length.
async fn count(body: Body) -> Result<String, StatusCode> {
    let bytes = body
        .collect()
        .await
        .map_err(|_| StatusCode::BAD_REQUEST)?
        .to_bytes();
    Ok(bytes.len().to_string())
}

/// Reads one chunk, then refuses the rest.
async fn first_chunk_only(body: Body) -> StatusCode {
    let mut stream = body.into_data_stream();
    let _ = stream.next().await;
    StatusCode::PAYLOAD_TOO_LARGE
}

async fn echo_socket(upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(|mut socket| async move {
        while let Some(Ok(message)) = socket.recv().await {
            if socket.send(message).await.is_err() {
                break;
            }
        }
    })
}

async fn start(serve: Serve) -> anyhow::Result<App> {
    let guarded = Router::new()
        .route("/guarded", post(count))
        .route_layer(middleware::from_fn(refuse_without_key));
    let router = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route("/count", post(count))
        .route("/first-chunk", post(first_chunk_only))
        .route("/socket", get(echo_socket))
        .merge(guarded);
    let router = match serve {
        Serve::Bare => router,
        Serve::Layered(limit) => router.layer(UnreadBodyLayer::new().drain_limit(limit)),
    };
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let listener = listener.tap_io(move |_| {
        counted.fetch_add(1, Ordering::Relaxed);
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(App { addr, connections })
}

/// The refused calls of one round: method, path, key header, expected status.
const REFUSALS: [(&str, &str, bool, u16); 4] = [
    ("POST", "/guarded", false, 401),
    ("POST", "/nowhere", true, 404),
    ("POST", "/ok", true, 405),
    ("POST", "/first-chunk", true, 413),
];

type Pooled = Client<HttpConnector, Full<Bytes>>;

fn pooled_client() -> Pooled {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1)
        .build_http()
}

/// One call on the pool: its status and whether it announced the connection's close.
async fn call(
    client: &Pooled,
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    key: bool,
    body: Bytes,
) -> anyhow::Result<(u16, bool)> {
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if key {
        request = request.header("x-key", "secret");
    }
    let response = client.request(request.body(Full::new(body))?).await?;
    let closes = response
        .headers()
        .get_all("connection")
        .iter()
        .any(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok((status, closes))
}

/// What the pooled rounds saw.
#[derive(Debug, Default)]
struct Tally {
    refused_ok: usize,
    refused_failed: Vec<String>,
    refused_closing: usize,
    valid_ok: usize,
    valid_failed: Vec<String>,
}

/// [`ROUNDS`] rounds of every refusal, each followed by a valid call, on one pooled client.
async fn pooled_rounds(app: &App) -> Tally {
    let client = pooled_client();
    let refused_body = Bytes::from(vec![b'x'; REFUSED_BODY]);
    let mut tally = Tally::default();
    for round in 0..ROUNDS {
        for (method, path, key, expected) in REFUSALS {
            match call(&client, app.addr, method, path, key, refused_body.clone()).await {
                Ok((status, closes)) if status == expected => {
                    tally.refused_ok += 1;
                    tally.refused_closing += usize::from(closes);
                }
                Ok((status, _)) => tally
                    .refused_failed
                    .push(format!("round {round} {path}: status {status}")),
                Err(error) => tally
                    .refused_failed
                    .push(format!("round {round} {path}: {error:?}")),
            }
            match call(
                &client,
                app.addr,
                "POST",
                "/count",
                true,
                Bytes::from("12345"),
            )
            .await
            {
                Ok((200, _)) => tally.valid_ok += 1,
                Ok((status, _)) => tally
                    .valid_failed
                    .push(format!("round {round} after {path}: status {status}")),
                Err(error) => tally
                    .valid_failed
                    .push(format!("round {round} after {path}: {error:?}")),
            }
        }
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_leave_the_pool_usable() -> anyhow::Result<()> {
    let app = start(Serve::Layered(
        agentbox_http::unread_body::DEFAULT_DRAIN_LIMIT,
    ))
    .await?;
    let tally = pooled_rounds(&app).await;
    let calls = ROUNDS * REFUSALS.len();
    println!(
        "{tally:?}; {} connections",
        app.connections.load(Ordering::Relaxed)
    );
    assert_eq!(tally.valid_ok, calls, "valid calls failed: {tally:#?}");
    assert_eq!(tally.refused_ok, calls, "refused calls failed: {tally:#?}");
    assert_eq!(
        tally.refused_closing, 0,
        "bodies under the drain limit are drained, not answered with a close"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_drain_limit_close_with_notice() -> anyhow::Result<()> {
    let app = start(Serve::Layered(1024)).await?;
    let tally = pooled_rounds(&app).await;
    println!(
        "{tally:?}; {} connections",
        app.connections.load(Ordering::Relaxed)
    );
    assert_eq!(
        tally.valid_ok,
        ROUNDS * REFUSALS.len(),
        "valid calls failed: {tally:#?}"
    );
    assert_eq!(
        tally.refused_closing, tally.refused_ok,
        "every refusal that was not drained says it closes"
    );
    Ok(())
}

// ---- the bytes on one connection ----

/// A response read off a raw socket.
#[derive(Debug)]
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
    }
}

/// Reads one response (its body delimited by `Content-Length`); `None` when the server closed
/// the connection before sending a byte.
async fn read_response(reader: &mut BufReader<TcpStream>) -> anyhow::Result<Option<RawResponse>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let status: u16 = line
        .split(' ')
        .nth(1)
        .context("status line")?
        .parse()
        .context("status code")?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            bail!("the connection closed inside the head");
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').context("header line")?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let response = RawResponse { status, headers };
    let length: usize = response
        .header("content-length")
        .map(str::parse)
        .transpose()?
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    Ok(Some(response))
}

fn head(method: &str, path: &str, extra: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nhost: test\r\nx-key: secret\r\n{extra}\r\n")
}

const VALID: &str = "GET /ok HTTP/1.1\r\nhost: test\r\n\r\n";

async fn connect(app: &App) -> anyhow::Result<BufReader<TcpStream>> {
    Ok(BufReader::new(TcpStream::connect(app.addr).await?))
}

/// Sends a refused call with its whole body, then a valid call, on one socket: both answered,
/// and the refusal does not announce a close.
async fn refusal_then_valid(app: &App, request: &[u8]) -> anyhow::Result<()> {
    let mut socket = connect(app).await?;
    socket.get_mut().write_all(request).await?;
    let refused = read_response(&mut socket)
        .await?
        .context("no answer to the refused call")?;
    assert!(refused.status >= 400, "{refused:?}");
    assert!(!refused.closes(), "drained, not closed: {refused:?}");
    socket.get_mut().write_all(VALID.as_bytes()).await?;
    let valid = read_response(&mut socket)
        .await?
        .context("the connection closed after the refused call")?;
    assert_eq!(valid.status, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_body_is_drained_and_the_connection_kept() -> anyhow::Result<()> {
    let app = start(Serve::Layered(
        agentbox_http::unread_body::DEFAULT_DRAIN_LIMIT,
    ))
    .await?;
    let body = vec![b'x'; REFUSED_BODY];
    for (method, path, key, _) in REFUSALS {
        let key_header = if key { "" } else { "x-key: wrong\r\n" };
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nhost: test\r\n{key_header}content-length: {REFUSED_BODY}\r\n\r\n"
        )
        .into_bytes();
        request.extend_from_slice(&body);
        refusal_then_valid(&app, &request)
            .await
            .with_context(|| format!("{method} {path}"))?;
    }
    // A chunked body of unknown length, under the limit, is drained the same way.
    let mut request = head("POST", "/nowhere", "transfer-encoding: chunked\r\n").into_bytes();
    for _ in 0..20 {
        request.extend_from_slice(format!("{:x}\r\n", 10 * 1024).as_bytes());
        request.extend_from_slice(&[b'y'; 10 * 1024]);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    refusal_then_valid(&app, &request)
        .await
        .context("chunked")?;
    assert_eq!(app.connections.load(Ordering::Relaxed), REFUSALS.len() + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_not_waited_for_and_the_close_is_announced() -> anyhow::Result<()>
{
    let app = start(Serve::Layered(1024)).await?;
    let mut socket = connect(&app).await?;
    // Only the head: the answer must not wait for a body the server will not read.
    let request = head(
        "POST",
        "/nowhere",
        &format!("content-length: {REFUSED_BODY}\r\n"),
    );
    socket.get_mut().write_all(request.as_bytes()).await?;
    let refused = read_response(&mut socket).await?.context("no answer")?;
    assert_eq!(refused.status, 404);
    assert!(refused.closes(), "{refused:?}");
    assert!(read_response(&mut socket).await?.is_none(), "closed after");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_waiting_for_continue_is_refused_without_sending_its_body() -> anyhow::Result<()> {
    let app = start(Serve::Layered(
        agentbox_http::unread_body::DEFAULT_DRAIN_LIMIT,
    ))
    .await?;
    let mut socket = connect(&app).await?;
    let request = format!(
        "POST /guarded HTTP/1.1\r\nhost: test\r\nexpect: 100-continue\r\ncontent-length: {REFUSED_BODY}\r\n\r\n"
    );
    socket.get_mut().write_all(request.as_bytes()).await?;
    let refused = read_response(&mut socket).await?.context("no answer")?;
    assert_eq!(refused.status, 401, "a final answer, no 100 Continue");
    assert!(refused.closes(), "{refused:?}");
    assert!(read_response(&mut socket).await?.is_none(), "closed after");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_a_body_and_websockets_are_untouched() -> anyhow::Result<()> {
    let app = start(Serve::Layered(
        agentbox_http::unread_body::DEFAULT_DRAIN_LIMIT,
    ))
    .await?;
    let mut socket = connect(&app).await?;
    for _ in 0..3 {
        socket.get_mut().write_all(VALID.as_bytes()).await?;
        let answer = read_response(&mut socket).await?.context("no answer")?;
        assert_eq!(answer.status, 200);
        assert!(!answer.closes());
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/socket", app.addr)).await?;
    ws.send(Message::text("ping")).await?;
    let echoed = ws.next().await.context("no echo")??;
    assert_eq!(echoed, Message::text("ping"));
    Ok(())
}

/// Why the layer exists, pinned down: without it, hyper answers a refused call as keep-alive
/// and then closes the connection, because the body was dropped unread and was not all there
/// yet. (If hyper changes this, this test says so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_layer_hyper_closes_after_a_keep_alive_answer() -> anyhow::Result<()> {
    let app = start(Serve::Bare).await?;
    let mut socket = connect(&app).await?;
    // The head and the first kilobyte: the rest is still on its way when the answer is made.
    let mut request = head(
        "POST",
        "/nowhere",
        &format!("content-length: {REFUSED_BODY}\r\n"),
    )
    .into_bytes();
    request.extend_from_slice(&[b'x'; 1024]);
    socket.get_mut().write_all(&request).await?;
    let refused = read_response(&mut socket).await?.context("no answer")?;
    assert_eq!(refused.status, 404);
    assert!(!refused.closes(), "hyper announces no close: {refused:?}");
    let after = read_response(&mut socket).await;
    assert!(
        matches!(after, Ok(None) | Err(_)),
        "yet the connection is closed: {after:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_layer_the_same_call_keeps_the_connection() -> anyhow::Result<()> {
    let app = start(Serve::Layered(
        agentbox_http::unread_body::DEFAULT_DRAIN_LIMIT,
    ))
    .await?;
    let mut socket = connect(&app).await?;
    let mut request = head(
        "POST",
        "/nowhere",
        &format!("content-length: {REFUSED_BODY}\r\n"),
    )
    .into_bytes();
    request.extend_from_slice(&[b'x'; 1024]);
    socket.get_mut().write_all(&request).await?;
    // The layer reads the rest before answering; send it.
    socket
        .get_mut()
        .write_all(&vec![b'x'; REFUSED_BODY - 1024])
        .await?;
    let refused = read_response(&mut socket).await?.context("no answer")?;
    assert_eq!(refused.status, 404);
    assert!(!refused.closes());
    socket.get_mut().write_all(VALID.as_bytes()).await?;
    let valid = read_response(&mut socket).await?.context("closed")?;
    assert_eq!(valid.status, 200);
    Ok(())
}
