//! The client against a real sandboxd router on a loopback port: readiness (ready and not),
//! the heartbeat, shell sessions with real bash, files on a real directory, and error answers
//! decoded into typed errors (401, 404, 409, 422 with the field, 503, no answer at all).

use crate::common;

use std::time::Duration;

use anyhow::Result;
use reqwest::StatusCode;
use sandbox_client::types::{
    BashCommandStatus, EditorCommandName, FileContentEncoding, FileListRequest, FileReadEncoding,
    FileReadRequest, FileWriteRequest, ShellExecRequest, ShellWaitRequest, StrReplaceEditorRequest,
};
use sandbox_client::{ClientConfig, ClientError, SandboxClient};
use supervisor::{ProgramSpec, ReadinessProbe, SupervisorConfig};

#[tokio::test]
async fn readiness_and_the_heartbeat() -> Result<()> {
    let sandbox = common::start(common::Options::default()).await?;
    let client = sandbox.client();
    let health = client.healthz().await?;
    assert_eq!(health.status, "ok");
    let ready = client.readyz().await?;
    assert!(ready.ready, "{ready:?}");
    assert!(ready.not_ready.is_empty());

    let report = client.activity().await?;
    assert_eq!(report.in_flight, 0, "the heartbeat does not count itself");
    assert!(report.idle_secs >= 0.0);
    Ok(())
}

