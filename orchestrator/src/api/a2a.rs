//! A2A over HTTP: the Agent Card (open, cacheable) and the JSON-RPC endpoint (`/a2a` and
//! `/a2a/`), both versions on one route. The key is checked first: a missing or wrong bearer
//! is an HTTP 401 with `WWW-Authenticate`, never a JSON-RPC answer. Then the content type
//! (-32005), the version (`A2A-Version`, -32009), the envelope and the params; a call that
//! streams answers `text/event-stream`, each event a JSON-RPC response, until the task ends,
//! waits for the client, or the key is revoked.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::runs::{StreamAuthority, authorized_sse};
use super::{AppState, bearer};
use crate::a2a::codec;
use crate::a2a::model::{Call, StreamItem};
use crate::a2a::rpc::{self, A2aError, RequestId, Version};
use crate::a2a_server::card::{ENDPOINT, agent_card};
use crate::auth::Caller;

/// Largest request: a message with inline files of up to `validate::MAX_INPUT_BYTES` together,
/// in base64, and its JSON.
const BODY_LIMIT: usize = crate::validate::MAX_INPUT_BYTES / 3 * 4 + 1024 * 1024;

/// How long clients may cache the card.
const CARD_MAX_AGE_SECS: u32 = 300;

/// When this process started: the card changes only with a restart (its version, URLs and
/// skills come from the binary and the settings), so that is when it was last modified.
static STARTED: std::sync::LazyLock<std::time::SystemTime> =
    std::sync::LazyLock::new(std::time::SystemTime::now);

pub fn routes() -> Router<AppState> {
    std::sync::LazyLock::force(&STARTED);
    Router::new()
        .route("/.well-known/agent-card.json", get(card))
        .route(ENDPOINT, post(endpoint))
        .route(&format!("{ENDPOINT}/"), post(endpoint))
        // 0.3 clients post to the URL they were given, often the origin.
        .route("/", post(endpoint))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
}

/// The Agent Card, with an `ETag` (a conditional request is a 304).
async fn card(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let card = agent_card(&state.public_url, state.runs.conformance_offered());
    let body = card.to_string();
    let etag = format!(
        "\"{}\"",
        &hex::encode(Sha256::digest(body.as_bytes()))[..32]
    );
    let cache = format!("public, max-age={CARD_MAX_AGE_SECS}");
    let modified = httpdate::fmt_http_date(*STARTED);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::ETAG, etag),
        (header::CACHE_CONTROL, cache),
        (header::LAST_MODIFIED, modified),
    ] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}

/// 401 with the challenge a client needs.
fn unauthorized(message: &str) -> Response {
    let body = serde_json::json!({"error": {"code": "unauthorized", "message": message}});
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            "Bearer realm=\"agentbox\", error=\"invalid_token\"",
        )],
        axum::Json(body),
    )
        .into_response()
}

fn rpc_error(id: &RequestId, error: &A2aError, version: Version) -> Response {
    axum::Json(rpc::error(id, error, version)).into_response()
}

async fn endpoint(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(key) = bearer(&headers) else {
        return unauthorized("an API key is needed: Authorization: Bearer <key>");
    };
    let caller = match state.keys.authenticate(key).await {
        Ok(Some(caller)) => caller,
        Ok(None) => return unauthorized("unknown or revoked API key"),
        Err(error) => return super::error::ApiError::from(error).into_response(),
    };
    tracing::Span::current().record("key_id", caller.key_id.as_str());
    let version =
        match Version::from_header(headers.get("a2a-version").and_then(|v| v.to_str().ok())) {
            Ok(version) => version,
            Err(error) => return rpc_error(&Value::Null, &error, Version::V10),
        };
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            let v = v.trim();
            v.eq_ignore_ascii_case("application/json") || v.ends_with("+json")
        });
    if !json {
        let error = A2aError::ContentType("requests are application/json".into());
        return rpc_error(&Value::Null, &error, version);
    }
    let envelope = match rpc::envelope(&body) {
        Ok(envelope) => envelope,
        Err((id, error)) => return rpc_error(&id, &error, version),
    };
    let id = envelope.id;
    let mut call = match codec::call(version, &envelope.method, &envelope.params) {
        Ok(call) => call,
        Err(error) => return rpc_error(&id, &error, version),
    };
    if let Call::Send(request) | Call::Stream(request) = &mut call {
        match headers.get("idempotency-key").map(HeaderValue::to_str) {
            None => {}
            Some(Ok(key)) => request.idempotency_key = Some(key.to_string()),
            Some(Err(_)) => {
                let error =
                    A2aError::InvalidParams("`Idempotency-Key` must be visible ASCII".into());
                return rpc_error(&id, &error, version);
            }
        }
    }
    let streams = call.streams();
    match answer(&state, &caller, version, call).await {
        Ok(Answer::Result(result)) => axum::Json(rpc::result(&id, result)).into_response(),
        Ok(Answer::Stream(items)) => stream(&state, caller, version, id, Ok(items)),
        // A 0.3 client reads a streaming call's answer as a stream, errors included.
        Err(error) if streams && version == Version::V03 => {
            stream(&state, caller, version, id, Err(error))
        }
        Err(error) => rpc_error(&id, &error, version),
    }
}

enum Answer {
    Result(Value),
    Stream(tokio::sync::mpsc::Receiver<StreamItem>),
}

async fn answer(
    state: &AppState,
    caller: &Caller,
    version: Version,
    call: Call,
) -> Result<Answer, A2aError> {
    // Each key sees only its own tasks, an admin's included.
    let owner = caller.key_id.as_str();
    let tasks = &state.a2a;
    Ok(match call {
        Call::Send(request) => {
            Answer::Result(codec::reply(version, &tasks.send(owner, request).await?))
        }
        Call::Stream(request) => Answer::Stream(tasks.stream(owner, request).await?),
        Call::Get(request) => Answer::Result(codec::task(
            version,
            &tasks
                .get(owner, &request.id, request.history_length)
                .await?,
        )),
        Call::List(request) => Answer::Result(codec::task_page(&tasks.list(owner, request).await?)),
        Call::Cancel { id } => {
            Answer::Result(codec::task(version, &tasks.cancel(owner, &id).await?))
        }
        Call::Subscribe { id } => Answer::Stream(tasks.subscribe(owner, &id).await?),
        Call::PushConfig => return Err(A2aError::PushNotSupported),
        Call::ExtendedCard => return Err(A2aError::ExtendedCardNotConfigured),
    })
}

/// The items as Server-Sent Events, each a JSON-RPC response with the request's id.
fn stream(
    state: &AppState,
    caller: Caller,
    version: Version,
    id: RequestId,
    items: Result<tokio::sync::mpsc::Receiver<StreamItem>, A2aError>,
) -> Response {
    let items = match items {
        Ok(items) => items,
        Err(error) => {
            let response = rpc::error(&id, &error, version);
            let event = SseEvent::default().json_data(&response);
            let events = futures_util::stream::iter(
                event.into_iter().map(Ok::<_, std::convert::Infallible>),
            );
            return Sse::new(events).into_response();
        }
    };
    let authority = StreamAuthority::Key(caller.key_id);
    authorized_sse(state, authority, items, move |item| {
        let response = rpc::result(&id, codec::stream_item(version, &item));
        let event = SseEvent::default().json_data(&response).ok()?;
        Some((event, false))
    })
}
