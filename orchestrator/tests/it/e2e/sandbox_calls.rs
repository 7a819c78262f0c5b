//! Calls the end-to-end tests make on a sandbox through the orchestrator: a POST, a shell
//! command, a script in the page, a navigation of the active tab, the open tabs.

use std::time::Duration;

use anyhow::ensure;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{ADMIN_KEY, Orchestrator};

/// A POST with the admin key; its status and JSON answer.
pub async fn post(
    orchestrator: &Orchestrator,
    path: &str,
    body: Value,
) -> anyhow::Result<(u16, Value)> {
    post_as(orchestrator, ADMIN_KEY, path, body).await
}

/// A POST with `key`.
pub async fn post_as(
    orchestrator: &Orchestrator,
    key: &str,
    path: &str,
    body: Value,
) -> anyhow::Result<(u16, Value)> {
    orchestrator
        .call(Method::POST, path, Some(key), Some(body))
        .await
}

/// Runs `command` in the sandbox through the orchestrator's API proxy; its output, trimmed.
pub async fn shell(orchestrator: &Orchestrator, id: &str, command: &str) -> anyhow::Result<String> {
    let (status, answer) = post(
        orchestrator,
        &format!("/v1/sandboxes/{id}/api/v1/shell/exec"),
        json!({ "command": command }),
    )
    .await?;
    ensure!(status == 200, "{command:?}: {status} {answer}");
    Ok(answer["data"]["output"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// Evaluates `expression` in the sandbox's page through the orchestrator's API proxy.
pub async fn eval(
    orchestrator: &Orchestrator,
    id: &str,
    expression: &str,
) -> anyhow::Result<Value> {
    let (status, answer) = post(
        orchestrator,
        &format!("/v1/sandboxes/{id}/api/v1/browser/page/evaluate"),
        json!({ "expression": expression }),
    )
    .await?;
    ensure!(
        status == 200 && answer["success"] == true,
        "evaluate {expression:?}: {status} {answer}"
    );
    Ok(answer["data"].clone())
}

/// Navigates the active tab by script (the browser API's URL policy keeps its own navigation
/// off loopback; a page's own navigation is not checked) and waits until it is there.
pub async fn open_in_active_tab(
    orchestrator: &Orchestrator,
    id: &str,
    url: &str,
) -> anyhow::Result<()> {
    // The page goes away as it navigates: the answer may be an error.
    let _ = eval(orchestrator, id, &format!("location.href = '{url}'; 1")).await;
    orchestrator
        .wait_for(
            &format!("the tab at {url}"),
            Duration::from_secs(20),
            async || eval(orchestrator, id, "location.href").await.ok() == Some(json!(url)),
        )
        .await
}

/// The URLs of the tabs in a `/v1/browser/tabs` answer, sorted.
pub fn tab_urls(tabs: &Value) -> Vec<String> {
    let mut urls: Vec<String> = tabs["data"]
        .as_array()
        .map(|tabs| {
            tabs.iter()
                .filter_map(|t| t["url"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    urls.sort();
    urls
}

/// The cookies of the sandbox's browser (`/v1/browser/cookies`), as JSON text.
pub async fn cookies(orchestrator: &Orchestrator, id: &str) -> anyhow::Result<String> {
    let (status, cookies) = orchestrator
        .get(&format!("/v1/sandboxes/{id}/api/v1/browser/cookies"))
        .await?;
    ensure!(status == 200, "cookies: {status} {cookies}");
    Ok(cookies.to_string())
}
