//! WebSockets: accepting an upgrade, opening a socket upstream, and relaying between the two.
//!
//! The relay joins a client's socket (accepted by axum) to a socket this server opened
//! (tokio-tungstenite). Client-to-upstream bytes may pass through a [`RelayFilter`], which also
//! observes upstream-to-client bytes (a protocol filter must follow both halves). The relay ends
//! when either side closes, when the filter refuses something, or when `stop` resolves (the
//! session's authority ended); the client then gets a close frame saying why.

use std::future::Future;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::extract::ws::{
    CloseFrame as AxumClose, Message as AxumMessage, WebSocket, WebSocketUpgrade,
};
use axum::http::HeaderMap;
use axum::http::header::{SEC_WEBSOCKET_PROTOCOL, UPGRADE};
use axum::http::request::Parts;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as TMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::CloseFrame as TClose;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A socket this server opened to an upstream.
pub type Upstream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long opening an upstream socket may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors opening or accepting a WebSocket.
#[derive(Debug, thiserror::Error)]
pub enum WsError {
    #[error("bad upstream WebSocket URL: {0}")]
    Url(String),
    #[error("the upstream WebSocket did not open: {0}")]
    Upstream(String),
    #[error("not a WebSocket upgrade request: {0}")]
    NotUpgrade(String),
}

/// Whether a request asks for a WebSocket.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The subprotocols a client asked for (`Sec-WebSocket-Protocol`), as sent.
pub fn requested_protocols(headers: &HeaderMap) -> Option<String> {
    headers
        .get(SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Accepts a client's upgrade request, offering back the subprotocols it asked for and
/// accepting messages up to `max_message` bytes.
pub async fn accept(
    parts: &mut Parts,
    protocols: Option<&str>,
    max_message: usize,
) -> Result<WebSocketUpgrade, WsError> {
    let upgrade = WebSocketUpgrade::from_request_parts(parts, &())
        .await
        .map_err(|rejection| WsError::NotUpgrade(rejection.body_text()))?
        .max_message_size(max_message)
        .max_frame_size(max_message);
    Ok(match protocols {
        Some(list) => upgrade.protocols(
            list.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>(),
        ),
        None => upgrade,
    })
}

/// Opens a WebSocket to `url` with extra request `headers` (credentials, subprotocols), taking
/// messages up to `max_message` bytes.
pub async fn connect(
    url: &str,
    headers: &[(&str, &str)],
    max_message: usize,
) -> Result<Upstream, WsError> {
    let mut request = url
        .into_client_request()
        .map_err(|e| WsError::Url(e.to_string()))?;
    for (name, value) in headers {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| WsError::Url(e.to_string()))?;
        let value = HeaderValue::from_str(value).map_err(|e| WsError::Url(e.to_string()))?;
        request.headers_mut().insert(name, value);
    }
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    let (socket, _) = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio_tungstenite::connect_async_with_config(request, Some(config), true),
    )
    .await
    .map_err(|_| WsError::Upstream("timed out".into()))?
    .map_err(|e| WsError::Upstream(e.to_string()))?;
    Ok(socket)
}

/// A protocol filter on a relay: sees every client-to-upstream byte (and decides what passes)
/// and every upstream-to-client byte (to follow the protocol's state).
pub trait RelayFilter: Send {
    /// Bytes from the client; returns the bytes to send upstream, or why the session must end.
    fn client_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>, String>;
    /// Bytes from upstream, before they reach the client; `Err` ends the session.
    fn upstream_bytes(&mut self, bytes: &[u8]) -> Result<(), String>;
}

/// How a relay ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEnd {
    ClientClosed,
    UpstreamClosed,
    /// The filter refused a message.
    Refused(String),
    /// `stop` resolved: the session's authority ended.
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

/// Relays until one side ends, the filter refuses, or `stop` resolves.
pub async fn relay(
    client: WebSocket,
    upstream: Upstream,
    mut filter: Option<Box<dyn RelayFilter>>,
    stop: impl Future<Output = String>,
) -> RelayEnd {
    let (mut client_tx, mut client_rx) = client.split();
    let (mut upstream_tx, mut upstream_rx) = upstream.split();
    tokio::pin!(stop);
    let end = loop {
        tokio::select! {
            // Authority is checked first: once it ended, nothing more passes.
            biased;
            why = &mut stop => break RelayEnd::Stopped(why),
            message = client_rx.next() => {
                let Some(Ok(message)) = message else { break RelayEnd::ClientClosed };
                let message = match (&mut filter, message) {
                    (Some(filter), AxumMessage::Binary(bytes)) => match filter.client_bytes(&bytes) {
                        Ok(out) if out.is_empty() => continue,
                        Ok(out) => AxumMessage::Binary(out.into()),
                        Err(why) => break RelayEnd::Refused(why),
                    },
                    (Some(_), AxumMessage::Text(_)) => {
                        break RelayEnd::Refused("text frames are not allowed on this session".into())
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
                if let (Some(filter), TMessage::Binary(bytes)) = (&mut filter, &message)
                    && let Err(why) = filter.upstream_bytes(bytes)
                {
                    break RelayEnd::Refused(why);
                }
                let Some(message) = to_client(message) else { continue };
                if client_tx.send(message).await.is_err() {
                    break RelayEnd::ClientClosed;
                }
            }
        }
    };
    let (code, reason) = match &end {
        RelayEnd::Refused(why) | RelayEnd::Stopped(why) => (1008, why.clone()),
        _ => (1000, String::new()),
    };
    // A close reason is at most 123 bytes; cut on a character boundary.
    let mut reason = reason;
    while reason.len() > 120 {
        reason.pop();
    }
    let _ = client_tx
        .send(AxumMessage::Close(Some(AxumClose {
            code,
            reason: reason.as_str().into(),
        })))
        .await;
    let _ = upstream_tx.send(TMessage::Close(None)).await;
    end
}
