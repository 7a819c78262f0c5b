//! HTTP reverse proxy: forwards a request to a sandbox service with streaming bodies in both
//! directions. The client's credentials (Authorization, cookies) never reach the sandbox; the
//! orchestrator substitutes sandboxd's own key where the upstream needs one.

use std::time::Duration;

use axum::body::Body;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Request, Response, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Headers that belong to one hop and are not forwarded (RFC 9110 section 7.6.1), plus the
/// client's credentials.
const DROPPED: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "authorization",
    "cookie",
    "x-aio-api-key",
];

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("bad upstream URL: {0}")]
    Url(String),
    #[error("the sandbox did not answer: {0}")]
    Upstream(String),
}

/// A pooled HTTP/1.1 client for sandbox services.
#[derive(Clone)]
pub struct HttpProxy {
    client: Client<HttpConnector, Body>,
}

impl Default for HttpProxy {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpProxy {
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(32)
            .build(connector);
        Self { client }
    }

    /// Sends `request` to `upstream` (`http://ip:port/path?query`), with `bearer` as the
    /// upstream's Authorization when given.
    pub async fn forward(
        &self,
        request: Request<Body>,
        upstream: &str,
        bearer: Option<&str>,
    ) -> Result<Response<Body>, ProxyError> {
        let uri: Uri = upstream
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| ProxyError::Url(e.to_string()))?;
        let (mut parts, body) = request.into_parts();
        strip_hop_headers(&mut parts.headers);
        if let Some(authority) = uri.authority()
            && let Ok(host) = HeaderValue::from_str(authority.as_str())
        {
            parts.headers.insert(header::HOST, host);
        }
        if let Some(key) = bearer
            && let Ok(value) = HeaderValue::from_str(&format!("Bearer {key}"))
        {
            parts.headers.insert(header::AUTHORIZATION, value);
        }
        parts.uri = uri;
        parts.version = axum::http::Version::HTTP_11;
        let upstream_request = Request::from_parts(parts, body);
        let response = self
            .client
            .request(upstream_request)
            .await
            .map_err(|e| ProxyError::Upstream(e.to_string()))?;
        let (mut parts, body) = response.into_parts();
        strip_hop_headers(&mut parts.headers);
        parts.headers.remove(header::SET_COOKIE);
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// Removes hop-by-hop headers, those named in `Connection`, and credentials.
pub fn strip_hop_headers(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in DROPPED {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_headers_and_credentials_are_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-private"),
        );
        headers.insert("x-private", HeaderValue::from_static("1"));
        headers.insert(
            "authorization",
            HeaderValue::from_static("Bearer orchestrator-key"),
        );
        headers.insert("cookie", HeaderValue::from_static("agentbox_vnc=abc"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        strip_hop_headers(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key("content-type"));
    }
}
