//! Input on the page, Playwright-level: `/v1/browser/page/click`, `hover`, `fill`, `type`,
//! `press_key`, `hot_key`, `scroll` and `scroll_to`, on a selector, an element's index or a point.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{MAX_MATCH_INDEX, MAX_TIMEOUT_SECS, done, typed_text};
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{
    ClickRequest, Envelope, ErrorBody, FillRequest, HotKeyRequest, HoverRequest, PointerResult,
    PressKeyRequest, ScrollDirection, ScrollRequest, ScrollResult, ScrollToRequest, TypeRequest,
};
use crate::api::{AppState, validate};
use crate::browser;
use crate::browser::{BrowserError, Button, Target};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(click))
        .routes(routes!(hover))
        .routes(routes!(fill))
        .routes(routes!(type_text))
        .routes(routes!(press_key))
        .routes(routes!(hot_key))
        .routes(routes!(scroll))
        .routes(routes!(scroll_to))
}

/// A mouse target from `selector`/`index` or `x`/`y`.
fn mouse_target(
    selector: &Option<String>,
    index: Option<f64>,
    x: Option<f64>,
    y: Option<f64>,
) -> Result<Target, ApiError> {
    let selector = selector.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match (selector, x, y) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(ApiError::invalid(
            "selector",
            "give either `selector` or `x` and `y`, not both",
        )),
        (Some(selector), None, None) => Ok(Target::Selector {
            selector: selector.to_string(),
            index: validate::whole_number("index", index, 0, 0..=MAX_MATCH_INDEX)? as usize,
        }),
        (None, Some(x), Some(y)) => {
            let coordinate = |field, v| {
                validate::number(field, v, 0.0..=100_000.0, "a coordinate in CSS pixels")
            };
            Ok(Target::Point {
                x: coordinate("x", x)?,
                y: coordinate("y", y)?,
            })
        }
        (None, Some(_), None) => Err(ApiError::invalid("y", "`y` is required with `x`")),
        (None, None, Some(_)) => Err(ApiError::invalid("x", "`x` is required with `y`")),
        (None, None, None) if index.is_some() => Ok(Target::Indexed {
            index: validate::whole_number("index", index, 0, 0..=MAX_MATCH_INDEX)? as usize,
        }),
        (None, None, None) => Err(ApiError::invalid(
            "selector",
            "give `selector` (a CSS selector), `index` (from GET /v1/browser/page/elements) \
             or `x` and `y`",
        )),
    }
}

fn pointer_result(p: browser::Pointed) -> PointerResult {
    PointerResult {
        x: p.x,
        y: p.y,
        element: p.element,
    }
}

/// Clicks an element (its centre, after waiting up to 5 s for it to be visible, enabled and not
/// covered) or a point.
#[utoipa::path(post, path = "/v1/browser/page/click", tag = "browser-page",
    request_body = ClickRequest,
    responses(
        (status = 200, body = Envelope<PointerResult>),
        (status = 404, description = "no element matches the selector", body = ErrorBody),
        (status = 409, description = "the element is hidden, covered or disabled", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
    ))]
pub async fn click(
    State(state): State<AppState>,
    AioJson(request): AioJson<ClickRequest>,
) -> Result<Json<Envelope<PointerResult>>, ApiError> {
    let target = mouse_target(&request.selector, request.index, request.x, request.y)?;
    let button = request.button.map_or(Button::Left, Button::from);
    let count = validate::whole_number("click_count", request.click_count, 1, 1..=3)? as u8;
    let pointed = state.browser.click(&target, button, count).await?;
    Ok(Json(Envelope::ok(pointer_result(pointed))))
}

/// Moves the mouse over an element (by `selector`, or `index` from `GET /v1/browser/page/elements`) or a point.
#[utoipa::path(post, path = "/v1/browser/page/hover", tag = "browser-page",
    request_body = HoverRequest,
    responses(
        (status = 200, body = Envelope<PointerResult>),
        (status = 404, description = "no element matches the selector, or no interactive element has the index", body = ErrorBody),
        (status = 409, description = "the element is hidden or covered", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
    ))]
pub async fn hover(
    State(state): State<AppState>,
    AioJson(request): AioJson<HoverRequest>,
) -> Result<Json<Envelope<PointerResult>>, ApiError> {
    let target = mouse_target(&request.selector, request.index, request.x, request.y)?;
    let pointed = state.browser.hover(&target).await?;
    Ok(Json(Envelope::ok(pointer_result(pointed))))
}

/// Replaces the content of an input, textarea or editable element with `text`.
#[utoipa::path(post, path = "/v1/browser/page/fill", tag = "browser-page",
    request_body = FillRequest,
    responses(
        (status = 200, body = Envelope<Object>),
        (status = 404, description = "no element matches the selector, or no interactive element has the index", body = ErrorBody),
        (status = 409, description = "the element cannot be filled", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
    ))]
pub async fn fill(
    State(state): State<AppState>,
    AioJson(request): AioJson<FillRequest>,
) -> Result<Json<Envelope<()>>, ApiError> {
    let selector = request
        .selector
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if selector.is_none() && request.index.is_none() {
        return Err(ApiError::invalid(
            "selector",
            "give `selector` (a CSS selector) or `index` (from GET /v1/browser/page/elements)",
        ));
    }
    let index = validate::whole_number("index", request.index, 0, 0..=MAX_MATCH_INDEX)? as usize;
    let text = typed_text("text", &request.text)?;
    state.browser.fill(selector, index, text).await?;
    Ok(done(match selector {
        Some(selector) => format!("filled {selector}"),
        None => format!("filled interactive element {index}"),
    }))
}

