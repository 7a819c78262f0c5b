//! sandboxd's HTTP API: routes, shared state and the middleware every request passes.
//!
//! Layout: one file per resource, each exporting `routes()` (an [`OpenApiRouter`] whose handlers
//! carry `#[utoipa::path]`, so the OpenAPI document at `/v1/openapi.json` is generated from the
//! code); [`types`] holds every type on the wire; [`extract`] parses requests; [`validate`]
//! checks fields the types cannot (ranges, lengths, paths); [`error`] renders failures; [`auth`]
//! checks the API key.
//!
//! **Invariant:** only this module knows JSON shapes and status codes; it calls into the
//! supervisor and the capability modules, which know nothing of HTTP.

pub mod activity;
pub mod auth;
pub mod bash;
pub mod browser;
pub mod browser_dialog;
pub mod browser_network;
pub mod browser_page_more;
pub mod browser_storage;
pub mod captcha;
pub mod cdp;
pub mod code;
pub mod desktop;
pub mod docs;
pub mod document_view;
pub mod error;
pub mod extract;
pub mod file;
pub mod file_watch;
pub mod health;
pub mod hooks;
pub mod mcp;
pub mod mcp_rest;
pub mod openapi;
pub mod page_record;
pub mod processes;
pub mod record;
pub mod sandbox;
pub mod shell;
pub mod skills;
pub mod terminal_page;
pub mod tickets;
pub mod types;
pub mod unsupported;
pub mod util;
pub mod validate;
pub mod vnc;

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
use crate::desktop_session::DesktopSession;
use crate::shell::{Shell, ShellConfig};
use error::ApiError;

/// Largest JSON body any route accepts unless it sets its own limit (uploads do).
pub const DEFAULT_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub supervisor: Arc<Supervisor>,
    pub settings: Arc<Settings>,
    pub activity: Arc<Activity>,
    pub shell: Arc<Shell>,
    pub desktop: Arc<DesktopSession>,
    /// The file service behind `/v1/file/*` (roots and limits from the settings).
    pub files: Arc<crate::files::Files>,
    /// The file watches behind `/v1/file/watch*` (same roots).
    pub watches: Arc<crate::files::watch::Watches>,
    /// The browser API's connection to Chromium (made on first use).
    pub browser: Arc<crate::browser::BrowserService>,
    /// Authenticated connections to the VNC server for viewers.
    pub vnc: Arc<crate::vnc::VncGateway>,
    /// Tickets and viewer sessions for browsers.
    pub tickets: Arc<crate::tickets::Tickets>,
    /// The display's recorder (`/v1/display/record`).
    pub recorder: Arc<crate::recording::Recorder>,
    /// The page screencast recorder (`/v1/browser/page/record`).
    pub page_recorder: Arc<crate::page_recording::PageRecorder>,
    /// HTTP client for loopback services (Chromium's DevTools endpoint).
    pub http: reqwest::Client,
    /// Jupyter sessions behind `/v1/jupyter/*` (kernels start on first use).
    pub jupyter: Arc<crate::jupyter::Jupyter>,
    /// Node sessions and runs behind `/v1/nodejs/*`.
    pub node: Arc<crate::nodejs::NodeSessions>,
    /// The skills directory behind `/v1/skills/*`.
    pub skills: Arc<crate::skills::Skills>,
    /// The shutdown hooks behind `/v1/sandbox/hooks` (run by [`crate::run`]).
    pub hooks: Arc<crate::hooks::Hooks>,

    request_ids: RequestIds,
}

impl AppState {
    pub fn new(
        supervisor: Arc<Supervisor>,
        settings: Arc<Settings>,
        activity: Arc<Activity>,
    ) -> Self {
        let shell = Arc::new(Shell::new(
            ShellConfig::from_settings(&settings),
            activity.clone(),
        ));
        let desktop = Arc::new(DesktopSession::new(settings.display.clone()));
        let vnc = crate::vnc::VncGateway::new(
            settings.vnc.clone(),
            crate::vnc::VncPasswords::generate(),
            supervisor.clone(),
        );
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .no_proxy()
            .build()
            // A client without TLS or proxies only fails to build on a broken resolver setup;
            // the default client has the same needs.
            .unwrap_or_default();
        let (jupyter, node) = code_runtimes(&settings);
        Self {
            jupyter,
            node,
            skills: Arc::new(crate::skills::Skills::new(
                settings.home_dir.join("skills"),
                crate::skills::Limits::default(),
            )),
            hooks: Arc::new(crate::hooks::Hooks::new(
                env_hooks(),
                code_user(),
                settings.workspace.clone(),
            )),
            files: Arc::new(file::service(&settings)),
            watches: Arc::new(crate::files::watch::Watches::new(
                crate::files::Confinement::new(&settings.file_roots, &settings.workspace),
                crate::files::watch::WatchLimits::default(),
            )),
            browser: Arc::new(crate::browser::BrowserService::new(&settings.browser)),
            vnc: Arc::new(vnc),
            tickets: Arc::new(crate::tickets::Tickets::new()),
            recorder: Arc::new(crate::recording::Recorder::new(
                "ffmpeg",
                settings.display.clone(),
                (settings.screen.width, settings.screen.height),
                crate::recording::Limits::default(),
            )),
            page_recorder: Arc::new(crate::page_recording::PageRecorder::new(
                "ffmpeg",
                crate::page_recording::Limits::default(),
            )),
            http,
            supervisor,
            settings,
            activity,
            shell,
            desktop,
            request_ids: RequestIds::new("sbx", &["/healthz"]),
        }
    }

