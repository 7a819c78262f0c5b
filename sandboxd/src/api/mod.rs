//! sandboxd's HTTP API: routes, shared state and the middleware every request passes.
//!
//! Layout: one folder per resource ([`browser`], [`shell`], [`files`], [`desktop`], [`sandbox`],
//! [`mcp`]) and a file for each smaller one ([`code`], [`util`], [`tickets`], [`health`],
//! [`docs`]); each exports `routes()` (an [`OpenApiRouter`] whose handlers carry
//! `#[utoipa::path]`, so the OpenAPI document at `/v1/openapi.json` is generated from the code),
//! and a folder's `mod.rs` merges its files' routes. [`types`] holds every type on the wire;
//! [`extract`] parses requests; [`validate`] checks fields the types cannot (ranges, lengths,
//! paths); [`error`] renders failures; [`auth`] checks credentials; [`unsupported`] answers
//! AIO's operations sandboxd does not serve. The services behind the routes are built in
//! [`crate::services`], not here.
//!
//! **Invariant:** only this module knows JSON shapes and status codes; it calls into the
//! supervisor and the capability modules, which know nothing of HTTP.

pub mod auth;
pub mod browser;
pub mod code;
pub mod desktop;
pub mod docs;
pub mod error;
pub mod extract;
pub mod files;
pub mod health;
pub mod mcp;
pub mod openapi;
pub mod sandbox;
pub mod shell;
pub mod tickets;
pub mod types;
pub mod unsupported;
pub mod util;
pub mod validate;

use std::sync::Arc;

use agentbox_http::plumbing;
use agentbox_http::request_id::RequestIds;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use supervisor::Supervisor;
use utoipa_axum::router::OpenApiRouter;

use crate::activity::Activity;
use crate::config::Settings;
use crate::services::Services;
use crate::shell::Shell;
use error::ApiError;

/// Largest JSON body any route accepts unless it sets its own limit (uploads do).
pub const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// What every handler can reach: the sandbox's [`Services`] (dereferenced, so a handler writes
/// `state.shell`) and the HTTP layer's own request ids.
#[derive(Clone)]
pub struct AppState {
    services: Arc<Services>,
    request_ids: RequestIds,
}

impl AppState {
    /// The state over services already built (how [`crate::run`] makes it).
    pub fn from_services(services: Arc<Services>) -> Self {
        Self {
            services,
            request_ids: RequestIds::new("sbx", &["/healthz"]),
        }
    }

    /// Builds the services from `settings` (tests; [`crate::run`] builds them itself).
    pub fn new(
        supervisor: Arc<Supervisor>,
        settings: Arc<Settings>,
        activity: Arc<Activity>,
    ) -> Self {
        Self::from_services(Arc::new(Services::new(supervisor, settings, activity)))
    }

    /// Replaces the shell (tests use their own limits and user).
    pub fn with_shell(mut self, shell: Arc<Shell>) -> Self {
        Arc::make_mut(&mut self.services).shell = shell;
        self
    }

    /// Uses `passwords` for the VNC server (the ones written to its password file).
    pub fn with_vnc_passwords(mut self, passwords: crate::vnc::VncPasswords) -> Self {
        let services = (*self.services).clone();
        self.services = Arc::new(services.with_vnc_passwords(passwords));
        self
    }

    /// The services behind the routes.
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.services
    }
}

/// The routes that need the API key, with their OpenAPI description.
fn protected_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base())
        .merge(health::protected_routes())
        .merge(sandbox::routes())
        .merge(desktop::routes())
        .merge(mcp::rest::routes())
        .merge(util::routes())
        .merge(shell::routes())
        .merge(files::routes())
        .merge(browser::routes())
        .merge(tickets::routes())
        .merge(code::routes())
}

/// The routes reached without the key: liveness, and `GET /auth`, which checks a credential
/// itself.
fn public_routes() -> OpenApiRouter<AppState> {
    health::public_routes().merge(tickets::public_routes())
}

/// The stack of the thread that builds the OpenAPI document: utoipa's schema construction
/// recurses deeper than the runtime's small worker stacks ([`crate::WORKER_STACK_BYTES`]) hold
/// in a debug build, and an overflow would abort sandboxd, PID 1, and with it the sandbox.
const DOCUMENT_STACK_BYTES: usize = 16 * 1024 * 1024;

/// The OpenAPI document as JSON, built on a thread of its own (see [`DOCUMENT_STACK_BYTES`]);
/// per call, not kept: it is asked for rarely, and holding it would cost every sandbox memory.
pub async fn openapi_json() -> Result<serde_json::Value, ApiError> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("openapi".into())
        .stack_size(DOCUMENT_STACK_BYTES)
        .spawn(move || {
            // The receiver is gone only if the request was dropped; nothing to tell then.
            let _ = sender.send(serde_json::to_value(openapi_document()));
        })
        .map_err(|e| ApiError::internal(format!("starting the OpenAPI thread: {e}")))?;
    receiver
        .await
        .map_err(|_| ApiError::internal("building the OpenAPI document failed"))?
        .map_err(|e| ApiError::internal(format!("serialising the OpenAPI document: {e}")))
}

/// The generated OpenAPI document of the whole API. Recurses deeply: on a runtime worker, use
/// [`openapi_json`].
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    let (_, mut document) = protected_routes().split_for_parts();
    let (_, public) = public_routes().split_for_parts();
    document.merge(public);
    unsupported::document(&mut document);
    openapi::finish(&mut document);
    document
}

/// Serves `app` on `listener` until `stop` resolves (the shared [`plumbing::serve`]: every
/// connection with `TCP_NODELAY`), then lets the requests in flight finish.
pub use agentbox_http::plumbing::serve;

/// The whole API. `/healthz` is outside authentication and does not count as activity.
pub fn router(state: AppState) -> Router {
    let (protected, _) = protected_routes().split_for_parts();
    let protected = protected
        .merge(openapi::routes())
        .merge(docs::routes())
        .merge(browser::cdp::routes())
        .merge(unsupported::routes())
        .merge(desktop::vnc::keyed_routes())
        .merge(
            Router::new()
                .nest_service(
                    "/mcp",
                    mcp::service(state.clone(), state.settings.allowed_origins.clone()),
                )
                .layer(middleware::from_fn_with_state(
                    files::write_body_limit(state.files.limits()),
                    mcp::bounded_body,
                )),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            track_activity,
        ));
    let viewer = desktop::vnc::viewer_routes()
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key_or_viewer,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            track_activity,
        ));
    let terminal = shell::terminal_page::routes()
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key_or_terminal,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            track_activity,
        ));
    let (public, _) = public_routes().split_for_parts();
    // The fallbacks, the request span and, outermost, the unread-body layer; the default
    // body limit applies to every route, and a request no route takes needs the key too.
    plumbing::wrap::<ApiError, _, _>(
        public.merge(protected).merge(viewer).merge(terminal),
        tower::ServiceBuilder::new()
            .layer(DefaultBodyLimit::max(DEFAULT_BODY_LIMIT))
            .layer(middleware::from_fn_with_state(
                state.clone(),
                auth::key_before_unrouted,
            )),
        state.request_ids.clone(),
    )
    .with_state(state)
}

/// Marks the sandbox active for the duration of each request (for the dead-man switch).
/// The heartbeat (`GET /v1/activity`) marks activity itself, after reading the counters.
async fn track_activity(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.uri().path() == sandbox::activity::PATH {
        return next.run(request).await;
    }
    let _guard = state.activity.hold();
    next.run(request).await
}
