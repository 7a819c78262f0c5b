//! The WebSocket relay on its own, in-process: a real upstream echo server (tokio-tungstenite),
//! the relay behind a real axum server, a real client. Text, binary and large messages pass
//! both ways; the stop signal closes the session with its reason; a filter decides what passes
//! upstream, sees what comes back, and can end the session; a client's limits hold (a message
//! left unfinished is cut off, unfinished messages share one budget, an oversized one is
//! refused).

use std::time::Duration;

use std::sync::Arc;

use agentbox_http::ws::{self, Budget, Limits, RelayFilter};
use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

/// Drops the byte 0xFF from what the client sends, and ends the session when the upstream
/// sends the word "bye".
struct DropFf;

impl RelayFilter for DropFf {
    fn client_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>, String> {
        Ok(bytes.iter().copied().filter(|b| *b != 0xff).collect())
    }

    fn upstream_bytes(&mut self, bytes: &[u8]) -> Result<(), String> {
        if bytes == b"bye" {
            Err("upstream said bye".into())
        } else {
            Ok(())
        }
    }
}

/// An upstream that echoes every data message.
async fn echo_server() -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_text() || message.is_binary() {
                        if socket.send(message).await.is_err() {
                            break;
                        }
                    } else if message.is_close() {
                        break;
                    }
                }
            });
        }
    });
    Ok(format!("ws://{addr}/"))
}

/// The limits of the test relays: 1 MiB messages, 1 s for an unfinished one, and a budget of
/// 1.5 MiB shared by every `/limited` session.
fn limits(budget: &Arc<Budget>) -> Limits {
    Limits {
        max_message: 1024 * 1024,
        unfinished_timeout: Duration::from_secs(1),
        budget: Some(budget.clone()),
    }
}

/// The relay in front of `upstream`; `/plain`, `/filter` (drops 0xFF, ends at "bye"), `/stop`
/// (stops at once), `/limited` (the test limits).
async fn relay_server(upstream: String) -> anyhow::Result<(String, Arc<Budget>)> {
    let budget = Budget::new(1536 * 1024);
    let make = |mode: &'static str| {
        let upstream = upstream.clone();
        let budget = budget.clone();
        get(move |request: Request| async move {
            let limits = if mode == "limited" {
                limits(&budget)
            } else {
                Limits::new(16 * 1024 * 1024)
            };
            let (mut parts, _) = request.into_parts();
            let accepted = match ws::accept(&mut parts, None, limits) {
                Ok(accepted) => accepted,
                Err(error) => {
                    return (axum::http::StatusCode::BAD_REQUEST, error.to_string())
                        .into_response();
                }
            };
            let target = ws::connect(&upstream, &[], 16 * 1024 * 1024)
                .await
                .expect("upstream");
            accepted.on_upgrade(move |socket| async move {
                let filter: Option<Box<dyn RelayFilter>> =
                    (mode == "filter").then(|| Box::new(DropFf) as Box<dyn RelayFilter>);
                let stop = async move {
                    if mode == "stop" {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        "stopped by test".to_string()
                    } else {
                        std::future::pending().await
                    }
                };
                ws::relay(socket, target, filter, stop).await;
            })
        })
    };
    let app = axum::Router::new()
        .route("/plain", make("plain"))
        .route("/filter", make("filter"))
        .route("/stop", make("stop"))
        .route("/limited", make("limited"));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("ws://{addr}"), budget))
}

async fn next_data(
    socket: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> anyhow::Result<Message> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("closed"))??;
        if message.is_text() || message.is_binary() || message.is_close() {
            return Ok(message);
        }
    }
}

