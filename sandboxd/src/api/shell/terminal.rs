//! `GET /v1/shell/ws`: an interactive terminal over a WebSocket, in AIO's message format.
//!
//! Text frames carry JSON. Client: `{"type":"input","data":"ls\n"}`,
//! `{"type":"resize","data":{"cols":80,"rows":24}}`, `{"type":"pong",...}` (binary frames are
//! typed as they are). Server: `session_id`, `ready`, `output`, a `ping` every 30 s, `exit` when
//! the shell ends, and `error` for a message it could not use. Closing the socket ends the shell
//! and every process of its session.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use tokio::sync::mpsc;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioQuery;
use crate::api::types::{
    ErrorBody, TerminalClientMessage, TerminalClientMessageKind, TerminalQuery, TerminalReady,
    TerminalResize, TerminalServerMessage,
};
use crate::shell::{Terminal, TerminalSize};

pub const PATH: &str = "/v1/shell/ws";
/// Largest message accepted from a client.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;
const PING_EVERY: Duration = Duration::from_secs(30);
/// Largest window accepted in `resize`.
const MAX_DIMENSION: f64 = 1000.0;
/// How long output is still collected after the shell exits.
const EXIT_DRAIN: Duration = Duration::from_millis(200);

/// Opens a terminal (`bash -l` in the workspace) and upgrades to a WebSocket carrying it.
#[utoipa::path(get, path = "/v1/shell/ws", tag = "shell",
    params(TerminalQuery),
    responses(
        (status = 101, description = "switching to the WebSocket protocol"),
        (status = 400, description = "not a WebSocket upgrade request", body = ErrorBody),
        (status = 403, description = "the request's Origin is not allowed", body = ErrorBody),
        (status = 409, description = "a terminal with this session_id is open", body = ErrorBody),
    ))]
pub async fn terminal_ws(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    AioQuery(query): AioQuery<TerminalQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    // A web page must not open a terminal from a user's browser (WebSockets skip CORS).
    agentbox_http::origin::check(&headers, &state.settings.allowed_origins)
        .map_err(|e| ApiError::forbidden(e.to_string()))?;
    let upgrade = upgrade.map_err(|rejection| {
        ApiError::new(
            rejection.status(),
            format!(
                "{PATH} needs a WebSocket upgrade request: {}",
                rejection.body_text()
            ),
        )
    })?;
    let id = match query.session_id {
        Some(id) => Some(super::session_id("session_id", id).map_err(|mut error| {
            error.loc = Some(vec!["query".into(), "session_id".into()]);
            error
        })?),
        None => None,
    };
    let terminal = state.shell.open_terminal(id, TerminalSize::default())?;
    // If the upgrade never completes, the closure and the terminal in it are dropped, which
    // ends the shell.
    Ok(upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| serve(socket, terminal)))
}

/// What a client message asks for.
enum Request {
    Input(Vec<u8>),
    Resize(TerminalSize),
    Nothing,
}

async fn serve(mut socket: WebSocket, terminal: Terminal) {
    let terminal = Arc::new(terminal);
    let id = terminal.id().to_string();
    // Typing goes through its own task, so a program that does not read its input cannot stop
    // its output from reaching the client.
    let (input_tx, mut input_rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = {
        let terminal = terminal.clone();
        tokio::spawn(async move {
            while let Some(data) = input_rx.recv().await {
                if let Err(error) = terminal.write_all(&data).await {
                    tracing::debug!(%error, "terminal input closed");
                    break;
                }
            }
        })
    };
    let size = TerminalSize::default();
    let greeting = [
        TerminalServerMessage::SessionId(id.clone()),
        TerminalServerMessage::Ready(TerminalReady {
            session_id: id.clone(),
            pid: terminal.pid(),
            cols: size.cols,
            rows: size.rows,
        }),
    ];
    let mut open = true;
    for message in greeting {
        open = open && send(&mut socket, &message).await;
    }
    let mut exit = terminal.take_exit();
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    let mut decoder = Utf8Decoder::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut exit_code = None;
    while open {
        tokio::select! {
            message = socket.recv() => match message {
                Some(Ok(Message::Text(text))) => match parse(text.as_str()) {
                    Ok(Request::Input(data)) => open = input_tx.send(data).await.is_ok(),
                    Ok(Request::Resize(size)) => {
                        if let Err(error) = terminal.resize(size) {
                            open = send(&mut socket, &TerminalServerMessage::Error(format!("resize failed: {error}"))).await;
                        }
                    }
                    Ok(Request::Nothing) => {}
                    Err(problem) => open = send(&mut socket, &TerminalServerMessage::Error(problem)).await,
                },
                Some(Ok(Message::Binary(data))) => open = input_tx.send(data.to_vec()).await.is_ok(),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => open = false,
            },
            read = terminal.read(&mut buf) => match read {
                Ok(n) if n > 0 => {
                    let text = decoder.push(&buf[..n]);
                    if !text.is_empty() {
                        open = send(&mut socket, &TerminalServerMessage::Output(text)).await;
                    }
                }
                _ => {
                    // Every process let go of the terminal: the shell has exited.
                    if let Some(exit) = exit.take()
                        && let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(2), exit).await
                    {
                        exit_code = Some(status.as_shell_code());
                    }
                    break;
                }
            },
            status = wait_exit(&mut exit) => {
                exit_code = Some(status);
                // Send what the shell printed last.
                while let Ok(Ok(n)) = tokio::time::timeout(EXIT_DRAIN, terminal.read(&mut buf)).await {
                    if n == 0 {
                        break;
                    }
                    let text = decoder.push(&buf[..n]);
                    if !text.is_empty() && !send(&mut socket, &TerminalServerMessage::Output(text)).await {
                        break;
                    }
                }
                break;
            }
            _ = ping.tick() => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                open = send(&mut socket, &TerminalServerMessage::Ping(now.as_millis() as u64)).await;
            }
        }
    }
    if let Some(code) = exit_code {
        let _ = send(&mut socket, &TerminalServerMessage::Exit(code)).await;
        let _ = socket.send(Message::Close(None)).await;
    }
    writer.abort();
    // The writer task's reference goes with it; the last one ends the shell's session.
    let _ = writer.await;
    drop(terminal);
}

