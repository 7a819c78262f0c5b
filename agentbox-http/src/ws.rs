//! WebSockets: accepting an upgrade, opening a socket upstream, and relaying between the two.
//!
//! The relay joins a client's socket ([`accept`]: the upgrade answered here, the upgraded
//! connection read through a [`Meter`]) to a socket this server opened (tokio-tungstenite).
//! Client-to-upstream bytes may pass through a [`RelayFilter`], which also observes
//! upstream-to-client bytes (a protocol filter must follow both halves). The relay ends when
//! either side closes, when the filter refuses something, when `stop` resolves (the session's
//! authority ended), or when the client breaks its [`Limits`]; the client then gets a close
//! frame saying why.
//!
//! Why a meter: a WebSocket library assembles a fragmented message whole before handing it
//! over, so a client that sends the first fragment of a large message and then trickles (or
//! stops) holds that memory for as long as it likes. The meter follows the frame headers in the
//! bytes as they are read, counts the bytes of the message not yet finished, and charges them
//! to a [`Budget`] shared by every session of one caller; the relay ends a session whose
//! message stays unfinished longer than [`Limits::unfinished_timeout`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
    SEC_WEBSOCKET_VERSION, UPGRADE,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue as AxumHeaderValue, StatusCode};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Error as TError;
use tokio_tungstenite::tungstenite::Message as TMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame as TClose, Role, WebSocketConfig};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A socket this server opened to an upstream.
pub type Upstream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long opening an upstream socket may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a relay looks at how long its client's message has been unfinished.
const UNFINISHED_CHECK: Duration = Duration::from_millis(500);

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

/// Accepts a client's upgrade request through axum, offering back the subprotocols it asked for
/// and accepting messages up to `max_message` bytes: for a server that reads the socket itself
/// (sandboxd's RFB handshake). Relays use [`accept`].
pub async fn accept_axum(
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

/// What a relay's client may do.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest message the client may send.
    pub max_message: usize,
    /// How long a message the client began may stay unfinished.
    pub unfinished_timeout: Duration,
    /// Where the bytes of unfinished messages are charged, shared by the sessions of one
    /// caller; `None`: only `max_message` bounds them.
    pub budget: Option<Arc<Budget>>,
}

impl Limits {
    /// `max_message`, the default 30 s for an unfinished message, no shared budget.
    pub fn new(max_message: usize) -> Self {
        Self {
            max_message,
            unfinished_timeout: Duration::from_secs(30),
            budget: None,
        }
    }
}

/// Bytes of unfinished client messages that a group of sessions may hold at once.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
}

impl Budget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Where the reader is in the client's frame stream.
#[derive(Debug)]
enum FrameState {
    /// Reading a frame header: the bytes so far.
    Header { bytes: [u8; 14], have: usize },
    /// Inside a frame's payload.
    Payload {
        remaining: u64,
        data: bool,
        fin: bool,
    },
}

/// Follows the frames of the bytes a client sends (headers only: payloads are skipped) and
/// counts the bytes of the data message not finished yet, charged to the budget until its last
/// frame has been read. Control frames (ping, pong, close) between fragments do not finish it.
#[derive(Debug)]
pub struct Meter {
    inner: Mutex<MeterState>,
    budget: Option<Arc<Budget>>,
}

#[derive(Debug)]
struct MeterState {
    frame: FrameState,
    /// Bytes of the unfinished data message (headers included).
    pending: usize,
    /// When its first byte arrived.
    since: Option<Instant>,
    /// Why reading was refused (the budget ran out).
    refused: Option<String>,
}

