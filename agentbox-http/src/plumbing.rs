//! The plumbing both servers put around their routes, applied in one place so that it is the
//! same, in the same order, on both. From the inside out:
//!
//! 1. the [`fallback`](crate::fallback) answers (404 for an unknown path, 405 for a known path
//!    asked with another method), rendered as the server's error type `E`;
//! 2. the server's own layer (`inner`), around every route and both fallbacks, inside the
//!    request span so that it can record fields on it (the orchestrator's `sandbox_id`) and
//!    sees every request (sandboxd's default body limit);
//! 3. [`request_id::trace`]: the request id, the `request` span and the completion log line;
//! 4. outermost, [`UnreadBodyLayer`]: a body a refusal left unread is drained or the close
//!    announced, so the caller's next call on the connection works (see [`crate::unread_body`]).
//!
//! ```ignore
//! agentbox_http::plumbing::wrap::<ApiError, _, _>(routes, inner_layer, request_ids)
//!     .with_state(state)
//! ```

use std::convert::Infallible;

use axum::Router;
use axum::extract::Request;
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::Route;
use tower::{Layer, Service};

use crate::fallback::{self, RouteError};
use crate::request_id::{self, RequestIds};
use crate::unread_body::UnreadBodyLayer;

/// Puts the shared plumbing around `routes`, with `inner` between the fallbacks and the
/// request span (see the module's documentation for the order and why).
pub fn wrap<E, S, L>(routes: Router<S>, inner: L, request_ids: RequestIds) -> Router<S>
where
    E: From<RouteError> + IntoResponse + Send + 'static,
    S: Clone + Send + Sync + 'static,
    L: Layer<Route> + Clone + Send + Sync + 'static,
    L::Service: Service<Request> + Clone + Send + Sync + 'static,
    <L::Service as Service<Request>>::Response: IntoResponse + 'static,
    <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
    <L::Service as Service<Request>>::Future: Send + 'static,
{
    routes
        .fallback(fallback::not_found::<E>)
        .method_not_allowed_fallback(fallback::method_not_allowed::<E>)
        .layer(inner)
        .layer(middleware::from_fn_with_state(
            request_ids,
            request_id::trace,
        ))
        .layer(UnreadBodyLayer::new())
}

/// Serves `app` on `listener` until `stop` resolves, then lets the requests in flight finish.
///
/// Every accepted connection has `TCP_NODELAY`: a response written in pieces (an SSE stream's
/// headers, then each event; a chunked body) goes out at once instead of waiting, under
/// Nagle's algorithm, for the client's delayed acknowledgement of the piece before (40 ms on
/// Linux: measured as the whole difference between a run's first streamed event at 42 ms and
/// at 2 ms, `agentbox-bench a2a`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|stream| {
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY could not be set on a connection");
        }
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}
