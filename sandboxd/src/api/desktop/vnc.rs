//! The remote desktop on sandboxd's own port: noVNC's files under `/vnc/` and the VNC
//! WebSocket at `/vnc/websockify` (and `/websockify`, where noVNC looks by default).
//!
//! Access: the API key, or a viewer session cookie obtained with a ticket
//! (`/vnc/...?ticket=...`, see [`crate::tickets`]). A WebSocket with an `Origin` must come from
//! this server's own origin or an allowed one. `?view_only=true` (or a view-only ticket) opens a
//! view-only session: sandboxd authenticates to the VNC server with its view-only password, so
//! the server itself drops that session's input.
//!
//! On the WebSocket, sandboxd plays the server's half of the RFB handshake (version 3.8,
//! security None; see [`crate::vnc::rfb`]) and relays raw bytes after it, so the messages a
//! client sends after the handshake are plain RFB client messages from their first byte.

use std::time::Duration;

use axum::Extension;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocket};
use axum::extract::{Path, Query, Request, State};
use axum::http::header::{self, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;
use tower_http::services::ServeDir;

use crate::api::AppState;
use crate::api::auth::ViewerAccess;
use crate::api::error::ApiError;
use crate::vnc::{ViewMode, VncError, rfb};

/// The largest WebSocket message accepted from a viewer.
const MAX_MESSAGE: usize = 4 * 1024 * 1024;
/// How long a client may take for each step of the handshake.
const HANDSHAKE_STEP: Duration = Duration::from_secs(10);
/// The page `/vnc/` and `/vnc/index.html` lead to.
const VIEWER_PAGE: &str =
    "vnc.html?autoconnect=true&resize=scale&reconnect=true&path=vnc/websockify";

/// Routes under `/vnc/` (key or viewer session).
pub fn viewer_routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/vnc", get(index))
        .route("/vnc/", get(index))
        .route("/vnc/{*path}", get(file_or_socket))
}

/// Routes that take only the key.
pub fn keyed_routes() -> axum::Router<AppState> {
    axum::Router::new().route("/websockify", get(websockify))
}

#[derive(Debug, Default, Deserialize)]
pub struct ViewerQuery {
    /// Open a view-only session.
    #[serde(default, deserialize_with = "lenient_bool")]
    pub view_only: bool,
}

/// Accepts `true/false/1/0/yes/no` (noVNC passes its settings as strings).
fn lenient_bool<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    let text = String::deserialize(deserializer)?;
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        other => Err(serde::de::Error::custom(format!(
            "view_only must be true or false, got {other:?}"
        ))),
    }
}

fn query(uri: &Uri) -> Result<ViewerQuery, ApiError> {
    Query::<ViewerQuery>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::invalid_at(vec!["query".into(), "view_only".into()], e.body_text()))
}

async fn index(uri: Uri) -> Redirect {
    let view_only = query(&uri).map(|q| q.view_only).unwrap_or(false);
    if view_only {
        Redirect::to(&format!(
            "/vnc/{VIEWER_PAGE}%3Fview_only%3Dtrue&view_only=true"
        ))
    } else {
        Redirect::to(&format!("/vnc/{VIEWER_PAGE}"))
    }
}

async fn file_or_socket(
    State(state): State<AppState>,
    Extension(access): Extension<ViewerAccess>,
    Path(path): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    match path.as_str() {
        "websockify" => websocket(state, access, request).await,
        "index.html" => Ok(index(request.uri().clone()).await.into_response()),
        _ => static_file(&state, request).await,
    }
}

/// noVNC's files, confined to its directory.
async fn static_file(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let (mut parts, _) = request.into_parts();
    let rest = parts
        .uri
        .path()
        .strip_prefix("/vnc")
        .unwrap_or("/")
        .to_string();
    parts.uri = rest
        .parse()
        .map_err(|_| ApiError::bad_request("bad path"))?;
    let request = Request::from_parts(parts, Body::empty());
    let service = ServeDir::new(&state.settings.vnc.novnc_dir);
    let mut response = match service.oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(infallible) => match infallible {},
    };
    if response.status() == StatusCode::NOT_FOUND {
        return Err(ApiError::not_found("no such file in the noVNC client"));
    }
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    Ok(response)
}

/// `GET /websockify`: the key only.
async fn websockify(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    websocket(state, ViewerAccess::Key, request).await
}