    /// Replaces the shell (tests use their own limits and user).
    pub fn with_shell(mut self, shell: Arc<Shell>) -> Self {
        self.shell = shell;
        self
    }

    /// Uses `passwords` for the VNC server (the ones written to its password file).
    pub fn with_vnc_passwords(mut self, passwords: crate::vnc::VncPasswords) -> Self {
        self.vnc = Arc::new(crate::vnc::VncGateway::new(
            self.settings.vnc.clone(),
            passwords,
            self.supervisor.clone(),
        ));
        self
    }
}

/// The shutdown hooks given in the environment ([`crate::hooks::ENV_VAR`]); a value that does
/// not parse is reported and ignored.
fn env_hooks() -> Vec<crate::hooks::Hook> {
    let Ok(value) = std::env::var(crate::hooks::ENV_VAR) else {
        return Vec::new();
    };
    match crate::hooks::parse_env(&value) {
        Ok(hooks) => hooks,
        Err(error) => {
            tracing::error!(%error, "ignoring the shutdown hooks of the environment");
            Vec::new()
        }
    }
}

/// Who code runs as: sandboxd's own user, or the unprivileged user when sandboxd is root.
fn code_user() -> Option<(u32, u32)> {
    if !nix::unistd::Uid::effective().is_root() {
        return None;
    }
    match nix::unistd::User::from_name(crate::shell::UNPRIVILEGED_USER) {
        Ok(Some(user)) => Some((user.uid.as_raw(), user.gid.as_raw())),
        _ => None,
    }
}

/// The Jupyter and Node runtimes, with their limits. Kernels and sockets live in a private
/// directory of their own.
fn code_runtimes(
    settings: &Settings,
) -> (
    Arc<crate::jupyter::Jupyter>,
    Arc<crate::nodejs::NodeSessions>,
) {
    use std::path::PathBuf;
    use std::time::Duration;
    let base = std::env::temp_dir().join(format!("agentbox-code-{}", std::process::id()));
    let run_as = code_user();
    let jupyter = crate::jupyter::Jupyter::new(crate::jupyter::JupyterConfig {
        python: PathBuf::from("/usr/bin/python3"),
        runtime_dir: base.join("jupyter"),
        workspace: settings.workspace.clone(),
        run_as,
        max_sessions: 8,
        idle_expiry: Duration::from_secs(30 * 60),
        output: crate::jupyter::OutputLimits {
            max_bytes: 8 * 1024 * 1024,
        },
    });
    let node = crate::nodejs::NodeSessions::new(crate::nodejs::NodeConfig {
        node: PathBuf::from("/usr/bin/node"),
        runtime_dir: base.join("node"),
        workspace: settings.workspace.clone(),
        run_as,
        output_limit: 1024 * 1024,
        max_sessions: 16,
        default_idle: Duration::from_secs(30 * 60),
    });
    (Arc::new(jupyter), Arc::new(node))
}

/// Starts the background expiry of idle code sessions.
pub fn spawn_code_reapers(state: &AppState) {
    state.jupyter.spawn_reaper();
    state.node.spawn_reaper();
}

/// The routes that need the API key, with their OpenAPI description.
fn protected_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base())
        .merge(health::protected_routes())
        .merge(activity::routes())
        .merge(processes::routes())
        .merge(desktop::routes())
        .merge(record::routes())
        .merge(mcp_rest::routes())
        .merge(util::routes())
        .merge(sandbox::routes())
        .merge(hooks::routes())
        .merge(skills::routes())
        .merge(shell::routes())
        .merge(bash::routes())
        .merge(file::routes())
        .merge(file_watch::routes())
        .merge(browser::routes())
        .merge(browser_dialog::routes())
        .merge(browser_page_more::routes())
        .merge(browser_storage::routes())
        .merge(captcha::routes())
        .merge(page_record::routes())
        .merge(browser_network::routes())
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

/// The whole API. `/healthz` is outside authentication and does not count as activity.
pub fn router(state: AppState) -> Router {
    let (protected, _) = protected_routes().split_for_parts();
    let protected = protected
        .merge(openapi::routes())
        .merge(docs::routes())
        .merge(cdp::routes())
        .merge(unsupported::routes())
        .merge(vnc::keyed_routes())
        .merge(
            Router::new()
                .nest_service(
                    "/mcp",
                    mcp::service(state.clone(), state.settings.allowed_origins.clone()),
                )
                .layer(middleware::from_fn_with_state(
                    file::write_body_limit(state.files.limits()),
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
    let viewer = vnc::viewer_routes()
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key_or_viewer,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            track_activity,
        ));
    let terminal = terminal_page::routes()
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
    if request.uri().path() == activity::PATH {
        return next.run(request).await;
    }
    let _guard = state.activity.hold();
    next.run(request).await
}
