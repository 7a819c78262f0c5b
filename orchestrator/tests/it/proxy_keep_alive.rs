//! Both hops of the `/api` proxy keep their connections usable when a call is refused without
//! its body being read, in-process and without Docker: a pooled client → a front server
//! wearing the unread-body layer (as the orchestrator's router does) whose route forwards
//! through the real [`HttpProxy`] → an upstream that refuses like sandboxd (401 without the
//! key, 404, 405) and wears the same layer.
//!
//! Refusals come from the front (no key, unknown path) and from the upstream through the
//! proxy; each carries a 200 KB body and is followed by a valid proxied call that reads its
//! body, on the same pools.

use std::net::SocketAddr;

use agentbox_http::unread_body::{DEFAULT_DRAIN_LIMIT, UnreadBodyLayer};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use orchestrator::proxy::http::HttpProxy;
use tokio::net::TcpListener;

const UPSTREAM_KEY: &str = "upstream-key";
const FRONT_KEY: &str = "front-key";
const ROUNDS: usize = 100;

async fn require(key: &'static str, request: Request, next: Next) -> Response {
    let expected = format!("Bearer {key}");
    if request
        .headers()
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == expected.as_bytes())
    {
        next.run(request).await
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

async fn count(body: Body) -> Result<String, StatusCode> {
    let bytes = body
        .collect()
        .await
        .map_err(|_| StatusCode::BAD_REQUEST)?
        .to_bytes();
    Ok(bytes.len().to_string())
}

async fn serve(router: Router) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}

/// An upstream that refuses the way sandboxd does, draining up to `drain_limit` bytes.
async fn upstream(drain_limit: u64) -> anyhow::Result<SocketAddr> {
    let router = Router::new()
        .route("/v1/count", post(count))
        .route("/v1/sandbox", get(|| async { "{}" }))
        .route_layer(middleware::from_fn(|request, next| {
            require(UPSTREAM_KEY, request, next)
        }))
        .layer(UnreadBodyLayer::new().drain_limit(drain_limit));
    serve(router).await
}

async fn forward(
    State((proxy, upstream)): State<(HttpProxy, SocketAddr)>,
    Path(path): Path<String>,
    request: Request,
) -> Response {
    match proxy
        .forward(
            request,
            &format!("http://{upstream}/{path}"),
            Some(UPSTREAM_KEY),
        )
        .await
    {
        Ok(response) => response,
        Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    }
}

/// The front: the API key, the proxy route, the layer outermost.
async fn front(upstream: SocketAddr) -> anyhow::Result<SocketAddr> {
    let router = Router::new()
        .route("/api/{*path}", any(forward))
        .route_layer(middleware::from_fn(|request, next| {
            require(FRONT_KEY, request, next)
        }))
        .with_state((HttpProxy::new(), upstream))
        .layer(UnreadBodyLayer::new());
    serve(router).await
}

type Pooled = Client<HttpConnector, Full<Bytes>>;

async fn call(
    client: &Pooled,
    front: SocketAddr,
    method: &str,
    path: &str,
    keyed: bool,
    body: Bytes,
) -> anyhow::Result<u16> {
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{front}{path}"));
    if keyed {
        request = request.header("authorization", format!("Bearer {FRONT_KEY}"));
    }
    let response = client.request(request.body(Full::new(body))?).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

/// The refusals of one round: method, path, front key, expected status.
const REFUSALS: [(&str, &str, bool, u16); 4] = [
    ("POST", "/api/v1/count", false, 401),
    ("POST", "/nowhere", true, 404),
    ("POST", "/api/v1/nowhere", true, 404),
    ("POST", "/api/v1/sandbox", true, 405),
];

/// Runs the rounds; returns the failures of refused calls and of the valid calls after them.
async fn rounds(front: SocketAddr) -> (Vec<String>, Vec<String>) {
    let client: Pooled = Client::builder(TokioExecutor::new()).build_http();
    let refused_body = Bytes::from(vec![b'x'; 200 * 1024]);
    let (mut refused, mut valid) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for (method, path, keyed, expected) in REFUSALS {
            match call(&client, front, method, path, keyed, refused_body.clone()).await {
                Ok(status) if status == expected => {}
                Ok(status) => refused.push(format!("round {round} {path}: {status}")),
                Err(error) => refused.push(format!("round {round} {path}: {error:?}")),
            }
            let body = Bytes::from_static(b"12345");
            match call(&client, front, "POST", "/api/v1/count", true, body).await {
                Ok(200) => {}
                Ok(status) => valid.push(format!("round {round} after {path}: {status}")),
                Err(error) => valid.push(format!("round {round} after {path}: {error:?}")),
            }
        }
    }
    (refused, valid)
}

/// Without the layer upstream, a proxied refusal comes back now and then as a 502: the upstream
/// closes the connection while the proxy is still sending the body, and the answer is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_on_either_hop_leave_both_pools_usable() -> anyhow::Result<()> {
    let front = front(upstream(DEFAULT_DRAIN_LIMIT).await?).await?;
    let (refused, valid) = rounds(front).await;
    assert!(refused.is_empty(), "refused calls failed: {refused:#?}");
    assert!(valid.is_empty(), "valid calls failed: {valid:#?}");
    Ok(())
}

/// An upstream that does not drain (a body over its limit) answers with `Connection: close`:
/// the proxy does not reuse that connection, and the front still keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_closes_with_notice_breaks_no_later_call() -> anyhow::Result<()> {
    let front = front(upstream(1024).await?).await?;
    let (refused, valid) = rounds(front).await;
    // A refusal itself may arrive as a 502 here: the upstream closes while the proxy is still
    // sending the body. Only the calls after it are the point.
    println!("{} refused calls did not get their status", refused.len());
    assert!(valid.is_empty(), "valid calls failed: {valid:#?}");
    Ok(())
}