#[tokio::test]
async fn not_ready_is_an_answer_naming_the_programs() -> Result<()> {
    // A required program whose probe never passes: it stays `starting`.
    let mut waiting = ProgramSpec::new("waiting", "sleep").args(["100"]);
    waiting.ready = Some(ReadinessProbe::Tcp("127.0.0.1:1".into()));
    waiting.ready_timeout_secs = 600.0;
    let programs = SupervisorConfig {
        programs: vec![waiting],
        ..SupervisorConfig::default()
    };
    let sandbox = common::start(common::Options {
        programs,
        ..Default::default()
    })
    .await?;
    let readiness = sandbox.client().readyz().await?;
    assert!(!readiness.ready);
    assert_eq!(readiness.not_ready.len(), 1);
    assert_eq!(readiness.not_ready[0].name, "waiting");
    assert!(readiness.message.contains("waiting"), "{readiness:?}");
    sandbox.supervisor.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn shell_sessions() -> Result<()> {
    let sandbox = common::start(common::Options::default()).await?;
    let client = sandbox.client();
    let done = client
        .shell_exec(&ShellExecRequest {
            command: "cd /; export GREETING=hello; echo $GREETING world; exit 3".into(),
            id: Some("s1".into()),
            ..Default::default()
        })
        .await?;
    assert_eq!(done.session_id, "s1");
    assert_eq!(done.status, BashCommandStatus::Completed);
    assert_eq!(done.output.trim(), "hello world");
    assert_eq!(done.exit_code, Some(3));

    // The session keeps its directory and environment.
    let again = client
        .shell_exec(&ShellExecRequest {
            command: "pwd; echo $GREETING".into(),
            id: Some("s1".into()),
            ..Default::default()
        })
        .await?;
    assert_eq!(again.output.trim(), "/\nhello");

    // A long command: started, seen running, waited for briefly, killed.
    let started = client
        .shell_exec(&ShellExecRequest {
            command: "echo started; sleep 60".into(),
            id: Some("s2".into()),
            async_mode: Some(true),
            ..Default::default()
        })
        .await?;
    assert_eq!(started.status, BashCommandStatus::Running);
    let waited = client
        .shell_wait(&ShellWaitRequest {
            id: "s2".into(),
            seconds: Some(0.2),
            ..Default::default()
        })
        .await?;
    assert_eq!(waited.status, BashCommandStatus::Running);
    let viewed = client.shell_view("s2").await?;
    assert_eq!(viewed.command.as_deref(), Some("echo started; sleep 60"));
    assert_eq!(viewed.status, BashCommandStatus::Running);
    let killed = client.shell_kill("s2").await?;
    assert_eq!(killed.status, BashCommandStatus::Terminated);
    assert!(killed.exit_code.is_some());
    let viewed = client.shell_view("s2").await?;
    assert!(viewed.output.contains("started"), "{viewed:?}");
    assert_eq!(viewed.status, BashCommandStatus::Terminated);
    Ok(())
}

#[tokio::test]
async fn files() -> Result<()> {
    let sandbox = common::start(common::Options::default()).await?;
    let client = sandbox.client();
    let path = sandbox.workspace.join("notes.txt").display().to_string();
    let written = client
        .file_write(&FileWriteRequest {
            file: path.clone(),
            content: "one\ntwo\nthree\n".into(),
            ..Default::default()
        })
        .await?;
    assert_eq!(written.bytes_written, 14);
    assert_eq!(
        std::fs::read_to_string(sandbox.workspace.join("notes.txt"))?,
        "one\ntwo\nthree\n"
    );

    let read = client
        .file_read(&FileReadRequest {
            file: path.clone(),
            start_line: Some(1),
            end_line: Some(2),
            ..Default::default()
        })
        .await?;
    assert_eq!(read.content, "two\n");

    // Binary content both ways, base64 on the wire.
    let bytes: Vec<u8> = (0..=255).collect();
    let blob = sandbox.workspace.join("blob.bin").display().to_string();
    client
        .file_write(&FileWriteRequest {
            file: blob.clone(),
            content: base64(&bytes),
            encoding: Some(FileContentEncoding::Base64),
            ..Default::default()
        })
        .await?;
    let read = client
        .file_read(&FileReadRequest {
            file: blob.clone(),
            encoding: Some(FileReadEncoding::Base64),
            ..Default::default()
        })
        .await?;
    assert_eq!(read.encoding, FileReadEncoding::Base64);
    assert_eq!(read.content, base64(&bytes));
    assert_eq!(client.file_download(&blob).await?, bytes);

    // Upload into a directory, under the part's file name.
    let uploaded = client
        .file_upload(
            Some(&sandbox.workspace.display().to_string()),
            "up.bin",
            vec![7; 100_000],
        )
        .await?;
    assert_eq!(uploaded.file_size, 100_000);
    assert_eq!(
        std::fs::read(sandbox.workspace.join("up.bin"))?,
        vec![7; 100_000]
    );

    let listing = client
        .file_list(&FileListRequest {
            path: sandbox.workspace.display().to_string(),
            ..Default::default()
        })
        .await?;
    let mut names: Vec<&str> = listing.files.iter().map(|f| f.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["blob.bin", "notes.txt", "up.bin"]);

    let mut edit = StrReplaceEditorRequest::new(EditorCommandName::StrReplace, path.clone());
    edit.old_str = Some("two".into());
    edit.new_str = Some("2".into());
    let edited = client.str_replace_editor(&edit).await?;
    assert!(edited.prev_exist);
    assert_eq!(
        std::fs::read_to_string(sandbox.workspace.join("notes.txt"))?,
        "one\n2\nthree\n"
    );
    Ok(())
}

#[tokio::test]
async fn error_answers_are_typed() -> Result<()> {
    let sandbox = common::start(common::Options::default()).await?;
    let client = sandbox.client();

    // 401: a wrong key. The message says how to send one; the key is nowhere in the error.
    let wrong = SandboxClient::new(&sandbox.base, Some("not-the-key"))?;
    let error = wrong.activity().await.unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::UNAUTHORIZED), "{error}");
    assert!(error.to_string().contains("Authorization"), "{error}");
    assert!(!format!("{error} {error:?}").contains("not-the-key"));
    let error = wrong.readyz().await.unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::UNAUTHORIZED), "{error}");

    // 404: no such session.
    let error = client.shell_view("ghost").await.unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::NOT_FOUND), "{error}");
    assert!(error.to_string().contains("ghost"), "{error}");

    // 422 with the field: a negative timeout, a missing `file_text` for `create`.
    let error = client
        .shell_exec(&ShellExecRequest {
            command: "true".into(),
            timeout: Some(-1.0),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::UNPROCESSABLE_ENTITY));
    assert_eq!(error.field().as_deref(), Some("timeout"), "{error:?}");
    let create = StrReplaceEditorRequest::new(
        EditorCommandName::Create,
        sandbox.workspace.join("new.txt").display().to_string(),
    );
    let error = client.str_replace_editor(&create).await.unwrap_err();
    assert_eq!(error.field().as_deref(), Some("file_text"), "{error:?}");
    assert!(!sandbox.workspace.join("new.txt").exists());

    // 403: a path outside the file roots; 404: a missing file.
    let error = client.file_download("/etc/hostname").await.unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::FORBIDDEN), "{error}");
    let missing = sandbox.workspace.join("missing").display().to_string();
    let error = client.file_download(&missing).await.unwrap_err();
    assert_eq!(error.status(), Some(StatusCode::NOT_FOUND), "{error}");

    // 503: no browser runs here.
    let error = client.browser_info().await.unwrap_err();
    assert_eq!(
        error.status(),
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{error}"
    );

    // After all these refusals the pooled connections still serve valid calls.
    for _ in 0..20 {
        client.activity().await?;
    }
    Ok(())
}

