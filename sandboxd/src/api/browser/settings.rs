//! The browser itself: `POST /v1/browser/config` (viewport, user agent...) and
//! `POST /v1/browser/restart` (soft: reconnect; hard: restart the supervised Chromium).

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::HeaderValue;
use supervisor::ProgramState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{
    BrowserConfigRequest, BrowserConfigResult, BrowserRestartRequest, BrowserRestarted, Envelope,
    ErrorBody, Resolution, RestartMode,
};

/// Viewport sides accepted by `config`, in CSS pixels.
const VIEWPORT_SIDE: std::ops::RangeInclusive<i64> = 100..=4096;
/// Longest user agent accepted.
const MAX_USER_AGENT: usize = 1024;
/// How long a hard restart may take until the new browser is connected.
const RESTART_TIMEOUT: Duration = Duration::from_secs(60);

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(set_config))
        .routes(routes!(restart))
}

fn checked_side(field: &str, side: &str, value: i64) -> Result<u32, ApiError> {
    if VIEWPORT_SIDE.contains(&value) {
        // Within 100..=4096.
        Ok(value as u32)
    } else {
        Err(ApiError::invalid_at(
            vec!["body".into(), field.into(), side.into()],
            format!(
                "`{field}.{side}` must be from {} to {} CSS pixels, got {value}",
                VIEWPORT_SIDE.start(),
                VIEWPORT_SIDE.end()
            ),
        ))
    }
}

/// Configures every tab's page emulation: `resolution` (or `viewport`) sets the viewport
/// (CDP device metrics; the X screen and the window keep their size), `user_agent` the user
/// agent. Omitted fields stay as they are; fields sandboxd does not support are refused (422)
/// by name, and nothing changes then.
#[utoipa::path(post, path = "/v1/browser/config", tag = "browser",
    request_body = BrowserConfigRequest,
    responses(
        (status = 200, body = Envelope<BrowserConfigResult>),
        (status = 422, description = "a field is invalid or not supported", body = ErrorBody),
    ))]
pub async fn set_config(
    State(state): State<AppState>,
    AioJson(request): AioJson<BrowserConfigRequest>,
) -> Result<Json<Envelope<BrowserConfigResult>>, ApiError> {
    if let Some(field) = request.other.keys().next() {
        return Err(ApiError::invalid(
            field,
            format!(
                "`{field}` is not supported by sandboxd's browser config; it sets `resolution` (or `viewport`) and `user_agent`"
            ),
        ));
    }
    let (field, size) = match (request.resolution, request.viewport) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "viewport",
                "give `resolution` or `viewport`, not both",
            ));
        }
        (Some(size), None) => ("resolution", Some(size)),
        (None, Some(size)) => ("viewport", Some(size)),
        (None, None) => ("resolution", None),
    };
    let viewport = match size {
        Some(size) => Some((
            checked_side(field, "width", size.width)?,
            checked_side(field, "height", size.height)?,
        )),
        None => None,
    };
    let user_agent = match request.user_agent.as_deref() {
        None => None,
        Some(agent) => {
            let agent = agent.trim();
            if agent.is_empty()
                || agent.len() > MAX_USER_AGENT
                || HeaderValue::from_str(agent).is_err()
            {
                return Err(ApiError::invalid(
                    "user_agent",
                    format!(
                        "`user_agent` must be 1 to {MAX_USER_AGENT} bytes of visible text (no line breaks)"
                    ),
                ));
            }
            Some(agent.to_string())
        }
    };
    let rules = state
        .browser
        .change_rules(move |rules| {
            if let Some(viewport) = viewport {
                rules.emulation.viewport = Some(viewport);
            }
            if let Some(agent) = user_agent {
                rules.emulation.user_agent = Some(agent);
            }
            rules.clone()
        })
        .await?;
    let now = state
        .browser
        .info()
        .await
        .ok()
        .and_then(|i| i.page_viewport);
    Ok(Json(Envelope::ok(BrowserConfigResult {
        resolution: rules.emulation.viewport.map(|(w, h)| Resolution {
            width: i64::from(w),
            height: i64::from(h),
        }),
        user_agent: rules.emulation.user_agent,
        viewport: now.map(|(w, h)| Resolution {
            width: i64::from(w),
            height: i64::from(h),
        }),
    })))
}

/// Restarts the browser: `soft` (default) drops sandboxd's CDP connection and makes a new one;
/// `hard` restarts the Chromium process through the supervisor (its tabs are lost; the network
/// rules and the config stay and apply to the new browser's tabs) and answers once the new one
/// is connected.
#[utoipa::path(post, path = "/v1/browser/restart", tag = "browser",
    request_body = BrowserRestartRequest,
    responses(
        (status = 200, body = Envelope<BrowserRestarted>),
        (status = 422, description = "a field is not supported", body = ErrorBody),
        (status = 503, description = "the browser did not come back", body = ErrorBody),
    ))]
pub async fn restart(
    State(state): State<AppState>,
    AioJson(request): AioJson<BrowserRestartRequest>,
) -> Result<Json<Envelope<BrowserRestarted>>, ApiError> {
    for (field, given) in [
        ("url_blocklist", request.url_blocklist.is_some()),
        ("url_allowlist", request.url_allowlist.is_some()),
    ] {
        if given {
            return Err(ApiError::invalid(
                field,
                format!(
                    "`{field}` is not supported by sandboxd: which URLs the browser may open is set by sandboxd's settings and the orchestrator's egress rules; block URLs with POST /v1/browser/network/route and `abort: true`"
                ),
            ));
        }
    }
    if request.locale.is_some() {
        return Err(ApiError::invalid(
            "locale",
            "`locale` is not supported by sandboxd: the browser's locale is the sandbox image's",
        ));
    }
    let mode = request.mode.unwrap_or(RestartMode::Soft);
    let started = Instant::now();
    let mut pid = None;
    if mode == RestartMode::Hard {
        let program = state.settings.browser.program.clone();
        let old = state
            .supervisor
            .status()
            .iter()
            .find(|p| p.name == program)
            .and_then(|p| p.pid);
        state.supervisor.restart_program(&program).await?;
        let ready = state
            .supervisor
            .wait_for(RESTART_TIMEOUT, |programs| {
                programs.iter().any(|p| {
                    p.name == program
                        && p.state == ProgramState::Ready
                        && p.pid.is_some()
                        && p.pid != old
                })
            })
            .await
            .ok_or_else(|| {
                ApiError::unavailable(format!(
                    "the browser ({program}) was restarted but is not ready after {} s; see GET /v1/processes",
                    RESTART_TIMEOUT.as_secs()
                ))
            })?;
        pid = ready.iter().find(|p| p.name == program).and_then(|p| p.pid);
    }
    let left = RESTART_TIMEOUT.saturating_sub(started.elapsed());
    let version = state.browser.reconnect(left).await?;
    let mut envelope = Envelope::ok(BrowserRestarted {
        mode,
        browser: version.browser,
        pid,
        elapsed_ms: started.elapsed().as_millis() as u64,
    });
    envelope.message = match mode {
        RestartMode::Soft => "reconnected to the browser".into(),
        RestartMode::Hard => "restarted the browser".into(),
    };
    Ok(Json(envelope))
}