impl Meter {
    fn new(budget: Option<Arc<Budget>>) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(MeterState {
                frame: FrameState::Header {
                    bytes: [0; 14],
                    have: 0,
                },
                pending: 0,
                since: None,
                refused: None,
            }),
            budget,
        })
    }

    /// How long the message in progress has been unfinished (`None`: none is).
    pub fn unfinished_for(&self) -> Option<Duration> {
        self.inner
            .lock()
            .ok()
            .and_then(|state| state.since.map(|since| since.elapsed()))
    }

    /// Why reading was refused, if it was.
    pub fn refused(&self) -> Option<String> {
        self.inner
            .lock()
            .ok()
            .and_then(|state| state.refused.clone())
    }

    /// Accounts for `bytes` just read; `Err` says why the session must end.
    fn read(&self, mut bytes: &[u8]) -> Result<(), String> {
        let Ok(mut guard) = self.inner.lock() else {
            return Err("the relay's meter is unusable".into());
        };
        let state = &mut *guard;
        let mut charged = 0usize;
        let mut released = 0usize;
        while !bytes.is_empty() {
            match &mut state.frame {
                FrameState::Header {
                    bytes: header,
                    have,
                } => {
                    let need = header_len(&header[..*have]);
                    let take = (need - *have).min(bytes.len());
                    header[*have..*have + take].copy_from_slice(&bytes[..take]);
                    *have += take;
                    bytes = &bytes[take..];
                    if *have < header_len(&header[..*have]) {
                        continue;
                    }
                    let (fin, opcode, length) = parse_header(&header[..*have]);
                    let size = *have;
                    // Continuation (0), text (1) and binary (2) frames carry a data message.
                    let data = opcode <= 2;
                    if data {
                        state.since.get_or_insert_with(Instant::now);
                        state.pending += size;
                        charged += size;
                    }
                    state.frame = FrameState::Payload {
                        remaining: length,
                        data,
                        fin,
                    };
                }
                FrameState::Payload { remaining, .. } => {
                    let take = (*remaining).min(bytes.len() as u64) as usize;
                    *remaining -= take as u64;
                    bytes = &bytes[take..];
                    if let FrameState::Payload { data: true, .. } = state.frame {
                        state.pending += take;
                        charged += take;
                    }
                }
            }
            // A frame whose payload is all read (an empty one as soon as its header is).
            if let FrameState::Payload {
                remaining: 0,
                data,
                fin,
            } = state.frame
            {
                if data && fin {
                    released += state.pending;
                    state.pending = 0;
                    state.since = None;
                }
                state.frame = FrameState::Header {
                    bytes: [0; 14],
                    have: 0,
                };
            }
        }
        let Some(budget) = &self.budget else {
            return Ok(());
        };
        // Charged first, so a refusal below sees everything this read holds.
        let used = budget.used.fetch_add(charged, Ordering::Relaxed) + charged;
        budget.used.fetch_sub(released, Ordering::Relaxed);
        let used = used.saturating_sub(released);
        if charged > released && used > budget.limit {
            let why = format!(
                "unfinished messages over the limit of {} MiB across this caller's sessions",
                budget.limit / (1024 * 1024)
            );
            state.refused = Some(why.clone());
            return Err(why);
        }
        Ok(())
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if let (Some(budget), Ok(state)) = (&self.budget, self.inner.get_mut()) {
            budget.used.fetch_sub(state.pending, Ordering::Relaxed);
        }
    }
}

/// The length of a frame header whose first `have.len()` bytes are known (2 until the second
/// byte says more).
fn header_len(have: &[u8]) -> usize {
    let Some(second) = have.get(1) else {
        return 2;
    };
    let extended = match second & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if second & 0x80 != 0 { 4 } else { 0 };
    2 + extended + mask
}

/// (FIN, opcode, payload length) of a complete frame header.
fn parse_header(header: &[u8]) -> (bool, u8, u64) {
    let fin = header[0] & 0x80 != 0;
    let opcode = header[0] & 0x0f;
    let length = match header[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([header[2], header[3]])),
        127 => header[2..10]
            .iter()
            .fold(0u64, |length, byte| (length << 8) | u64::from(*byte)),
        short => u64::from(short),
    };
    (fin, opcode, length)
}

/// The upgraded connection, read through a [`Meter`].
pub struct MeteredIo<T> {
    inner: T,
    meter: Arc<Meter>,
}

impl<T: AsyncRead + Unpin> AsyncRead for MeteredIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => Poll::Ready(
                this.meter
                    .read(&buf.filled()[before..])
                    .map_err(std::io::Error::other),
            ),
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for MeteredIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A relay's client: the accepted socket, its meter and its limits.
pub struct ClientSocket {
    socket: WebSocketStream<MeteredIo<TokioIo<Upgraded>>>,
    meter: Arc<Meter>,
    limits: Limits,
}

/// An accepted upgrade: answer the request with [`Accepted::on_upgrade`].
pub struct Accepted {
    on_upgrade: OnUpgrade,
    accept_key: String,
    protocol: Option<String>,
    limits: Limits,
}

