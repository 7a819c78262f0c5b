//! The terminal WebSocket: a real pseudo-terminal that ends with its socket, and a plain GET
//! of it refused with a clear error.

use std::path::Path;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::{PATIENCE, eventually, gone, session_members, start};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_json(socket: &mut Socket) -> Value {
    loop {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .expect("a message in time")
            .expect("the socket is open")
            .unwrap();
        if let Message::Text(text) = message {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

/// Reads output messages until their text contains `needle`; returns all output read.
/// The terminal's output up to `needle`. Bounded as a whole (the server's pings would keep a
/// per-message timeout from ever firing), and a failure shows what did arrive.
async fn output_until(socket: &mut Socket, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seen = String::new();
    while !seen.contains(needle) {
        let message = tokio::time::timeout_at(deadline, next_json(socket))
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} in time; the terminal printed {seen:?}"));
        if message["type"] == "output" {
            seen.push_str(message["data"].as_str().unwrap());
        }
    }
    seen
}

/// The next message of `kind`, skipping others (output, pings), within [`PATIENCE`].
async fn message_of_type(socket: &mut Socket, kind: &str) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let message = tokio::time::timeout_at(deadline, next_json(socket))
            .await
            .unwrap_or_else(|_| panic!("no {kind:?} message in time"));
        if message["type"] == kind {
            return message;
        }
    }
}

async fn send_json(socket: &mut Socket, value: Value) {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_is_a_real_pty_that_ends_with_its_socket() {
    let sandbox = start().await;
    let url = format!(
        "{}/v1/shell/ws?session_id=term-1",
        sandbox.base.replace("http", "ws")
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let first = next_json(&mut socket).await;
    assert_eq!(first, json!({"type": "session_id", "data": "term-1"}));
    let ready = next_json(&mut socket).await;
    assert_eq!(ready["type"], "ready");
    let pid = ready["data"]["pid"].as_i64().unwrap() as i32;
    assert!(!gone(pid));
    assert!(
        sandbox.activity.idle_for().is_zero(),
        "an open terminal counts as activity"
    );

    // A second terminal with the same id is refused while this one is open.
    let refused = tokio_tungstenite::connect_async(&url).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 409)
        }
        other => panic!("expected 409, got {other:?}"),
    }

    // The typed line is echoed as `hel''lo`; only the command's output reads `hello`.
    send_json(
        &mut socket,
        json!({"type": "input", "data": "echo hel''lo\n"}),
    )
    .await;
    output_until(&mut socket, "hello\r\n").await;

    send_json(
        &mut socket,
        json!({"type": "resize", "data": {"cols": 100, "rows": 40}}),
    )
    .await;
    send_json(
        &mut socket,
        json!({"type": "input", "data": "stty size; tty\n"}),
    )
    .await;
    // One wait for the last line: both lines often arrive in one output message, and a second
    // wait started after the first had seen them both waited for output that had already come.
    let seen = output_until(&mut socket, "/dev/pts/").await;
    assert!(seen.contains("40 100\r\n"), "{seen}");

    // Bad messages get an error message; the terminal stays usable.
    send_json(
        &mut socket,
        json!({"type": "resize", "data": {"cols": 0, "rows": 40}}),
    )
    .await;
    let message = message_of_type(&mut socket, "error").await;
    assert!(message["data"].as_str().unwrap().contains("cols"));

    // A job in the background of the terminal, then close the socket: all of it ends.
    send_json(
        &mut socket,
        json!({"type": "input", "data": "sleep 1000 &\n"}),
    )
    .await;
    output_until(&mut socket, "[1]").await;
    assert!(
        session_members(pid).len() >= 2,
        "bash and sleep run in the terminal's session"
    );
    socket.close(None).await.unwrap();
    eventually("the shell and its job are gone", || {
        session_members(pid).is_empty()
    })
    .await;

    // The id is free again, and `exit` ends the terminal with its code.
    let (mut socket, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    next_json(&mut socket).await;
    next_json(&mut socket).await;
    send_json(&mut socket, json!({"type": "input", "data": "exit 5\n"})).await;
    let message = message_of_type(&mut socket, "exit").await;
    assert_eq!(message["data"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_get_of_the_terminal_is_a_clear_error() {
    let sandbox = start().await;
    let (status, body) = sandbox.get("/v1/shell/ws").await;
    assert!(status.is_client_error(), "{status}");
    assert!(
        body["message"].as_str().unwrap().contains("WebSocket"),
        "{body}"
    );
    assert!(Path::new("/proc/self").exists());
}