#[tokio::test]
async fn limits_and_transport_errors() -> Result<()> {
    let sandbox = common::start(common::Options::default()).await?;
    std::fs::write(sandbox.workspace.join("big"), vec![1u8; 10_000])?;
    let small = SandboxClient::with_config(
        &sandbox.base,
        Some(common::KEY),
        &ClientConfig {
            max_body_bytes: 9_999,
            ..ClientConfig::default()
        },
    )?;
    let big = sandbox.workspace.join("big").display().to_string();
    let error = small.file_download(&big).await.unwrap_err();
    assert!(
        matches!(error, ClientError::TooLarge { limit: 9_999, .. }),
        "{error:?}"
    );
    // A caller's own bound holds below the client's, whatever a listing said the size was.
    let client =
        SandboxClient::with_config(&sandbox.base, Some(common::KEY), &ClientConfig::default())?;
    let error = client.file_download_at_most(&big, 9_999).await.unwrap_err();
    assert!(
        matches!(error, ClientError::TooLarge { limit: 9_999, .. }),
        "{error:?}"
    );
    assert_eq!(
        client.file_download_at_most(&big, 10_000).await?.len(),
        10_000
    );
    // And the client's bound holds above the caller's.
    let error = small.file_download_at_most(&big, 20_000).await.unwrap_err();
    assert!(
        matches!(error, ClientError::TooLarge { limit: 9_999, .. }),
        "{error:?}"
    );

    // A port nobody listens on: a transport error, quickly.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let closed = format!("http://{}", listener.local_addr()?);
    drop(listener);
    let nobody = SandboxClient::with_config(
        &closed,
        Some(common::KEY),
        &ClientConfig {
            connect_timeout: Duration::from_secs(1),
            ..ClientConfig::default()
        },
    )?;
    let error = nobody.readyz().await.unwrap_err();
    assert!(matches!(error, ClientError::Transport { .. }), "{error:?}");
    Ok(())
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// What AIO's clients send as plain strings still gets past the wire enums in any case (the
/// route then answers 503: no browser or display here), and anything else is a 422 whose
/// message names the field.
#[tokio::test]
async fn names_from_aio_clients_are_accepted_in_any_case() -> Result<()> {
    let sandbox = common::start(common::Options {
        // No X server on this display.
        display: Some(":9999".into()),
        ..Default::default()
    })
    .await?;
    let http = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        http.post(format!("{}{path}", sandbox.base))
            .bearer_auth(common::KEY)
            .json(&body)
            .send()
    };
    for (path, body) in [
        (
            "/v1/browser/page/navigate",
            serde_json::json!({"url": "http://1.1.1.1/", "wait_until": "NetworkIdle2"}),
        ),
        (
            "/v1/browser/page/click",
            serde_json::json!({"x": 1, "y": 1, "button": "Right"}),
        ),
        (
            "/v1/browser/page/scroll",
            serde_json::json!({"direction": "UP"}),
        ),
        (
            "/v1/browser/page/wait",
            serde_json::json!({"type": " NetworkIdle ", "timeout": 1}),
        ),
        (
            "/v1/browser/actions",
            serde_json::json!({"action_type": "MOUSE_DOWN", "button": "Wheel"}),
        ),
        (
            "/v1/browser/actions",
            serde_json::json!({"action_type": "SCROLL", "dy": 1, "unit": "notch"}),
        ),
    ] {
        let response = post(path, body.clone()).await?;
        assert_eq!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{path} {body}: {}",
            response.text().await?
        );
    }
    for (path, body, field) in [
        (
            "/v1/browser/page/wait",
            serde_json::json!({"type": "downloads"}),
            "type",
        ),
        (
            "/v1/browser/actions",
            serde_json::json!({"action_type": "CLICK", "button": "thumb"}),
            "button",
        ),
        (
            "/v1/browser/actions",
            serde_json::json!({"action_type": "SCROLL", "unit": "pixels"}),
            "unit",
        ),
    ] {
        let response = post(path, body.clone()).await?;
        assert_eq!(
            response.status(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path} {body}"
        );
        let answer: serde_json::Value = response.json().await?;
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{path} {body}: {answer}");
    }
    for query in ["format=JPG", "format=Png"] {
        let response = http
            .get(format!("{}/v1/browser/screenshot?{query}", sandbox.base))
            .bearer_auth(common::KEY)
            .send()
            .await?;
        assert_eq!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{query}"
        );
    }
    let response = http
        .get(format!("{}/v1/browser/screenshot?format=gif", sandbox.base))
        .bearer_auth(common::KEY)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let answer: serde_json::Value = response.json().await?;
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or_default()
            .contains("format"),
        "{answer}"
    );
    Ok(())
}
