//! The orchestrator's own web files (`novnc/` at the repository root, embedded in the binary):
//! the viewer page, the web console's pages and scripts, and noVNC's client library, served
//! under `/assets/`, as the viewer page of `/v1/sandboxes/{id}/vnc/` and as the console's pages
//! ([`super::console`]). Nothing here ever comes from a sandbox.
//!
//! Pages get a strict Content-Security-Policy: scripts, styles and connections to this origin
//! only, no inline script, no framing.

use axum::extract::Path;
use axum::http::header::{self, HeaderValue};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::error::ApiError;

#[derive(rust_embed::RustEmbed)]
#[folder = "../novnc/"]
#[exclude = "*.md"]
struct Files;

/// The policy of every page the orchestrator serves.
pub const PAGE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/assets/{*path}", get(asset))
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// The headers every page and file of the orchestrator's own carries.
pub fn harden(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(PAGE_CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// One embedded file, or 404.
fn file(path: &str) -> Result<Response, ApiError> {
    let Some(file) = Files::get(path) else {
        return Err(ApiError::not_found(format!("no asset {path}")));
    };
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type(path))],
        file.data.into_owned(),
    )
        .into_response();
    harden(response.headers_mut());
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// An embedded page (HTML), never cached.
pub fn page(path: &str) -> Result<Response, ApiError> {
    let mut response = file(path)?;
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// An embedded text file (a page template).
pub fn text(path: &str) -> Option<String> {
    let file = Files::get(path)?;
    String::from_utf8(file.data.into_owned()).ok()
}

async fn asset(Path(path): Path<String>) -> Result<Response, ApiError> {
    file(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_viewer_and_novnc_are_embedded() {
        assert!(Files::get("viewer/index.html").is_some());
        assert!(Files::get("viewer/viewer.js").is_some());
        assert!(Files::get("vendor/novnc/core/rfb.js").is_some());
        assert!(Files::get("vendor/novnc/vendor/pako/lib/zlib/inflate.js").is_some());
        assert!(Files::get("README.md").is_none());
        let response = page("viewer/index.html").unwrap();
        assert_eq!(
            response.headers()[header::CONTENT_SECURITY_POLICY],
            PAGE_CSP
        );
        assert!(file("../Cargo.toml").is_err());
    }
}