/// Types `text` into the focused element, key by key.
#[utoipa::path(post, path = "/v1/browser/page/type", tag = "browser-page",
    request_body = TypeRequest,
    responses((status = 200, body = Envelope<Object>)))]
pub async fn type_text(
    State(state): State<AppState>,
    AioJson(request): AioJson<TypeRequest>,
) -> Result<Json<Envelope<()>>, ApiError> {
    let text = typed_text("text", &request.text)?;
    let delay = validate::number(
        "delay",
        request.delay.unwrap_or(0.0),
        0.0..=1000.0,
        "a number of milliseconds",
    )?;
    let chars = text.chars().count();
    if delay * chars as f64 > MAX_TIMEOUT_SECS * 1000.0 {
        return Err(ApiError::invalid(
            "delay",
            format!(
                "typing {chars} characters {delay} ms apart would take longer than {MAX_TIMEOUT_SECS} s"
            ),
        ));
    }
    state
        .browser
        .type_text(text, Duration::from_secs_f64(delay / 1000.0))
        .await?;
    Ok(done(format!("typed {chars} characters")))
}

/// Presses a key or a combination (`Enter`, `Control+a`).
#[utoipa::path(post, path = "/v1/browser/page/press_key", tag = "browser-page",
    request_body = PressKeyRequest,
    responses(
        (status = 200, body = Envelope<Object>),
        (status = 422, description = "unknown key", body = ErrorBody),
    ))]
pub async fn press_key(
    State(state): State<AppState>,
    AioJson(request): AioJson<PressKeyRequest>,
) -> Result<Json<Envelope<()>>, ApiError> {
    state.browser.press_key(&request.key).await?;
    Ok(done(format!("pressed {}", request.key)))
}

/// Presses keys together (`["Control", "a"]`).
#[utoipa::path(post, path = "/v1/browser/page/hot_key", tag = "browser-page",
    request_body = HotKeyRequest,
    responses(
        (status = 200, body = Envelope<Object>),
        (status = 422, description = "unknown key", body = ErrorBody),
    ))]
pub async fn hot_key(
    State(state): State<AppState>,
    AioJson(request): AioJson<HotKeyRequest>,
) -> Result<Json<Envelope<()>>, ApiError> {
    if request.keys.is_empty() || request.keys.iter().any(|k| k.trim().is_empty()) {
        return Err(ApiError::invalid(
            "keys",
            "`keys` must list at least one key name",
        ));
    }
    let combo = request.keys.join("+");
    state.browser.press_key(&combo).await.map_err(|e| match e {
        BrowserError::Invalid { message, .. } => ApiError::invalid("keys", message),
        other => other.into(),
    })?;
    Ok(done(format!("pressed {combo}")))
}

/// Scrolls the page (or the scrollable element in the middle of the viewport).
#[utoipa::path(post, path = "/v1/browser/page/scroll", tag = "browser-page",
    request_body = ScrollRequest,
    responses((status = 200, body = Envelope<ScrollResult>)))]
pub async fn scroll(
    State(state): State<AppState>,
    AioJson(request): AioJson<ScrollRequest>,
) -> Result<Json<Envelope<ScrollResult>>, ApiError> {
    let amount = validate::number(
        "amount",
        request.amount.unwrap_or(300.0),
        0.0..=1_000_000.0,
        "a number of CSS pixels",
    )?;
    let (dx, dy) = match request.direction.unwrap_or(ScrollDirection::Down) {
        ScrollDirection::Down => (0.0, amount),
        ScrollDirection::Up => (0.0, -amount),
        ScrollDirection::Right => (amount, 0.0),
        ScrollDirection::Left => (-amount, 0.0),
    };
    let position = state.browser.scroll_by(dx, dy).await?;
    Ok(Json(Envelope::ok(ScrollResult {
        target: position.target,
        x: position.x,
        y: position.y,
    })))
}

/// Scrolls the page to a position.
#[utoipa::path(post, path = "/v1/browser/page/scroll_to", tag = "browser-page",
    request_body = ScrollToRequest,
    responses((status = 200, body = Envelope<ScrollResult>)))]
pub async fn scroll_to(
    State(state): State<AppState>,
    AioJson(request): AioJson<ScrollToRequest>,
) -> Result<Json<Envelope<ScrollResult>>, ApiError> {
    let checked = |field, value: Option<f64>| {
        value
            .map(|v| validate::number(field, v, 0.0..=f64::INFINITY, "a position in CSS pixels"))
            .transpose()
    };
    let (x, y) = (checked("x", request.x)?, checked("y", request.y)?);
    let position = state.browser.scroll_to(x, y).await?;
    Ok(Json(Envelope::ok(ScrollResult {
        target: position.target,
        x: position.x,
        y: position.y,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_needs_both_coordinates() {
        let err = mouse_target(&None, None, Some(1.0), None).unwrap_err();
        assert_eq!(err.loc.unwrap(), vec!["body", "y"]);
        assert!(matches!(
            mouse_target(&Some("#a".into()), None, None, None).unwrap(),
            Target::Selector { index: 0, .. }
        ));
    }
}