#[tokio::test]
async fn messages_pass_both_ways_and_stop_closes() -> anyhow::Result<()> {
    let (front, _) = relay_server(echo_server().await?).await?;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{front}/plain")).await?;
    socket.send(Message::Text("hello".into())).await?;
    assert_eq!(next_data(&mut socket).await?, Message::Text("hello".into()));
    let big = vec![7u8; 1024 * 1024];
    socket.send(Message::Binary(big.clone().into())).await?;
    assert_eq!(next_data(&mut socket).await?, Message::Binary(big.into()));

    let (mut stopped, _) = tokio_tungstenite::connect_async(format!("{front}/stop")).await?;
    match next_data(&mut stopped).await? {
        Message::Close(Some(frame)) => assert_eq!(frame.reason.as_str(), "stopped by test"),
        other => anyhow::bail!("expected a close frame, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn the_filter_shapes_client_bytes_sees_upstream_bytes_and_refuses_text() -> anyhow::Result<()>
{
    let (front, _) = relay_server(echo_server().await?).await?;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{front}/filter")).await?;
    socket
        .send(Message::Binary(vec![1u8, 0xff, 2, 0xff, 3].into()))
        .await?;
    assert_eq!(
        next_data(&mut socket).await?,
        Message::Binary(vec![1u8, 2, 3].into())
    );
    // The echo of "bye" comes back from upstream: the filter ends the session.
    socket.send(Message::Binary(b"bye".to_vec().into())).await?;
    match next_data(&mut socket).await? {
        Message::Close(Some(frame)) => assert_eq!(frame.reason.as_str(), "upstream said bye"),
        other => anyhow::bail!("expected a close frame, got {other:?}"),
    }
    // Text frames do not pass a filtered session.
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{front}/filter")).await?;
    socket.send(Message::Text("keys".into())).await?;
    assert!(matches!(
        next_data(&mut socket).await,
        Ok(Message::Close(_)) | Err(_)
    ));
    Ok(())
}

type Client =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The first fragment of a binary message of `size` bytes, not the last.
async fn begin_message(socket: &mut Client, size: usize) -> anyhow::Result<()> {
    let frame = Frame::message(vec![5u8; size], OpCode::Data(Data::Binary), false);
    socket.send(Message::Frame(frame)).await?;
    Ok(())
}

/// The close frame's reason the relay ends `socket` with.
async fn close_reason(socket: &mut Client) -> anyhow::Result<String> {
    match next_data(socket).await? {
        Message::Close(Some(frame)) => Ok(frame.reason.as_str().to_string()),
        other => anyhow::bail!("expected a close frame, got {other:?}"),
    }
}

/// The attack review's finding: a client that begins a large message and never finishes it
/// held the memory for as long as it liked. Pings between its fragments do not keep it alive;
/// a message finished in time passes.
#[tokio::test]
async fn a_message_left_unfinished_is_cut_off() -> anyhow::Result<()> {
    let (front, budget) = relay_server(echo_server().await?).await?;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{front}/limited")).await?;
    // Finished within the time: passes whole.
    begin_message(&mut socket, 1000).await?;
    socket
        .send(Message::Frame(Frame::message(
            vec![6u8; 24],
            OpCode::Data(Data::Continue),
            true,
        )))
        .await?;
    match next_data(&mut socket).await? {
        Message::Binary(bytes) => assert_eq!(bytes.len(), 1024),
        other => anyhow::bail!("expected the echo, got {other:?}"),
    }
    assert_eq!(budget.used(), 0, "a finished message holds nothing");
    // Begun and left: cut off after the timeout, pings or not.
    begin_message(&mut socket, 1000).await?;
    assert!(budget.used() <= 1100);
    let started = std::time::Instant::now();
    let pinger = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if socket.send(Message::Ping(Vec::new().into())).await.is_err() {
                break;
            }
            if started.elapsed() > Duration::from_millis(800) {
                break;
            }
        }
    };
    pinger.await;
    let reason = close_reason(&mut socket).await?;
    assert!(reason.contains("unfinished"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(8));
    // The session's bytes went back to the budget with it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while budget.used() != 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(budget.used(), 0);
    Ok(())
}

/// Unfinished messages of every session charge one budget: a second session that would take it
/// past its limit is closed saying why, and the first goes on.
#[tokio::test]
async fn sessions_share_one_budget_for_unfinished_messages() -> anyhow::Result<()> {
    let (front, budget) = relay_server(echo_server().await?).await?;
    let (mut first, _) = tokio_tungstenite::connect_async(format!("{front}/limited")).await?;
    let (mut second, _) = tokio_tungstenite::connect_async(format!("{front}/limited")).await?;
    begin_message(&mut first, 900 * 1024).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while budget.used() < 900 * 1024 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        budget.used() >= 900 * 1024,
        "the first session's bytes are charged"
    );
    begin_message(&mut second, 900 * 1024).await?;
    let reason = close_reason(&mut second).await?;
    assert!(reason.contains("over the limit"), "{reason}");
    // The first session finishes its message and is echoed.
    first
        .send(Message::Frame(Frame::message(
            vec![1u8; 10],
            OpCode::Data(Data::Continue),
            true,
        )))
        .await?;
    match next_data(&mut first).await? {
        Message::Binary(bytes) => assert_eq!(bytes.len(), 900 * 1024 + 10),
        other => anyhow::bail!("expected the echo, got {other:?}"),
    }
    Ok(())
}

/// A message over the size limit is refused with a close frame that says so.
#[tokio::test]
async fn a_message_over_the_limit_is_refused() -> anyhow::Result<()> {
    let (front, _) = relay_server(echo_server().await?).await?;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{front}/limited")).await?;
    socket
        .send(Message::Binary(vec![0u8; 2 * 1024 * 1024].into()))
        .await?;
    let reason = close_reason(&mut socket).await?;
    assert!(reason.contains("message refused"), "{reason}");
    Ok(())
}