impl Accepted {
    /// The 101 answer; `serve` runs with the client's socket once the connection is upgraded.
    pub fn on_upgrade<F, Fut>(self, serve: F) -> Response
    where
        F: FnOnce(ClientSocket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Accepted {
            on_upgrade,
            accept_key,
            protocol,
            limits,
        } = self;
        tokio::spawn(async move {
            let upgraded = match on_upgrade.await {
                Ok(upgraded) => upgraded,
                Err(error) => {
                    tracing::debug!(%error, "the WebSocket upgrade did not complete");
                    return;
                }
            };
            let meter = Meter::new(limits.budget.clone());
            let io = MeteredIo {
                inner: TokioIo::new(upgraded),
                meter: meter.clone(),
            };
            let config = WebSocketConfig::default()
                .max_message_size(Some(limits.max_message))
                .max_frame_size(Some(limits.max_message));
            let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
            serve(ClientSocket {
                socket,
                meter,
                limits,
            })
            .await;
        });
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(CONNECTION, AxumHeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, AxumHeaderValue::from_static("websocket"));
        if let Ok(value) = AxumHeaderValue::from_str(&accept_key) {
            headers.insert(SEC_WEBSOCKET_ACCEPT, value);
        }
        if let Some(value) = protocol.and_then(|p| AxumHeaderValue::from_str(&p).ok()) {
            headers.insert(SEC_WEBSOCKET_PROTOCOL, value);
        }
        response
    }
}

