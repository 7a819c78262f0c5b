//! The WebSocket relay on its own, in-process: a real upstream echo server (tokio-tungstenite),
//! the relay behind a real axum server, a real client. Text, binary and large messages pass
//! both ways; the stop signal closes the session; the RFB filter sits in the client-to-server
//! direction only.

use std::time::Duration;

use axum::extract::WebSocketUpgrade;
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use orchestrator::proxy::rfb::RfbClientFilter;
use orchestrator::proxy::ws;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

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
            let target = ws::connect(&upstream, None, None).await.expect("upstream");
            upgrade.on_upgrade(move |socket| async move {
                let filter = (mode == "view").then(RfbClientFilter::view);
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
        .route("/view", make("view"))
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
async fn the_view_filter_drops_input_in_the_relay() -> anyhow::Result<()> {
    let front = relay_server(echo_server().await?).await?;
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("{front}/view")).await?;
    // Handshake and a pointer event in one frame, then a FramebufferUpdateRequest: the echo
    // returns only what passed the filter.
    let mut first = b"RFB 003.008\n".to_vec();
    first.extend([1, 0, 5, 0, 0, 10, 0, 10]);
    socket.send(Message::Binary(first.into())).await?;
    let mut echoed = Vec::new();
    while echoed.len() < 14 {
        if let Message::Binary(bytes) = next_data(&mut socket).await? {
            echoed.extend_from_slice(&bytes);
        }
    }
    assert_eq!(&echoed[..12], b"RFB 003.008\n");
    assert_eq!(
        &echoed[12..],
        &[1, 1],
        "security type, ClientInit forced shared; no pointer event"
    );
    socket
        .send(Message::Binary(vec![3u8, 0, 0, 0, 0, 0, 0, 8, 0, 8].into()))
        .await?;
    assert_eq!(
        next_data(&mut socket).await?,
        Message::Binary(vec![3u8, 0, 0, 0, 0, 0, 0, 8, 0, 8].into())
    );
    // Text is not RFB: the session is closed.
    socket.send(Message::Text("keys".into())).await?;
    assert!(matches!(
        next_data(&mut socket).await,
        Ok(Message::Close(_)) | Err(_)
    ));
    Ok(())
}
