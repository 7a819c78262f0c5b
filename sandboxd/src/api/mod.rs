//! sandboxd's HTTP API: routes, shared state and the middleware every request passes.
//!
//! Layout: one file per resource ([`health`], [`processes`], [`sandbox`]); [`auth`] checks the
//! API key; [`types`] holds every type on the wire; [`error`] renders failures.
//!
//! **Invariant:** only this module knows JSON shapes and status codes; it calls into the
//! supervisor and the capability modules, which know nothing of HTTP.

pub mod auth;
pub mod error;
pub mod health;
pub mod processes;
pub mod sandbox;
pub mod types;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use supervisor::Supervisor;
use tracing::Instrument;

use crate::activity::Activity;
use crate::config::Settings;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub supervisor: Arc<Supervisor>,
    pub settings: Arc<Settings>,
    pub activity: Arc<Activity>,
    request_ids: Arc<AtomicU64>,
}

impl AppState {
    pub fn new(
        supervisor: Arc<Supervisor>,
        settings: Arc<Settings>,
        activity: Arc<Activity>,
    ) -> Self {
        Self {
            supervisor,
            settings,
            activity,
            request_ids: Arc::new(AtomicU64::new(1)),
        }
    }
}

/// The whole API. `/healthz` is outside authentication and does not count as activity.
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/readyz", get(health::readyz))
        .route("/v1/processes", get(processes::list))
        .route("/v1/processes/{name}/restart", post(processes::restart))
        .route("/v1/processes/{name}/start", post(processes::start))
        .route("/v1/processes/{name}/stop", post(processes::stop))
        .route("/v1/sandbox", get(sandbox::context))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            track_activity,
        ));
    Router::new()
        .route("/healthz", get(health::healthz))
        .merge(protected)
        .layer(middleware::from_fn_with_state(state.clone(), request_span))
        .with_state(state)
}

/// Gives every request an id (the caller's `x-request-id`, or a new one), a span carrying it,
/// and a log line when it completes.
async fn request_span(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("sbx-{}", state.request_ids.fetch_add(1, Ordering::Relaxed)));
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let span = tracing::info_span!("request", request_id = %id, %method, %path);
    async move {
        let started = std::time::Instant::now();
        let mut response = next.run(request).await;
        let status = response.status().as_u16();
        let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        if path != "/healthz" {
            tracing::info!(status, elapsed_ms, "request finished");
        }
        if let Ok(value) = axum::http::HeaderValue::from_str(&id) {
            response.headers_mut().insert("x-request-id", value);
        }
        response
    }
    .instrument(span)
    .await
}

/// Marks the sandbox active for the duration of each request (for the dead-man switch).
async fn track_activity(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let _guard = state.activity.hold();
    next.run(request).await
}
