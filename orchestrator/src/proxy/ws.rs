//! WebSocket relays: the client's socket (accepted by axum) joined to a socket the orchestrator
//! opens to the sandbox (tokio-tungstenite). Client-to-server bytes may pass through an
//! [`RfbClientFilter`]; the relay ends when either side closes, when the filter refuses a
//! message, or when `stop` resolves (a revoked or expired token).

use std::future::Future;

use axum::extract::ws::{CloseFrame as AxumClose, Message as AxumMessage, WebSocket};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as TMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::CloseFrame as TClose;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::http::ProxyError;
use super::rfb::RfbClientFilter;

/// A socket to the sandbox.
pub type Upstream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens a WebSocket to `url`, with sandboxd's key and the client's subprotocol if given.
pub async fn connect(
    url: &str,
    bearer: Option<&str>,
    protocol: Option<&str>,
) -> Result<Upstream, ProxyError> {
    let mut request = url
        .into_client_request()
        .map_err(|e| ProxyError::Url(e.to_string()))?;
    if let Some(key) = bearer
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {key}"))
    {
        request.headers_mut().insert("authorization", value);
    }
    if let Some(protocol) = protocol
        && let Ok(value) = HeaderValue::from_str(protocol)
    {
        request
            .headers_mut()
            .insert("sec-websocket-protocol", value);
    }
    let (socket, _) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .map_err(|_| ProxyError::Upstream("timed out opening the WebSocket".into()))?
    .map_err(|e| ProxyError::Upstream(e.to_string()))?;
    Ok(socket)
}

/// How a relay ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEnd {
    ClientClosed,
    UpstreamClosed,
    Refused(String),
    Stopped(String),
}

fn to_upstream(message: AxumMessage) -> TMessage {
    match message {
        AxumMessage::Text(text) => TMessage::Text(text.as_str().into()),
        AxumMessage::Binary(bytes) => TMessage::Binary(bytes),
        AxumMessage::Ping(bytes) => TMessage::Ping(bytes),
        AxumMessage::Pong(bytes) => TMessage::Pong(bytes),
        AxumMessage::Close(frame) => TMessage::Close(frame.map(|f| TClose {
            code: CloseCode::from(f.code),
            reason: f.reason.as_str().into(),
        })),
    }
}

fn to_client(message: TMessage) -> Option<AxumMessage> {
    Some(match message {
        TMessage::Text(text) => AxumMessage::Text(text.as_str().into()),
        TMessage::Binary(bytes) => AxumMessage::Binary(bytes),
        TMessage::Ping(bytes) => AxumMessage::Ping(bytes),
        TMessage::Pong(bytes) => AxumMessage::Pong(bytes),
        TMessage::Close(frame) => AxumMessage::Close(frame.map(|f| AxumClose {
            code: f.code.into(),
            reason: f.reason.as_str().into(),
        })),
        TMessage::Frame(_) => return None,
    })
}

/// Relays until one side ends. `filter` (VNC) sees every client-to-server byte.
pub async fn relay(
    client: WebSocket,
    upstream: Upstream,
    mut filter: Option<RfbClientFilter>,
    stop: impl Future<Output = String>,
) -> RelayEnd {
    let (mut client_tx, mut client_rx) = client.split();
    let (mut upstream_tx, mut upstream_rx) = upstream.split();
    tokio::pin!(stop);
    let end = loop {
        tokio::select! {
            message = client_rx.next() => {
                let Some(Ok(message)) = message else { break RelayEnd::ClientClosed };
                let message = match (&mut filter, message) {
                    (Some(filter), AxumMessage::Binary(bytes)) => match filter.feed(&bytes) {
                        Ok(out) if out.is_empty() => continue,
                        Ok(out) => AxumMessage::Binary(out.into()),
                        Err(error) => break RelayEnd::Refused(error.to_string()),
                    },
                    (Some(_), AxumMessage::Text(_)) => {
                        break RelayEnd::Refused("text frames are not RFB".into())
                    }
                    (_, AxumMessage::Close(_)) => break RelayEnd::ClientClosed,
                    (_, message) => message,
                };
                if upstream_tx.send(to_upstream(message)).await.is_err() {
                    break RelayEnd::UpstreamClosed;
                }
            }
            message = upstream_rx.next() => {
                let Some(Ok(message)) = message else { break RelayEnd::UpstreamClosed };
                if matches!(message, TMessage::Close(_)) {
                    break RelayEnd::UpstreamClosed;
                }
                let Some(message) = to_client(message) else { continue };
                if client_tx.send(message).await.is_err() {
                    break RelayEnd::ClientClosed;
                }
            }
            why = &mut stop => break RelayEnd::Stopped(why),
        }
    };
    let (code, reason) = match &end {
        RelayEnd::Refused(why) => (1008, why.clone()),
        RelayEnd::Stopped(why) => (1008, why.clone()),
        _ => (1000, String::new()),
    };
    let reason: String = reason.chars().take(100).collect();
    let _ = client_tx
        .send(AxumMessage::Close(Some(AxumClose {
            code,
            reason: reason.as_str().into(),
        })))
        .await;
    let _ = upstream_tx.send(TMessage::Close(None)).await;
    end
}
