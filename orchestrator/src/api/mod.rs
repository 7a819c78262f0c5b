//! The orchestrator's REST API (axum): routes, shared state, authentication and the middleware
//! every request passes (request ids, logs, metrics).
//!
//! Layout: one file per resource, each with `routes()`; [`types`] holds every wire type;
//! [`error`] is the one error type; [`proxy`] serves `/api`, `/vnc` and `/cdp` of a sandbox.
//!
//! Authentication: `Authorization: Bearer <api key>` on everything but `/healthz` and the A2A
//! Agent Card ([`a2a`] checks the key of its endpoint itself, to answer 401 as A2A asks); the VNC
//! routes take a viewer token instead (query parameter `token` or cookie), the CDP routes either.
//! A web console sign-in ([`callers`]) stands in for the key header: its cookie authenticates
//! the keyed routes (all but the sandbox API proxy) and the desktop WebSocket, and a request
//! with it that changes state must come from this server's own origin.
//!
//! **Invariant:** only this module knows status codes and JSON shapes.

pub mod a2a;
pub mod assets;
pub mod callers;
pub mod cluster;
pub mod console;
pub mod credentials;
pub mod error;
pub mod extract;
pub mod health;
pub mod keys;
pub mod openapi;
pub mod profiles;
pub mod proxy;
pub mod relays;
pub mod runs;
pub mod sandboxes;
pub mod shares;
pub mod snapshots;
pub mod tokens;
pub mod types;
pub mod viewer_tickets;

use std::sync::Arc;

use agentbox_http::plumbing;
use agentbox_http::request_id::RequestIds;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;

use crate::a2a_server::tasks::Tasks;
use crate::auth::{ApiKeys, Caller};
use crate::console::ConsoleSessions;
use crate::metrics::Metrics;
use crate::proxy::http::HttpProxy;
use crate::runs::Runs;
use crate::sandboxes::Sandboxes;
use error::ApiError;

/// Largest JSON body of the control-plane routes (the `/api` proxy streams and has no limit).
pub const BODY_LIMIT: usize = 256 * 1024;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub sandboxes: Arc<Sandboxes>,
    pub runs: Arc<Runs>,
    pub keys: Arc<ApiKeys>,
    /// Web console sign-ins.
    pub console: Arc<ConsoleSessions>,
    pub metrics: Arc<Metrics>,
    pub proxy: HttpProxy,
    /// Base URL clients use (no trailing slash).
    pub public_url: Arc<String>,
    /// Browser origins besides this server's own that may open its WebSockets.
    pub allowed_origins: Arc<Vec<String>>,
    /// The WebSocket relay sessions each key holds.
    pub relays: Arc<relays::Relays>,
    /// A2A's task operations (over `runs`).
    pub a2a: Arc<Tasks>,
    request_ids: RequestIds,
}

impl AppState {
    pub fn new(
        sandboxes: Arc<Sandboxes>,
        keys: Arc<ApiKeys>,
        metrics: Arc<Metrics>,
        public_url: String,
    ) -> Self {
        let runs = crate::runs::Runs::from_settings(&sandboxes);
        let console = ConsoleSessions::new(
            sandboxes.store().clone(),
            keys.clone(),
            sandboxes.sessions().clone(),
        );
        let relays = relays::Relays::new(
            sandboxes.settings().relays_per_key,
            sandboxes.settings().relay_unfinished,
        );
        let a2a = Tasks::new(
            runs.clone(),
            public_url.clone(),
            sandboxes.settings().a2a_model.clone(),
        );
        Self {
            a2a,
            sandboxes,
            runs,
            keys,
            console,
            metrics,
            relays,
            proxy: HttpProxy::new(),
            public_url: Arc::new(public_url),
            allowed_origins: Arc::new(Vec::new()),
            request_ids: RequestIds::new("orc", &["/healthz"]),
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
        .merge(snapshots::routes())
        .merge(profiles::routes())
        .merge(runs::routes())
        .merge(shares::routes())
        .merge(credentials::routes())
        .merge(tokens::routes())
        .merge(keys::routes())
        .merge(cluster::routes())
}

/// The generated OpenAPI document.
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let (_, mut document) = keyed_routes().split_for_parts();
    let (_, public) = health::public_routes().split_for_parts();
    document.merge(public);
    openapi::finish(&mut document);
    document
}

/// Serves `app` on `listener` until `stop` resolves (the shared [`plumbing::serve`]: every
/// connection with `TCP_NODELAY`), then lets the requests in flight finish.
pub use agentbox_http::plumbing::serve;

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
    let routes = public
        .merge(keyed)
        .merge(proxy::token_routes())
        .merge(a2a::routes())
        .merge(assets::routes())
        .merge(console::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), observe));
    // The fallbacks, the request span (with the sandbox id recorded on it) and, outermost, the
    // unread-body layer: a body a refusal left unread (here or, proxied, in sandboxd) is drained
    // or the close announced.
    plumbing::wrap::<ApiError, _, _>(
        routes,
        middleware::from_fn(record_sandbox_id),
        state.request_ids.clone(),
    )
    .with_state(state)
}

impl AppState {
    /// Uses `runs` (the one `serve` also resumes orphaned runs with).
    pub fn with_runs(mut self, runs: Arc<Runs>) -> Self {
        self.a2a = Tasks::new(
            runs.clone(),
            self.public_url.to_string(),
            self.sandboxes.settings().a2a_model.clone(),
        );
        self.runs = runs;
        self
    }
}

/// `url` (this server's `http(s)://` form) as a WebSocket client dials it: `ws(s)://`.
pub fn websocket_url(url: &str) -> String {
    url.replacen("https://", "wss://", 1)
        .replacen("http://", "ws://", 1)
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

/// Authenticates the API key (or a console sign-in's cookie) and puts the [`Caller`] in the
/// request's extensions.
async fn require_key(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let Some(key) = bearer(request.headers()) else {
        // A browser opening an AIO viewer ticket's page: the ticket is the credential.
        if let Some((sandbox_id, ticket)) = viewer_tickets::ticket_request(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        ) {
            return viewer_tickets::redeem(&state, &sandbox_id, &ticket).await;
        }
        return match callers::caller(
            &state,
            request.method(),
            request.uri().path(),
            request.headers(),
        )
        .await
        {
            Ok(caller) => {
                tracing::Span::current().record("key_id", caller.key_id.as_str());
                request.extensions_mut().insert(caller);
                next.run(request).await
            }
            Err(error) => error.into_response(),
        };
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
    // While the database does not answer, every route that needs it (all but liveness) fails
    // at once instead of each request waiting out the pool's acquire timeout.
    let response = if route != "/healthz" && state.sandboxes.store().is_unreachable() {
        ApiError::database_unreachable().into_response()
    } else {
        next.run(request).await
    };
    state.metrics.observe_http(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}

/// Puts the sandbox id a path names (`/v1/sandboxes/{id}/...`) on the request's span, so every
/// log line about the request carries it.
async fn record_sandbox_id(request: Request, next: Next) -> Response {
    if let Some(id) = request
        .uri()
        .path()
        .strip_prefix("/v1/sandboxes/")
        .and_then(|rest| rest.split('/').next())
        .filter(|id| !id.is_empty())
    {
        tracing::Span::current().record("sandbox_id", id);
    }
    next.run(request).await
}
