//! The file API in the real image: sandboxd runs as `agent` with its default roots
//! (`/home/agent` and `/tmp`); files written are the agent's, paths outside the roots and
//! symlinks leading out are refused, uploads and downloads round-trip bytes.

use std::time::Duration;

use agentbox_tests::{Sandbox, SandboxOptions};
use serde_json::{Value, json};

const READY: Duration = Duration::from_secs(60);

async fn post(sandbox: &Sandbox, route: &str, body: Value) -> (u16, Value) {
    let response = sandbox
        .client
        .post(sandbox.url(route))
        .bearer_auth(&sandbox.api_key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn files_are_confined_to_home_and_tmp() {
    let sandbox = Sandbox::start(SandboxOptions::default()).unwrap();
    sandbox.wait_ready(READY).await.unwrap();

    let (status, body) = post(
        &sandbox,
        "/v1/file/write",
        json!({"file": "notes/hello.txt", "content": "hello from the API\n"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["data"]["file"],
        "/home/agent/workspace/notes/hello.txt"
    );
    let (status, body) = post(
        &sandbox,
        "/v1/file/read",
        json!({"file": "/home/agent/workspace/notes/hello.txt"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["content"], "hello from the API\n");
    let (status, body) = post(
        &sandbox,
        "/v1/file/list",
        json!({"path": "/home/agent/workspace", "recursive": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let paths: Vec<&str> = body["data"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/home/agent/workspace/notes/hello.txt"),
        "{paths:?}"
    );
    // Written by sandboxd, which runs as the agent.
    let owner = sandbox
        .exec(&["stat", "-c", "%U", "/home/agent/workspace/notes/hello.txt"])
        .unwrap();
    assert_eq!(owner, "agent");

    // Outside the roots, directly or through a symlink the agent made.
    let (status, body) = post(&sandbox, "/v1/file/read", json!({"file": "/etc/passwd"})).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("outside the allowed roots /home/agent, /tmp"),
        "{body}"
    );
    sandbox
        .exec(&["ln", "-s", "/etc", "/home/agent/etc-link"])
        .unwrap();
    let (status, body) = post(
        &sandbox,
        "/v1/file/read",
        json!({"file": "/home/agent/etc-link/passwd"}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body["message"].as_str().unwrap().contains("leads outside"));
    let (status, _) = post(
        &sandbox,
        "/v1/file/write",
        json!({"file": "/tmp/../etc/agentbox-test", "content": "x"}),
    )
    .await;
    assert_eq!(status, 403);

    // Upload (multipart) and download round-trip binary bytes.
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 256) as u8).collect();
    let boundary = "agentbox-e2e-boundary";
    let mut form = Vec::new();
    form.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n/tmp/up/blob.bin\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"blob.bin\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    form.extend_from_slice(&bytes);
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = sandbox
        .client
        .post(sandbox.url("/v1/file/upload"))
        .bearer_auth(&sandbox.api_key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["file_path"], "/tmp/up/blob.bin");
    assert_eq!(body["data"]["file_size"], bytes.len());
    let response = sandbox
        .client
        .get(sandbox.url("/v1/file/download?path=/tmp/up/blob.bin"))
        .bearer_auth(&sandbox.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.bytes().await.unwrap().as_ref(), bytes.as_slice());
    let response = sandbox
        .client
        .get(sandbox.url("/v1/file/download?path=/etc/shadow"))
        .bearer_auth(&sandbox.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
}
