//! `/terminal`: a terminal in a browser page, over the same WebSocket protocol as
//! `/v1/shell/ws` (served again at `/terminal/ws`, under the page's cookie path).
//!
//! Access: the API key, or a terminal session from a terminal ticket (`POST /tickets` with
//! `terminal: true`; see [`crate::api::auth::require_key_or_terminal`]). A desktop session, view-only
//! or not, never opens it. The page is sandboxd's own (HTML and script compiled in) plus
//! xterm.js's files from [`crate::config::Settings::xterm_dir`]; its Content-Security-Policy
//! allows scripts and connections to this origin only, and no inline script.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::http::header::{self, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower::ServiceExt;
use tower_http::services::ServeFile;

use crate::api::AppState;
use crate::api::error::ApiError;

/// The page's path.
pub const PAGE: &str = "/terminal";

const INDEX_HTML: &str = include_str!("terminal_page/index.html");
const TERMINAL_JS: &str = include_str!("terminal_page/terminal.js");
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";
/// xterm.js's files the page loads, served from the xterm directory.
const XTERM_FILES: [&str; 3] = ["xterm.js", "xterm.css", "xterm-addon-fit.js"];

/// Routes under `/terminal` (key or terminal session).
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route(PAGE, get(page))
        .route("/terminal/", get(page))
        .route(
            "/terminal/ws",
            get(crate::api::shell::terminal::terminal_ws),
        )
        .route("/terminal/{file}", get(file))
}

fn with_page_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

async fn page() -> Response {
    with_page_headers(
        (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            INDEX_HTML,
        )
            .into_response(),
    )
}

async fn file(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    if name == "terminal.js" {
        return Ok(with_page_headers(
            (
                [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                TERMINAL_JS,
            )
                .into_response(),
        ));
    }
    // Only the named files: nothing else of the directory, no path from the request.
    let Some(known) = XTERM_FILES.iter().find(|known| **known == name) else {
        return Err(ApiError::not_found(format!(
            "no file {name} in the terminal page"
        )));
    };
    let path = state.settings.xterm_dir.join(known);
    let (parts, _) = request.into_parts();
    let response = match ServeFile::new(&path)
        .oneshot(Request::from_parts(parts, Body::empty()))
        .await
    {
        Ok(response) => response.map(Body::new),
        Err(infallible) => match infallible {},
    };
    if response.status() == StatusCode::NOT_FOUND {
        return Err(ApiError::not_found(format!(
            "xterm.js is not installed ({} is missing)",
            path.display()
        )));
    }
    Ok(with_page_headers(response))
}
