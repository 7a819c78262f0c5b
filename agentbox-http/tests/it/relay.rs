//! The WebSocket relay on its own, in-process: a real upstream echo server (tokio-tungstenite),
//! the relay behind a real axum server, a real client. Text, binary and large messages pass
//! both ways; the stop signal closes the session with its reason; a filter decides what passes
//! upstream, sees what comes back, and can end the session.

use std::time::Duration;

use agentbox_http::ws::{self, RelayFilter};
use axum::extract::WebSocketUpgrade;
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

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

/// The relay in front of `upstream`; `/plain`, `/view` (RFB view filter), `/stop` (stops at once).
async fn relay_server(upstream: String) -> anyhow::Result<String> {
    let make = |mode: &'static str| {
        let upstream = upstream.clone();
        get(move |upgrade: WebSocketUpgrade| async move {
            let target = ws::connect(&upstream, &[], 16 * 1024 * 1024)
                .await
                .expect("upstream");
            upgrade.on_upgrade(move |socket| async move {
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
        .route("/stop", make("stop"));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("ws://{addr}"))
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
    let front = relay_server(echo_server().await?).await?;
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
    let front = relay_server(echo_server().await?).await?;
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