/// Resolves with bash's exit code once it has exited (never, after it was taken).
async fn wait_exit(
    exit: &mut Option<tokio::sync::oneshot::Receiver<supervisor::ExitStatus>>,
) -> i32 {
    match exit.as_mut() {
        Some(receiver) => {
            let status = receiver.await;
            *exit = None;
            status.map(|s| s.as_shell_code()).unwrap_or(-1)
        }
        None => std::future::pending().await,
    }
}

async fn send(socket: &mut WebSocket, message: &TerminalServerMessage) -> bool {
    match serde_json::to_string(message) {
        Ok(text) => socket.send(Message::Text(text.into())).await.is_ok(),
        Err(error) => {
            tracing::error!(%error, "cannot encode a terminal message");
            false
        }
    }
}

fn parse(text: &str) -> Result<Request, String> {
    let message: TerminalClientMessage =
        serde_json::from_str(text).map_err(|e| format!("invalid message: {e}"))?;
    match message.kind {
        TerminalClientMessageKind::Input => match message.data {
            serde_json::Value::String(data) => Ok(Request::Input(data.into_bytes())),
            _ => Err("input: `data` must be a string".into()),
        },
        TerminalClientMessageKind::Resize => {
            let size: TerminalResize = serde_json::from_value(message.data)
                .map_err(|e| format!("resize: `data` must be {{\"cols\": N, \"rows\": N}}: {e}"))?;
            let dimension = |name: &str, value: f64| {
                if value.fract() == 0.0 && (1.0..=MAX_DIMENSION).contains(&value) {
                    Ok(value as u16)
                } else {
                    Err(format!(
                        "resize: `{name}` must be a whole number from 1 to {MAX_DIMENSION}, got {value}"
                    ))
                }
            };
            Ok(Request::Resize(TerminalSize {
                cols: dimension("cols", size.cols)?,
                rows: dimension("rows", size.rows)?,
            }))
        }
        TerminalClientMessageKind::Pong | TerminalClientMessageKind::Ping => Ok(Request::Nothing),
    }
}

/// Turns a byte stream into text without breaking characters split across reads.
#[derive(Default)]
struct Utf8Decoder {
    /// The start of a character whose remaining bytes have not arrived yet (at most 3 bytes).
    pending: Vec<u8>,
}

impl Utf8Decoder {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut text = String::with_capacity(self.pending.len());
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    text.push_str(&String::from_utf8_lossy(valid));
                    match error.error_len() {
                        Some(len) => {
                            text.push('\u{fffd}');
                            rest = &after[len..];
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_split_across_reads_stay_whole() {
        let mut decoder = Utf8Decoder::default();
        let bytes = "añb€".as_bytes();
        let mut out = String::new();
        for byte in bytes {
            out.push_str(&decoder.push(std::slice::from_ref(byte)));
        }
        assert_eq!(out, "añb€");
        assert_eq!(decoder.push(&[0xff, b'x']), "\u{fffd}x");
    }

    #[test]
    fn client_messages_are_checked() {
        assert!(matches!(
            parse(r#"{"type":"input","data":"ls\n"}"#),
            Ok(Request::Input(d)) if d == b"ls\n"
        ));
        assert!(matches!(
            parse(r#"{"type":"resize","data":{"cols":100,"rows":40.0}}"#),
            Ok(Request::Resize(TerminalSize {
                cols: 100,
                rows: 40
            }))
        ));
        assert!(matches!(
            parse(r#"{"type":"pong","timestamp":5}"#),
            Ok(Request::Nothing)
        ));
        for bad in [
            r#"{"type":"resize","data":{"cols":0,"rows":40}}"#,
            r#"{"type":"resize","data":{"cols":1.5,"rows":40}}"#,
            r#"{"type":"input","data":5}"#,
            r#"{"type":"launch"}"#,
            "not json",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
