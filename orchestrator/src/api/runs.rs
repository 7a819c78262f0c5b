//! `/v1/runs`: create (idempotent), list, get, cancel, takeover, hand-back, answer; the event
//! log as Server-Sent Events (or a JSON page); artifacts.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::ApiJson;
use super::types::{
    Artifact, ArtifactList, CreateRunRequest, ErrorBody, HandbackRequest, Run, RunEvent,
    RunEventPage, RunInputRequest, RunLimits, RunList, RunStatus, RunUrls,
};
use crate::auth::Caller;
use crate::db::{ArtifactRecord, EventRecord, RunRecord};
use crate::runs::{Created, RunRequest};
use agentbox_http::timestamp::rfc3339_from_unix_ms as rfc3339;

/// Most events in one JSON page.
const MAX_PAGE: i64 = 1000;
/// SSE comment lines that keep idle connections (and proxies) open.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How often a live stream checks that the key it was opened with still stands.
const AUTHORITY_CHECK: Duration = Duration::from_secs(5);

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(get, delete))
        .routes(routes!(cancel))
        .routes(routes!(takeover))
        .routes(routes!(handback))
        .routes(routes!(input))
        .routes(routes!(events))
        .routes(routes!(artifacts))
        .routes(routes!(artifact))
}

/// The wire form of a run.
pub fn to_wire(state: &AppState, record: &RunRecord) -> Run {
    let base = format!("{}/v1/runs/{}", state.public_url, record.id);
    let limits = record.limits;
    Run {
        id: record.id.clone(),
        status: record.status,
        task: record.task.clone(),
        model: record.model.clone(),
        sandbox_id: record.sandbox_id.clone(),
        limits: RunLimits {
            max_steps: limits.max_steps,
            max_seconds: limits.max_seconds,
            max_images: limits.max_images,
        },
        metadata: record.metadata.clone(),
        answer: record.answer.clone(),
        reason: record.reason.clone(),
        last_seq: record.last_seq,
        created_at: rfc3339(record.created_at),
        updated_at: rfc3339(record.updated_at),
        ended_at: record.ended_at.map(rfc3339),
        urls: RunUrls {
            events: format!("{base}/events"),
            artifacts: format!("{base}/artifacts"),
            sandbox: record
                .sandbox_id
                .as_ref()
                .map(|id| format!("{}/v1/sandboxes/{id}", state.public_url)),
        },
    }
}

fn artifact_wire(state: &AppState, record: &ArtifactRecord) -> Artifact {
    Artifact {
        url: format!(
            "{}/v1/runs/{}/artifacts/{}",
            state.public_url, record.run_id, record.name
        ),
        name: record.name.clone(),
        kind: record.kind.clone(),
        size: record.size,
        content_type: record.content_type.clone(),
        sha256: record.sha256.clone(),
        created_at: rfc3339(record.created_at),
    }
}

/// A stored event on the wire: its JSON with `seq` and `at` added.
pub(super) fn event_wire(event: &EventRecord) -> RunEvent {
    let mut fields = match serde_json::from_str::<serde_json::Value>(&event.data) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    fields.remove("type");
    RunEvent {
        seq: event.seq,
        at: rfc3339(event.at),
        kind: event.kind.clone(),
        fields,
    }
}

/// Starts a run. With an `Idempotency-Key`, retrying the same request returns the same run
/// (200); the same key with another body is a 409.
#[utoipa::path(post, path = "/v1/runs", tag = "runs",
    request_body = CreateRunRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "makes retries safe (1 to 255 bytes)")),
    responses(
        (status = 201, description = "started", body = Run),
        (status = 200, description = "the run this idempotency key made", body = Run),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 404, description = "no such sandbox", body = ErrorBody),
        (status = 409, description = "the sandbox has an active run, or the key was used with another body", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CreateRunRequest>,
) -> Result<(StatusCode, Json<Run>), ApiError> {
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| ApiError {
                    loc: Some(vec!["header".into(), "Idempotency-Key".into()]),
                    ..ApiError::invalid("invalid `Idempotency-Key`: not visible ASCII")
                })?
                .to_string(),
        ),
    };
    let limits = request.limits.unwrap_or_default();
    let (record, created) = state
        .runs
        .create(
            &caller.key_id,
            RunRequest {
                task: request.task,
                model: request.model,
                sandbox_id: request.sandbox_id,
                max_steps: limits.max_steps,
                max_seconds: limits.max_seconds,
                max_images: limits.max_images,
                metadata: request.metadata.unwrap_or_default(),
                idempotency_key,
                ..RunRequest::default()
            },
        )
        .await?;
    let code = match created {
        Created::New => StatusCode::CREATED,
        Created::Replayed => StatusCode::OK,
    };
    Ok((code, Json(to_wire(&state, &record))))
}

