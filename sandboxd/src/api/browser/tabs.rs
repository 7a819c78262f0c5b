//! `/v1/browser/tabs`: list, open, close and activate tabs.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::DEFAULT_TIMEOUT_SECS;
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{Envelope, ErrorBody, NewTabRequest, TabItem};
use crate::browser;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_tabs, new_tab))
        .routes(routes!(close_tab))
        .routes(routes!(activate_tab))
}

fn tab_item(tab: browser::TabInfo) -> TabItem {
    TabItem {
        index: tab.index,
        url: tab.url,
        title: tab.title,
        active: tab.active,
        dialog: tab.dialog.as_ref().map(super::dialog::dialog_info),
    }
}

fn tab_index(text: &str) -> Result<usize, ApiError> {
    text.trim().parse::<usize>().map_err(|_| {
        ApiError::invalid_at(
            vec!["path".into(), "index".into()],
            format!("the tab index must be a whole number from 0, got {text:?}"),
        )
    })
}

/// The browser's tabs, in a stable order, with the active one marked.
#[utoipa::path(get, path = "/v1/browser/tabs", tag = "browser-tabs",
    responses((status = 200, body = Envelope<Vec<TabItem>>)))]
pub async fn list_tabs(
    State(state): State<AppState>,
) -> Result<Json<Envelope<Vec<TabItem>>>, ApiError> {
    let tabs = state.browser.tabs().await?;
    Ok(Json(Envelope::ok(tabs.into_iter().map(tab_item).collect())))
}

/// Opens a tab (blank, or at `url`, waiting for `load`) and makes it the active one.
#[utoipa::path(post, path = "/v1/browser/tabs", tag = "browser-tabs",
    request_body = NewTabRequest,
    responses(
        (status = 200, body = Envelope<TabItem>),
        (status = 403, description = "the URL policy refused the URL", body = ErrorBody),
    ))]
pub async fn new_tab(
    State(state): State<AppState>,
    AioJson(request): AioJson<NewTabRequest>,
) -> Result<Json<Envelope<TabItem>>, ApiError> {
    let url = request
        .url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty());
    let tab = state
        .browser
        .new_tab(url, Duration::from_secs_f64(DEFAULT_TIMEOUT_SECS))
        .await?;
    Ok(Json(Envelope::ok(tab_item(tab))))
}

/// Closes the tab at `index` (the last tab is replaced by a blank one). Answers the remaining
/// tabs.
#[utoipa::path(delete, path = "/v1/browser/tabs/{index}", tag = "browser-tabs",
    params(("index" = usize, Path, description = "tab index from GET /v1/browser/tabs")),
    responses(
        (status = 200, body = Envelope<Vec<TabItem>>),
        (status = 404, description = "no tab at that index", body = ErrorBody),
        (status = 422, description = "`index` is not a whole number from 0", body = ErrorBody),
    ))]
pub async fn close_tab(
    State(state): State<AppState>,
    Path(index): Path<String>,
) -> Result<Json<Envelope<Vec<TabItem>>>, ApiError> {
    let tabs = state.browser.close_tab(tab_index(&index)?).await?;
    Ok(Json(Envelope::ok(tabs.into_iter().map(tab_item).collect())))
}

/// Makes the tab at `index` the active one and brings it to the front.
#[utoipa::path(put, path = "/v1/browser/tabs/{index}/activate", tag = "browser-tabs",
    params(("index" = usize, Path, description = "tab index from GET /v1/browser/tabs")),
    responses(
        (status = 200, body = Envelope<TabItem>),
        (status = 404, description = "no tab at that index", body = ErrorBody),
        (status = 422, description = "`index` is not a whole number from 0", body = ErrorBody),
    ))]
pub async fn activate_tab(
    State(state): State<AppState>,
    Path(index): Path<String>,
) -> Result<Json<Envelope<TabItem>>, ApiError> {
    let tab = state.browser.activate_tab(tab_index(&index)?).await?;
    Ok(Json(Envelope::ok(tab_item(tab))))
}
