//! Request ids and the request span: every request gets an id (the caller's `x-request-id` when
//! it is a sane one, else `<prefix>-<n>`), a `request` span carrying it, and a log line when it
//! completes; the answer carries the id back in `x-request-id`.
//!
//! The span has the fields `request_id`, `method`, `path`, and the empty `sandbox_id` and
//! `key_id`, which inner layers fill in with `Span::current().record(..)` once they know them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The header that carries a request's id, both ways.
pub const HEADER: &str = "x-request-id";

/// Longest caller-chosen id kept; longer ones are replaced.
const MAX_LEN: usize = 128;

/// Where new request ids come from; cheap to clone. Use with
/// `middleware::from_fn_with_state(ids, request_id::trace)`.
#[derive(Debug, Clone)]
pub struct RequestIds {
    prefix: &'static str,
    next: Arc<AtomicU64>,
    /// Paths asked so often that a line per request is noise (`/healthz`).
    quiet_paths: &'static [&'static str],
}

impl RequestIds {
    /// Ids `<prefix>-1`, `<prefix>-2`, …; requests to `quiet_paths` are not logged.
    pub fn new(prefix: &'static str, quiet_paths: &'static [&'static str]) -> Self {
        Self {
            prefix,
            next: Arc::new(AtomicU64::new(1)),
            quiet_paths,
        }
    }

    /// The caller's id if it is printable ASCII of at most 128 bytes, else a new one.
    pub fn for_request(&self, headers: &HeaderMap) -> String {
        headers
            .get(HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| {
                !v.is_empty() && v.len() <= MAX_LEN && v.bytes().all(|b| b.is_ascii_graphic())
            })
            .map(str::to_owned)
            .unwrap_or_else(|| {
                format!(
                    "{}-{}",
                    self.prefix,
                    self.next.fetch_add(1, Ordering::Relaxed)
                )
            })
    }
}

/// Middleware: the request's id, its span, its completion line, and the id on the answer.
pub async fn trace(State(ids): State<RequestIds>, request: Request, next: Next) -> Response {
    let id = ids.for_request(request.headers());
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        %method,
        %path,
        sandbox_id = tracing::field::Empty,
        key_id = tracing::field::Empty,
    );
    async move {
        let started = std::time::Instant::now();
        let mut response = next.run(request).await;
        let status = response.status().as_u16();
        let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        if !ids.quiet_paths.contains(&path.as_str()) {
            tracing::info!(status, elapsed_ms, "request finished");
        }
        // The id is printable ASCII (checked above, or made here), so it is a valid value.
        if let Ok(value) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(HEADER, value);
        }
        response
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_bytes(id).unwrap());
        headers
    }

    #[test]
    fn a_sane_caller_id_is_kept_and_others_replaced() {
        let ids = RequestIds::new("t", &[]);
        assert_eq!(ids.for_request(&headers(b"abc-123")), "abc-123");
        assert_eq!(ids.for_request(&HeaderMap::new()), "t-1");
        assert_eq!(ids.for_request(&headers(b"has space")), "t-2");
        assert_eq!(ids.for_request(&headers(&[b'x'; 129])), "t-3");
        assert_eq!(ids.for_request(&headers(&[0xc3, 0xa9])), "t-4");
        assert_eq!(ids.for_request(&headers(&[b'x'; 128])).len(), 128);
    }
}