async fn websocket(
    state: AppState,
    access: ViewerAccess,
    request: Request,
) -> Result<Response, ApiError> {
    agentbox_http::origin::check(request.headers(), &state.settings.allowed_origins)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    let asked = query(request.uri())?.view_only;
    let mode = if asked || access == ViewerAccess::ViewOnlySession {
        ViewMode::View
    } else {
        ViewMode::Control
    };
    let protocols = agentbox_http::ws::requested_protocols(request.headers());
    let (mut parts, _) = request.into_parts();
    let upgrade = agentbox_http::ws::accept_axum(&mut parts, protocols.as_deref(), MAX_MESSAGE)
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Connect before upgrading, so a failure is an HTTP answer the client can read.
    let upstream = state.vnc.open(mode).await.map_err(vnc_error)?;
    let activity = state.activity.clone();
    Ok(upgrade.on_upgrade(move |socket| async move {
        let _active = activity.hold();
        tracing::info!(view_only = mode == ViewMode::View, "VNC viewer attached");
        let end = serve(socket, upstream).await;
        tracing::info!(?end, "VNC viewer detached");
    }))
}

fn vnc_error(error: VncError) -> ApiError {
    match error {
        VncError::NoProgram(_) => ApiError::not_found(error.to_string()),
        _ => ApiError::unavailable(error.to_string()),
    }
}

/// Bytes from a client's binary frames, read across frame boundaries.
struct ClientBytes {
    buffer: Vec<u8>,
}

impl ClientBytes {
    async fn read(&mut self, socket: &mut WebSocket, n: usize) -> Result<Vec<u8>, String> {
        while self.buffer.len() < n {
            let message = tokio::time::timeout(HANDSHAKE_STEP, socket.recv())
                .await
                .map_err(|_| "the viewer did not answer the handshake in time".to_string())?;
            match message {
                Some(Ok(Message::Binary(bytes))) => self.buffer.extend_from_slice(&bytes),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Text(_))) => return Err("text frames are not RFB".into()),
                _ => return Err("the viewer left during the handshake".into()),
            }
        }
        Ok(self.buffer.drain(..n).collect())
    }
}

/// Plays the server's half of the handshake, then relays bytes both ways.
async fn serve(mut socket: WebSocket, upstream: TcpStream) -> String {
    let mut client = ClientBytes { buffer: Vec::new() };
    let binary = |bytes: &[u8]| Message::Binary(bytes.to_vec().into());
    if socket.send(binary(rfb::SERVER_VERSION)).await.is_err() {
        return "viewer left".into();
    }
    let version = match client.read(&mut socket, 12).await {
        Ok(version) => version,
        Err(why) => return why,
    };
    if let Err(error) = rfb::check_client_version(&version) {
        let _ = socket
            .send(binary(&rfb::failure_after_version(&error.to_string())))
            .await;
        return error.to_string();
    }
    if socket.send(binary(&rfb::SECURITY_TYPES)).await.is_err() {
        return "viewer left".into();
    }
    let choice = match client.read(&mut socket, 1).await {
        Ok(choice) => choice[0],
        Err(why) => return why,
    };
    if let Err(error) = rfb::check_security_choice(choice) {
        let mut failed = vec![0, 0, 0, 1];
        failed.extend(rfb::failure_after_version(&error.to_string())[1..].iter());
        let _ = socket.send(binary(&failed)).await;
        return error.to_string();
    }
    if socket.send(binary(&rfb::SECURITY_OK)).await.is_err() {
        return "viewer left".into();
    }
    // What the client sent beyond the handshake starts with ClientInit: always share the
    // desktop, so one viewer never disconnects the others.
    let mut early = std::mem::take(&mut client.buffer);
    if let Some(shared) = early.first_mut() {
        *shared = 1;
    }
    relay(socket, upstream, early).await
}

async fn relay(socket: WebSocket, upstream: TcpStream, early: Vec<u8>) -> String {
    let (mut server_rx, mut server_tx) = upstream.into_split();
    let (mut client_tx, mut client_rx) = socket.split();
    let mut init_pending = early.is_empty();
    if !early.is_empty() && server_tx.write_all(&early).await.is_err() {
        return "the VNC server closed".into();
    }
    let to_server = async {
        while let Some(message) = client_rx.next().await {
            match message {
                Ok(Message::Binary(bytes)) => {
                    let mut bytes = bytes.to_vec();
                    if init_pending && let Some(shared) = bytes.first_mut() {
                        *shared = 1;
                        init_pending = false;
                    }
                    if server_tx.write_all(&bytes).await.is_err() {
                        return "the VNC server closed".to_string();
                    }
                }
                Ok(Message::Ping(_) | Message::Pong(_)) => {}
                Ok(Message::Text(_)) => return "text frames are not RFB".to_string(),
                Ok(Message::Close(_)) | Err(_) => break,
            }
        }
        "the viewer left".to_string()
    };
    let to_client = async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match server_rx.read(&mut buffer).await {
                Ok(0) | Err(_) => return "the VNC server closed".to_string(),
                Ok(n) => {
                    if client_tx
                        .send(Message::Binary(buffer[..n].to_vec().into()))
                        .await
                        .is_err()
                    {
                        return "the viewer left".to_string();
                    }
                }
            }
        }
    };
    tokio::select! {
        why = to_server => why,
        why = to_client => why,
    }
}
