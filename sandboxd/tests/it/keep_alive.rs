//! sandboxd's real router on a loopback port with a pooled client (reqwest, as
//! `sandbox-client` uses): calls refused without reading their body (401 without the key, 404
//! for an unknown path, 405 for a wrong method), each with a 200 KB body, do not break the
//! connection the next call reuses.

use std::sync::Arc;

use reqwest::{Method, StatusCode};
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use supervisor::{Supervisor, SupervisorConfig};

const KEY: &str = "keep-alive-key";
const ROUNDS: usize = 100;

async fn start() -> anyhow::Result<String> {
    let mut settings =
        Settings::from_lookup(|name| (name == "SANDBOX_AUTH").then(|| "none".to_string()))?;
    settings.api_key = Some(KEY.into());
    let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default())?);
    let state = AppState::new(supervisor, Arc::new(settings), Activity::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    Ok(format!("http://{address}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_with_unread_bodies_leave_the_pool_usable() -> anyhow::Result<()> {
    let base = start().await?;
    let client = reqwest::Client::new();
    let body = vec![b'x'; 200 * 1024];
    let refusals = [
        (
            Method::POST,
            "/v1/shell/exec",
            false,
            StatusCode::UNAUTHORIZED,
        ),
        (
            Method::POST,
            "/v1/no/such/route",
            true,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::PUT,
            "/v1/sandbox",
            true,
            StatusCode::METHOD_NOT_ALLOWED,
        ),
    ];
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        for (method, path, keyed, expected) in &refusals {
            let mut request = client
                .request(method.clone(), format!("{base}{path}"))
                .body(body.clone());
            if *keyed {
                request = request.bearer_auth(KEY);
            }
            match request.send().await {
                Ok(response) if response.status() == *expected => {
                    if let Err(error) = response.bytes().await {
                        failures.push(format!("round {round} {path}: {error}"));
                    }
                }
                Ok(response) => {
                    failures.push(format!("round {round} {path}: {}", response.status()));
                }
                Err(error) => failures.push(format!("round {round} {path}: {error:?}")),
            }
            let valid = client
                .get(format!("{base}/v1/sandbox"))
                .bearer_auth(KEY)
                .send()
                .await;
            match valid {
                Ok(response) if response.status() == StatusCode::OK => {
                    if let Err(error) = response.bytes().await {
                        failures.push(format!("round {round} after {path}: {error}"));
                    }
                }
                Ok(response) => {
                    failures.push(format!("round {round} after {path}: {}", response.status()));
                }
                Err(error) => failures.push(format!("round {round} after {path}: {error:?}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} calls failed: {failures:#?}",
        failures.len(),
        2 * ROUNDS * refusals.len()
    );
    Ok(())
}
