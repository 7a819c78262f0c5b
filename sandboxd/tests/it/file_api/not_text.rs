//! Files that are not text to the API: sockets and FIFOs are not files (no request hangs on a
//! FIFO), and documents the editor does not read are named as such (issue 27), not reported as
//! "not UTF-8 text", the file left as it was.

use axum::http::StatusCode;
use serde_json::json;

use super::{Fixture, ROOMY};

#[tokio::test]
async fn sockets_and_fifos_are_not_files() {
    let f = Fixture::new(ROOMY);
    let socket = f.root.path().join("workspace/api.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let fifo = f.root.path().join("workspace/pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for (route, body) in [
        ("/v1/file/read", json!({"file": "api.sock"})),
        ("/v1/file/read", json!({"file": "pipe"})),
        (
            "/v1/file/write",
            json!({"file": "api.sock", "content": "x"}),
        ),
        ("/v1/file/write", json!({"file": "pipe", "content": "x"})),
    ] {
        // A FIFO must not hang the request, whichever way it is opened.
        let (status, answer) = f.post(route, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{route} {body}: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("not a regular file")
        );
    }
    let (_, headers, _) = f.download("pipe").await;
    assert!(!headers.contains_key("content-disposition"));
}

#[tokio::test]
async fn a_document_format_the_editor_does_not_read_is_named() {
    let f = Fixture::new(ROOMY);
    let bytes = b"PK\x03\x04\xff\xfe a zip, not text";
    for (name, format) in [
        ("report.docx", "a Word document"),
        ("old.doc", "a Word 97-2003 document"),
        ("slides.odp", "an OpenDocument presentation"),
    ] {
        let path = f.at(&format!("workspace/{name}"));
        std::fs::write(&path, bytes).unwrap();
        let (status, body) = f
            .post(
                "/v1/file/str_replace_editor",
                json!({"command": "view", "path": path}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(body["detail"][0]["loc"], json!(["body", "path"]));
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains(format)
                && message.contains("presentations")
                && message.contains("PDF"),
            "{message}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
    // Only a file that is not text is refused so: text under such a name is text, and a
    // missing file is missing.
    let text = f.at("workspace/notes.doc");
    std::fs::write(&text, "plain words\n").unwrap();
    let (status, body) = f
        .post(
            "/v1/file/str_replace_editor",
            json!({"command": "view", "path": text}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = f
        .post(
            "/v1/file/str_replace_editor",
            json!({"command": "view", "path": f.at("workspace/missing.docx")}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}