/// Accepts a client's upgrade request for a relay (HTTP/1.1), offering back the first
/// subprotocol it asked for; the client's socket keeps to `limits`.
pub fn accept(
    parts: &mut Parts,
    protocols: Option<&str>,
    limits: Limits,
) -> Result<Accepted, WsError> {
    let header = |name| {
        parts
            .headers
            .get(name)
            .and_then(|v: &AxumHeaderValue| v.to_str().ok())
            .unwrap_or_default()
    };
    if parts.method != axum::http::Method::GET {
        return Err(WsError::NotUpgrade("a WebSocket upgrade is a GET".into()));
    }
    let connection_upgrade = header(CONNECTION)
        .split(',')
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    if !connection_upgrade || !header(UPGRADE).eq_ignore_ascii_case("websocket") {
        return Err(WsError::NotUpgrade(
            "`Connection: upgrade` and `Upgrade: websocket` are required".into(),
        ));
    }
    if header(SEC_WEBSOCKET_VERSION) != "13" {
        return Err(WsError::NotUpgrade(
            "`Sec-WebSocket-Version: 13` is required".into(),
        ));
    }
    let key = header(SEC_WEBSOCKET_KEY);
    if key.is_empty() {
        return Err(WsError::NotUpgrade(
            "`Sec-WebSocket-Key` is required".into(),
        ));
    }
    let accept_key = derive_accept_key(key.as_bytes());
    let on_upgrade = parts
        .extensions
        .remove::<OnUpgrade>()
        .ok_or_else(|| WsError::NotUpgrade("the connection cannot be upgraded".into()))?;
    let protocol = protocols.and_then(|list| {
        list.split(',')
            .map(str::trim)
            .find(|p| !p.is_empty())
            .map(str::to_owned)
    });
    Ok(Accepted {
        on_upgrade,
        accept_key,
        protocol,
        limits,
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

/// Why reading the client failed, in words for its close frame.
fn client_error(meter: &Meter, error: &TError) -> RelayEnd {
    if let Some(why) = meter.refused() {
        return RelayEnd::Refused(why);
    }
    match error {
        TError::Capacity(capacity) => RelayEnd::Refused(format!("message refused: {capacity}")),
        _ => RelayEnd::ClientClosed,
    }
}

/// Relays until one side ends, the filter refuses, `stop` resolves, or the client breaks its
/// limits.
pub async fn relay(
    client: ClientSocket,
    upstream: Upstream,
    mut filter: Option<Box<dyn RelayFilter>>,
    stop: impl Future<Output = String>,
) -> RelayEnd {
    let ClientSocket {
        socket,
        meter,
        limits,
    } = client;
    let (mut client_tx, mut client_rx) = socket.split();
    let (mut upstream_tx, mut upstream_rx) = upstream.split();
    let mut unfinished = tokio::time::interval(UNFINISHED_CHECK);
    unfinished.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    let end = loop {
        tokio::select! {
            // Authority is checked first: once it ended, nothing more passes.
            biased;
            why = &mut stop => break RelayEnd::Stopped(why),
            _ = unfinished.tick() => {
                if meter.unfinished_for().is_some_and(|held| held > limits.unfinished_timeout) {
                    break RelayEnd::Refused(format!(
                        "a message stayed unfinished for more than {} s",
                        limits.unfinished_timeout.as_secs_f32()
                    ));
                }
            }
            message = client_rx.next() => {
                let message = match message {
                    Some(Ok(message)) => message,
                    Some(Err(error)) => break client_error(&meter, &error),
                    None => break RelayEnd::ClientClosed,
                };
                let message = match (&mut filter, message) {
                    (Some(filter), TMessage::Binary(bytes)) => match filter.client_bytes(&bytes) {
                        Ok(out) if out.is_empty() => continue,
                        Ok(out) => TMessage::Binary(out.into()),
                        Err(why) => break RelayEnd::Refused(why),
                    },
                    (Some(_), TMessage::Text(_)) => {
                        break RelayEnd::Refused("text frames are not allowed on this session".into())
                    }
                    (_, TMessage::Close(_)) => break RelayEnd::ClientClosed,
                    // Raw frames are never read, only written.
                    (_, TMessage::Frame(_)) => continue,
                    (_, message) => message,
                };
                if upstream_tx.send(message).await.is_err() {
                    break RelayEnd::UpstreamClosed;
                }
            }
            message = upstream_rx.next() => {
                let Some(Ok(message)) = message else { break RelayEnd::UpstreamClosed };
                if matches!(message, TMessage::Close(_)) {
                    break RelayEnd::UpstreamClosed;
                }
                if matches!(message, TMessage::Frame(_)) {
                    continue;
                }
                if let (Some(filter), TMessage::Binary(bytes)) = (&mut filter, &message)
                    && let Err(why) = filter.upstream_bytes(bytes)
                {
                    break RelayEnd::Refused(why);
                }
                if client_tx.send(message).await.is_err() {
                    break RelayEnd::ClientClosed;
                }
            }
        }
    };
    let (code, reason) = match &end {
        RelayEnd::Refused(why) | RelayEnd::Stopped(why) => (CloseCode::Policy, why.clone()),
        _ => (CloseCode::Normal, String::new()),
    };
    // A close reason is at most 123 bytes; cut on a character boundary.
    let mut reason = reason;
    while reason.len() > 120 {
        reason.pop();
    }
    let _ = client_tx
        .send(TMessage::Close(Some(TClose {
            code,
            reason: reason.as_str().into(),
        })))
        .await;
    let _ = upstream_tx.send(TMessage::Close(None)).await;
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame.
    fn frame(fin: bool, opcode: u8, payload_len: usize) -> Vec<u8> {
        let mut bytes = vec![(u8::from(fin) << 7) | opcode];
        match payload_len {
            0..=125 => bytes.push(0x80 | payload_len as u8),
            126..=65535 => {
                bytes.push(0x80 | 126);
                bytes.extend_from_slice(&(payload_len as u16).to_be_bytes());
            }
            _ => {
                bytes.push(0x80 | 127);
                bytes.extend_from_slice(&(payload_len as u64).to_be_bytes());
            }
        }
        bytes.extend_from_slice(&[1, 2, 3, 4]);
        bytes.extend(std::iter::repeat_n(9u8, payload_len));
        bytes
    }

    fn pending(meter: &Meter) -> usize {
        meter.inner.lock().map(|state| state.pending).unwrap_or(0)
    }

    #[test]
    fn the_meter_follows_fragments_whatever_the_read_sizes() {
        let mut stream = frame(false, 2, 300);
        stream.extend(frame(true, 9, 4)); // a ping between fragments
        stream.extend(frame(false, 0, 70_000));
        let unfinished = stream.len();
        stream.extend(frame(true, 0, 0)); // an empty last fragment
        stream.extend(frame(true, 1, 5)); // a whole text message
        for chunk in [1, 2, 3, 7, 64, 4096, stream.len()] {
            let budget = Budget::new(1 << 20);
            let meter = Meter::new(Some(budget.clone()));
            let mut read = 0;
            for piece in stream[..unfinished].chunks(chunk) {
                meter.read(piece).expect("within the budget");
                read += piece.len();
            }
            assert_eq!(read, unfinished);
            // The ping's bytes are not the message's.
            assert_eq!(pending(&meter), unfinished - 10, "chunks of {chunk}");
            assert_eq!(budget.used(), unfinished - 10);
            assert!(meter.unfinished_for().is_some());
            for piece in stream[unfinished..].chunks(chunk) {
                meter.read(piece).expect("within the budget");
            }
            assert_eq!(pending(&meter), 0, "chunks of {chunk}");
            assert_eq!(budget.used(), 0);
            assert!(meter.unfinished_for().is_none());
        }
    }

    #[test]
    fn the_budget_refuses_and_a_dropped_meter_gives_its_share_back() {
        let budget = Budget::new(1000);
        let first = Meter::new(Some(budget.clone()));
        let second = Meter::new(Some(budget.clone()));
        first
            .read(&frame(false, 2, 600))
            .expect("within the budget");
        let refused = second.read(&frame(false, 2, 600)).expect_err("over it");
        assert!(refused.contains("over the limit"), "{refused}");
        assert_eq!(second.refused().as_deref(), Some(refused.as_str()));
        drop(second);
        assert_eq!(
            budget.used(),
            608,
            "the first frame: 8 header bytes and 600"
        );
        drop(first);
        assert_eq!(budget.used(), 0);
    }
}
