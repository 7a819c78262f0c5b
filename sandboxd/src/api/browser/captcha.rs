//! `/v1/browser/captcha/*`: AIO's captcha detection on the active tab, served by
//! [`crate::browser::captcha`]. Detection only: `wait` waits for a person to solve the captcha
//! through the live view (take-over); sandboxd never solves one.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{
    CaptchaDetection, CaptchaWaitRequest, CaptchaWaitResult, CaptchaWidget, Envelope, ErrorBody,
};
use crate::api::validate::{self, SecondsRange};
use crate::browser::captcha::Widget;

/// The longest wait.
const MAX_WAIT: f64 = 600.0;
const DEFAULT_WAIT: Duration = Duration::from_secs(120);
const DEFAULT_POLL: Duration = Duration::from_secs(1);

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(detect))
        .routes(routes!(wait))
}

/// The captcha widgets (reCAPTCHA, hCaptcha, Cloudflare Turnstile) visible on the active tab,
/// each with whether it is solved.
#[utoipa::path(get, path = "/v1/browser/captcha/detect", tag = "browser",
    responses(
        (status = 200, body = Envelope<CaptchaDetection>),
        (status = 503, description = "the browser is not running", body = ErrorBody),
    ))]
pub async fn detect(
    State(state): State<AppState>,
) -> Result<Json<Envelope<CaptchaDetection>>, ApiError> {
    let scan = state.browser.detect_captcha().await?;
    let unsolved = scan.unsolved();
    let mut envelope = Envelope::ok(CaptchaDetection {
        detected: !unsolved.is_empty(),
        kind: unsolved.first().map(|w| w.kind.clone()),
        widgets: scan.widgets.into_iter().map(widget).collect(),
        url: scan.url,
    });
    envelope.message = if unsolved.is_empty() {
        "No captcha on the page".into()
    } else {
        "Captcha detected: hand the desktop to a person to solve it, then call wait".into()
    };
    Ok(Json(envelope))
}

/// Waits until no unsolved captcha widget is left on the active tab (a person solves it
/// through the live view), checking every `poll_interval`, for at most `timeout`.
/// `resolved: false` when the time ran out.
#[utoipa::path(post, path = "/v1/browser/captcha/wait", tag = "browser",
    request_body = CaptchaWaitRequest,
    responses(
        (status = 200, body = Envelope<CaptchaWaitResult>),
        (status = 422, description = "a field is invalid (the message names it)", body = ErrorBody),
        (status = 503, description = "the browser is not running", body = ErrorBody),
    ))]
pub async fn wait(
    State(state): State<AppState>,
    AioJson(request): AioJson<CaptchaWaitRequest>,
) -> Result<Json<Envelope<CaptchaWaitResult>>, ApiError> {
    let timeout = validate::optional_seconds(
        "timeout",
        request.timeout,
        SecondsRange::above(0.0, MAX_WAIT),
    )?
    .unwrap_or(DEFAULT_WAIT);
    let poll = validate::optional_seconds(
        "poll_interval",
        request.poll_interval,
        SecondsRange::from_to(0.1, 10.0),
    )?
    .unwrap_or(DEFAULT_POLL);
    let outcome = state.browser.wait_captcha(timeout, poll).await?;
    let mut envelope = Envelope::ok(CaptchaWaitResult {
        resolved: outcome.resolved,
        waited: (outcome.waited.as_secs_f64() * 1000.0).round() / 1000.0,
        remaining: outcome.remaining.into_iter().map(widget).collect(),
    });
    envelope.message = if outcome.resolved {
        "No captcha left on the page".into()
    } else {
        format!(
            "a captcha is still on the page after {} s",
            timeout.as_secs_f64()
        )
    };
    Ok(Json(envelope))
}

fn widget(widget: Widget) -> CaptchaWidget {
    CaptchaWidget {
        kind: widget.kind,
        evidence: widget.evidence,
        solved: widget.solved,
    }
}
