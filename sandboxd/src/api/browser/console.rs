//! The active tab's console: `/v1/browser/page/console` and `console/export` (see
//! [`crate::browser::console`]).

use std::ffi::OsStr;

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{save_path_error, write_file};
use crate::api::error::ApiError;
use crate::api::extract::{AioJson, AioQuery};
use crate::api::types::{
    ConsoleEntry, ConsoleExportRequest, ConsoleQuery, Envelope, ErrorBody, SavedFile,
};
use crate::api::{AppState, files, validate};
use crate::browser::console::ConsoleMessage;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(console))
        .routes(routes!(export_console))
}

fn console_entry(m: ConsoleMessage) -> ConsoleEntry {
    ConsoleEntry {
        level: m.level,
        text: m.text,
        source: m.source,
        url: m.url,
        line: m.line,
        timestamp: m.timestamp,
    }
}

/// The console messages of the active tab (`console.*` calls, uncaught exceptions, the
/// browser's own warnings), oldest first, since the tab was first used through the API; the
/// latest 1000 are kept. `clear=true` forgets them after answering.
#[utoipa::path(get, path = "/v1/browser/page/console", tag = "browser-page", params(ConsoleQuery),
    responses((status = 200, body = Envelope<Vec<ConsoleEntry>>)))]
pub async fn console(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<ConsoleQuery>,
) -> Result<Json<Envelope<Vec<ConsoleEntry>>>, ApiError> {
    let messages = state.browser.console(query.clear.unwrap_or(false)).await?;
    Ok(Json(Envelope::ok(
        messages.into_iter().map(console_entry).collect(),
    )))
}

/// Writes the active tab's console messages to a JSON file (an array like `GET
/// /v1/browser/page/console`'s `data`) inside the allowed file roots.
#[utoipa::path(post, path = "/v1/browser/page/console/export", tag = "browser-page",
    request_body = ConsoleExportRequest,
    responses(
        (status = 200, body = Envelope<SavedFile>),
        (status = 403, description = "the path is outside the allowed file roots", body = ErrorBody),
        (status = 422, description = "`save_path` is missing", body = ErrorBody),
    ))]
pub async fn export_console(
    State(state): State<AppState>,
    AioJson(request): AioJson<ConsoleExportRequest>,
) -> Result<Json<Envelope<SavedFile>>, ApiError> {
    validate::not_blank("save_path", &request.save_path)?;
    // Check the path before touching the messages, so a refused path clears nothing.
    let path = request.save_path.clone();
    files::run(&state, move |files| {
        files.confinement().resolve(OsStr::new(&path))?;
        Ok(())
    })
    .await
    .map_err(|e| save_path_error(e, "save_path"))?;
    let messages = state.browser.console(false).await?;
    let count = messages.len();
    let json = serde_json::to_string_pretty(&messages)
        .map_err(|e| ApiError::internal(format!("cannot encode the messages: {e}")))?;
    let written = write_file(&state, request.save_path.clone(), json)
        .await
        .map_err(|e| save_path_error(e, "save_path"))?;
    if request.clear.unwrap_or(false) {
        state.browser.console(true).await?;
    }
    Ok(Json(Envelope::ok(SavedFile {
        path: written,
        count,
        origins: None,
    })))
}
