//! The orchestrator's REST API (axum): routes, shared state, authentication and the middleware
//! every request passes (request ids, logs, metrics).
//!
//! Layout: one file per resource, each with `routes()`; [`types`] holds every wire type;
//! [`error`] is the one error type; [`proxy`] serves `/api`, `/vnc` and `/cdp` of a sandbox.
//!
//! Authentication: `Authorization: Bearer <api key>` on everything but `/healthz`; the VNC
//! routes take a viewer token instead (query parameter `token` or cookie), the CDP routes either.
//!
//! **Invariant:** only this module knows status codes and JSON shapes.

pub mod assets;
pub mod error;
pub mod extract;
pub mod health;
pub mod keys;
pub mod openapi;
pub mod proxy;
pub mod sandboxes;
pub mod tokens;
pub mod types;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentbox_http::unread_body::UnreadBodyLayer;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;
use utoipa_axum::router::OpenApiRouter;

use crate::auth::{ApiKeys, Caller};
use crate::metrics::Metrics;
use crate::proxy::http::HttpProxy;
use crate::sandboxes::Sandboxes;
use error::ApiError;

/// Largest JSON body of the control-plane routes (the `/api` proxy streams and has no limit).
pub const BODY_LIMIT: usize = 256 * 1024;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub sandboxes: Arc<Sandboxes>,
    pub keys: Arc<ApiKeys>,
    pub metrics: Arc<Metrics>,
    pub proxy: HttpProxy,
    /// Base URL clients use (no trailing slash).
    pub public_url: Arc<String>,
    /// Browser origins besides this server's own that may open its WebSockets.
    pub allowed_origins: Arc<Vec<String>>,
    request_ids: Arc<AtomicU64>,
}

impl AppState {
    pub fn new(
        sandboxes: Arc<Sandboxes>,
        keys: Arc<ApiKeys>,
        metrics: Arc<Metrics>,
        public_url: String,
    ) -> Self {
        Self {
            sandboxes,
            keys,
            metrics,
            proxy: HttpProxy::new(),
            public_url: Arc::new(public_url),
            allowed_origins: Arc::new(Vec::new()),
            request_ids: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl Caller {
    /// The owner filter for this caller: admins see everything.
    pub fn owner(&self) -> Option<&str> {
        if self.is_admin {
            None
        } else {
            Some(&self.key_id)
        }
    }
}

/// Routes that need an API key, with their OpenAPI description.
fn keyed_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base())
        .merge(sandboxes::routes())
        .merge(tokens::routes())
        .merge(keys::routes())
}

/// The generated OpenAPI document.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let (_, mut document) = keyed_routes().split_for_parts();
    let (_, public) = health::public_routes().split_for_parts();
    document.merge(public);
    openapi::finish(&mut document);
    document
}

/// Serves `app` on `listener` until `stop` resolves, then lets the requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}

/// The whole API.
pub fn router(state: AppState) -> Router {
    let document = Arc::new(openapi_document());
    let (keyed, _) = keyed_routes().split_for_parts();
    let keyed = keyed
        .merge(openapi::routes(document))
        .merge(health::metrics_routes())
        .merge(proxy::api_routes())
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    let (public, _) = health::public_routes().split_for_parts();
    public
        .merge(keyed)
        .merge(proxy::token_routes())
        .merge(assets::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), observe))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), request_span))
        // Outermost: a body a refusal left unread (here or, proxied, in sandboxd) is drained or
        // the close announced, so the caller's next call on the connection works.
        .layer(UnreadBodyLayer::new())
        .with_state(state)
}

async fn not_found(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route {} {}",
        request.method(),
        request.uri().path()
    ))
}

async fn method_not_allowed(request: Request) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
    .into_response()
}

/// The bearer credential of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// Authenticates the API key and puts the [`Caller`] in the request's extensions.
async fn require_key(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let Some(key) = bearer(request.headers()) else {
        return ApiError::unauthorized("missing `Authorization: Bearer <api key>`").into_response();
    };
    match state.keys.authenticate(key).await {
        Ok(Some(caller)) => {
            tracing::Span::current().record("key_id", caller.key_id.as_str());
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Ok(None) => ApiError::unauthorized("unknown or revoked API key").into_response(),
        Err(error) => ApiError::from(error).into_response(),
    }
}

/// Counts requests by route template and status.
async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = request.method().to_string();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    state.metrics.observe_http(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// Gives every request an id (the caller's `x-request-id`, or a new one), a span carrying it
/// (and the sandbox id, where the path names one), and a log line when it completes.
async fn request_span(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.chars().all(|c| c.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("orc-{}", state.request_ids.fetch_add(1, Ordering::Relaxed)));
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let sandbox_id = path
        .strip_prefix("/v1/sandboxes/")
        .and_then(|rest| rest.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("")
        .to_owned();
    let span = tracing::info_span!("request", request_id = %id, %method, %path, sandbox_id = %sandbox_id, key_id = tracing::field::Empty);
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
