//! The router-test fixture: calls sent through a server's real [`Router`] with `oneshot` (no
//! socket), answers read back whole as status, headers and body. Shared by the router tests
//! of sandboxd and the orchestrator, which build their own router and check their own answers.
//!
//! ```ignore
//! let (status, body) = call(&app, Call::post("/v1/browser/page/navigate").json(&json!({}))).await;
//! let answer = send(&app, Call::get("/v1/processes").bearer("k1")).await;
//! ```
//!
//! A test fixture: a request that cannot be built or sent, or a body that cannot be read, is a
//! bug in the test and panics with what failed.

use std::collections::BTreeSet;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// A request being built: method, path, headers, body.
#[derive(Debug)]
pub struct Call {
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    body: Body,
}

impl Call {
    /// `method` on `path` (with its query string), no headers, no body.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: Body::empty(),
        }
    }

    pub fn get(path: impl Into<String>) -> Self {
        Self::new(Method::GET, path)
    }

    pub fn post(path: impl Into<String>) -> Self {
        Self::new(Method::POST, path)
    }

    pub fn put(path: impl Into<String>) -> Self {
        Self::new(Method::PUT, path)
    }

    pub fn delete(path: impl Into<String>) -> Self {
        Self::new(Method::DELETE, path)
    }

    pub fn patch(path: impl Into<String>) -> Self {
        Self::new(Method::PATCH, path)
    }

    /// Adds a header (repeatable; a name given twice is sent twice).
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// `Authorization: Bearer <key>`.
    pub fn bearer(self, key: &str) -> Self {
        self.header(AUTHORIZATION.as_str(), format!("Bearer {key}"))
    }

    /// A JSON body, with `Content-Type: application/json`.
    pub fn json(self, body: &Value) -> Self {
        self.bytes("application/json", body.to_string())
    }

    /// A body of any type, with its `Content-Type`.
    pub fn bytes(mut self, content_type: &str, body: impl Into<Body>) -> Self {
        self.body = body.into();
        self.header(CONTENT_TYPE.as_str(), content_type)
    }

    /// The request as the router receives it.
    pub fn request(self) -> Request<Body> {
        let mut builder = Request::builder().method(self.method).uri(&self.path);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        builder
            .body(self.body)
            .unwrap_or_else(|error| panic!("a request for {}: {error}", self.path))
    }
}

impl From<Call> for Request<Body> {
    fn from(call: Call) -> Self {
        call.request()
    }
}

/// A whole answer.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON, or `Null` when it is not JSON (an empty body, a file).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// A header's value as text, if present and printable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// Sends `request` through `app` and returns the answer as it is, body unread (for bodies that
/// are streams, like an SSE answer).
pub async fn respond(app: &Router, request: impl Into<Request<Body>>) -> Response<Body> {
    match app.clone().oneshot(request.into()).await {
        Ok(response) => response,
        Err(infallible) => match infallible {},
    }
}

/// Sends `request` through `app` and reads the whole answer.
pub async fn send(app: &Router, request: impl Into<Request<Body>>) -> Answer {
    let request = request.into();
    let what = format!("{} {}", request.method(), request.uri());
    let response = respond(app, request).await;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .unwrap_or_else(|error| panic!("the body of the answer to {what}: {error}"))
        .to_bytes();
    Answer {
        status,
        headers,
        body,
    }
}

/// Sends `request` through `app`; returns the status and the body as JSON (`Null` when it is
/// not JSON).
pub async fn call(app: &Router, request: impl Into<Request<Body>>) -> (StatusCode, Value) {
    let answer = send(app, request).await;
    (answer.status, answer.json())
}

/// Every path `app` serves, from its route table (axum's `Debug` of a router lists its paths;
/// the fallback's own table is left out), wildcards written as plain parameters.
pub fn served_paths(app: &Router) -> BTreeSet<String> {
    let text = format!("{app:?}");
    let table = text.split("fallback_router:").next().unwrap_or_default();
    let mut paths = BTreeSet::new();
    for (at, _) in table.match_indices("RouteId(") {
        let rest = &table[at..];
        let Some(quote) = rest.find("): \"") else {
            continue;
        };
        if rest[..quote].len() > "RouteId(".len() + 20 {
            continue; // not `RouteId(n): "path"`
        }
        let path = &rest[quote + 4..];
        let Some(end) = path.find('"') else {
            continue;
        };
        paths.insert(path[..end].replace("{*", "{"));
    }
    assert!(!paths.is_empty(), "axum's Debug output changed: {text}");
    paths
}

/// The methods `app` serves on the route template `path`: the `Allow` header of the 405 a
/// TRACE gets (no route takes TRACE), HEAD left out (axum serves it with GET). Parameters are filled with `0`; `headers` go with the request (a key, say).
pub async fn served_methods(
    app: &Router,
    path: &str,
    headers: &[(&str, &str)],
) -> BTreeSet<String> {
    let concrete: String = path
        .split('/')
        .map(|segment| {
            if segment.starts_with('{') {
                "0"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    let mut request = Call::new(Method::TRACE, &concrete);
    for (name, value) in headers {
        request = request.header(name, *value);
    }
    let answer = send(app, request).await;
    assert_eq!(
        answer.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "TRACE {concrete}"
    );
    let allow = answer
        .header("allow")
        .unwrap_or_else(|| panic!("no printable Allow header on the 405 of TRACE {concrete}"))
        .to_ascii_lowercase();
    allow
        .split(',')
        .map(|method| method.trim().to_string())
        .filter(|method| method != "head")
        .collect()
}