/// Lists runs, newest first: `?status=running` and any number of `metadata.KEY=VALUE`.
#[utoipa::path(get, path = "/v1/runs", tag = "runs",
    params(
        ("status" = Option<RunStatus>, Query, description = "only runs in this state"),
        ("metadata.KEY" = Option<String>, Query, description = "only runs whose metadata KEY has this value"),
    ),
    responses((status = 200, body = RunList), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> Result<Json<RunList>, ApiError> {
    let (status, metadata) = super::extract::list_query::<RunStatus>(query.as_deref())?;
    let records = state.runs.list(caller.owner(), status, &metadata).await?;
    Ok(Json(RunList {
        runs: records.iter().map(|r| to_wire(&state, r)).collect(),
    }))
}

/// One run.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    let record = state.runs.get(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Deletes an ended run: its record, events and artifacts (screenshots and copied outputs),
/// and the disk space they took. Share links to it stop opening.
#[utoipa::path(delete, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 204, description = "deleted"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "the run has not ended: cancel it first", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.runs.delete(&id, caller.owner()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Cancels a run; answers once its final `canceled` status is written (an action in flight
/// finishes first; nothing is written after the status). An `a2a:` run answers once the cancel
/// is sent to the remote agent: `canceled` when it confirmed at once, `canceling` until it
/// does; a refusal is a 409 and the run goes on.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "the run has ended, another orchestrator process drives it, or the remote agent refused the cancel", body = ErrorBody),
        (status = 504, body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    let record = state.runs.cancel(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Takes control: answers once the agent's in-flight action has finished and the run is
/// paused; from then on control viewers' input reaches the desktop.
#[utoipa::path(post, path = "/v1/runs/{id}/takeover", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "the run has ended, is still queued, or another process drives it", body = ErrorBody)))]
pub async fn takeover(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Run>, ApiError> {
    let record = state.runs.take_over(&id, caller.owner()).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Gives control back: viewers' input stops, and the agent goes on from a fresh screenshot,
/// told that a person acted.
#[utoipa::path(post, path = "/v1/runs/{id}/handback", tag = "runs",
    params(("id" = String, Path)),
    request_body = HandbackRequest,
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "the run is not paused", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn handback(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<HandbackRequest>,
) -> Result<Json<Run>, ApiError> {
    let record = state
        .runs
        .hand_back(&id, caller.owner(), request.note)
        .await?;
    Ok(Json(to_wire(&state, &record)))
}

/// Answers the agent's question (status `waiting_for_input`).
#[utoipa::path(post, path = "/v1/runs/{id}/input", tag = "runs",
    params(("id" = String, Path)),
    request_body = RunInputRequest,
    responses((status = 200, body = Run), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "the run is not waiting for input", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn input(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(request): ApiJson<RunInputRequest>,
) -> Result<Json<Run>, ApiError> {
    let record = state.runs.answer(&id, caller.owner(), request.text).await?;
    Ok(Json(to_wire(&state, &record)))
}

/// `format` of the events route.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventsFormat {
    Sse,
    Json,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events after this seq (`Last-Event-ID` wins when both are given).
    pub after_seq: Option<i64>,
    /// `sse` (default) or `json` (one page).
    #[param(inline)]
    pub format: Option<EventsFormat>,
    /// Page size for `json` (default 500).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// The run's event log. As Server-Sent Events (event id = seq, event name = type): replays
/// after `Last-Event-ID` (or `after_seq`), then follows live with no gap and no duplicate,
/// with heartbeats, and ends after the terminal `run.status`. `?format=json` answers one page.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs",
    params(("id" = String, Path), EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "resume after this seq")),
    responses(
        (status = 200, description = "Server-Sent Events (each event's data a `RunEvent`), or with \
            `format=json` one page", content((String = "text/event-stream"), (RunEventPage = "application/json"))),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError {
        loc: Some(vec!["query".into()]),
        ..ApiError::invalid(format!("invalid query: {}", e.body_text()))
    })?;
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|seq| *seq >= 0)
                .ok_or_else(|| ApiError {
                    loc: Some(vec!["header".into(), "Last-Event-ID".into()]),
                    ..ApiError::invalid("invalid `Last-Event-ID`: a seq (0 or more)")
                })?,
        ),
    };
    if query.after_seq.is_some_and(|seq| seq < 0) {
        return Err(ApiError {
            loc: Some(vec!["query".into(), "after_seq".into()]),
            ..ApiError::invalid("invalid `after_seq`: 0 or more")
        });
    }
    let after = last_event_id.or(query.after_seq).unwrap_or(0);
    match query.format.unwrap_or(EventsFormat::Sse) {
        EventsFormat::Json => {
            let limit = query.limit.unwrap_or(500);
            if !(1..=MAX_PAGE).contains(&limit) {
                return Err(ApiError {
                    loc: Some(vec!["query".into(), "limit".into()]),
                    ..ApiError::invalid(format!("invalid `limit`: 1 to {MAX_PAGE}"))
                });
            }
            let (run, events) = state.runs.events(&id, caller.owner(), after, limit).await?;
            let next_after_seq = events.last().map_or(after, |e| e.seq);
            let page = RunEventPage {
                done: run.status.is_terminal() && next_after_seq >= run.last_seq,
                status: run.status,
                next_after_seq,
                events: events.iter().map(event_wire).collect(),
            };
            Ok(Json(page).into_response())
        }
        EventsFormat::Sse => {
            state.runs.get(&id, caller.owner()).await?;
            let authority = match caller.console_session {
                Some(session) => StreamAuthority::Console(session),
                None => StreamAuthority::Key(caller.key_id),
            };
            Ok(event_stream(&state, &id, after, authority))
        }
    }
}

/// What a live event stream was opened under; the stream ends when it no longer stands.
pub(super) enum StreamAuthority {
    /// An API key sent as a header.
    Key(String),
    /// A web console sign-in (ends at sign-out, expiry or the key's revocation).
    Console(String),
    /// A share link for this run.
    Share { token: String, run_id: String },
}

impl StreamAuthority {
    /// Whether what the stream was opened under still stands.
    pub(super) async fn stands(&self, state: &AppState) -> bool {
        match self {
            StreamAuthority::Key(key_id) => matches!(
                state.runs.store().key(key_id).await,
                Ok(Some(key)) if key.revoked_at.is_none()
            ),
            StreamAuthority::Console(session) => {
                state.console.is_live(session).await.unwrap_or(false)
            }
            StreamAuthority::Share { token, run_id } => matches!(
                state.sandboxes.verify_share_token(token, run_id).await,
                Ok(Ok(_))
            ),
        }
    }
}

/// The run's events after `after` as Server-Sent Events (event id = seq, event name = type),
/// live until the terminal status, or until `authority` no longer stands.
pub(super) fn event_stream(
    state: &AppState,
    id: &str,
    after: i64,
    authority: StreamAuthority,
) -> Response {
    let follow = state.runs.follow(id, after);
    authorized_sse(state, authority, follow, |event| {
        let sse = SseEvent::default()
            .id(event.seq.to_string())
            .event(event.kind.clone())
            .json_data(event_wire(&event))
            .ok()?;
        Some((sse, crate::runs::ends_run(&event)))
    })
}

/// Server-Sent Events of what `source` gives, each written by `write` (`None`: the stream
/// ends; `Some((event, true))`: the last one), with heartbeats; the stream ends when the
/// authority it was opened under no longer stands (checked every [`AUTHORITY_CHECK`]).
pub(super) fn authorized_sse<T, W>(
    state: &AppState,
    authority: StreamAuthority,
    mut source: tokio::sync::mpsc::Receiver<T>,
    write: W,
) -> Response
where
    T: Send + 'static,
    W: Fn(T) -> Option<(SseEvent, bool)> + Send + 'static,
{
    let state = state.clone();
    let stream = async_stream_of(move |tx| async move {
        let mut check = tokio::time::interval(AUTHORITY_CHECK);
        check.tick().await;
        loop {
            tokio::select! {
                item = source.recv() => {
                    let Some((event, last)) = item.and_then(&write) else { return };
                    if tx.send(event).await.is_err() || last {
                        return;
                    }
                }
                _ = check.tick() => {
                    if !authority.stands(&state).await {
                        return;
                    }
                }
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response()
}

/// A stream fed by a task: `produce` gets the sending half; the stream ends when it returns,
/// and the task stops when the client goes away (its sends fail).
pub(super) fn async_stream_of<F, Fut>(
    produce: F,
) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<SseEvent>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(produce(tx));
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|item| item.map(Ok)))
}

/// The files a run produced: outputs (saved under `~/outputs`) and screenshots.
#[utoipa::path(get, path = "/v1/runs/{id}/artifacts", tag = "runs",
    params(("id" = String, Path)),
    responses((status = 200, body = ArtifactList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn artifacts(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<ArtifactList>, ApiError> {
    let records = state.runs.artifacts(&id, caller.owner()).await?;
    Ok(Json(ArtifactList {
        artifacts: records.iter().map(|r| artifact_wire(&state, r)).collect(),
    }))
}

/// One artifact's bytes. Images are shown inline; everything else is a download. Never run as
/// script on this origin (`Content-Security-Policy: sandbox`, `nosniff`).
#[utoipa::path(get, path = "/v1/runs/{id}/artifacts/{folder}/{file}", tag = "runs",
    params(("id" = String, Path), ("folder" = String, Path, description = "`outputs` or `screenshots`"),
        ("file" = String, Path)),
    responses(
        (status = 200, description = "the bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn artifact(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, folder, file)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let name = format!("{folder}/{file}");
    let (record, bytes) = state.runs.artifact(&id, caller.owner(), &name).await?;
    Ok(artifact_response(&record, bytes, &file))
}

/// An artifact's bytes as sandbox-originated content: images inline, anything else a download,
/// never script on this origin.
pub(super) fn artifact_response(
    record: &ArtifactRecord,
    bytes: bytes::Bytes,
    file: &str,
) -> Response {
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    let inline = record.content_type.starts_with("image/");
    let content_type = HeaderValue::from_str(&record.content_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    if !inline {
        // The name is sanitised to [A-Za-z0-9._-]: safe inside the quotes.
        let disposition = format!("attachment; filename=\"{file}\"");
        if let Ok(value) = HeaderValue::from_str(&disposition) {
            headers.insert(header::CONTENT_DISPOSITION, value);
        }
    }
    super::proxy::sandboxed(headers, !inline);
    response
}
