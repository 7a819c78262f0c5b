//! The browser API: `/v1/browser/info`, `/v1/browser/page/*` (Playwright-level page calls, AIO's
//! shapes), `/v1/browser/page/snapshot` (Agentbox's own) and `/v1/browser/tabs`.
//!
//! `/v1/browser/screenshot` and `/v1/browser/actions` (the desktop) live elsewhere.
//! Every call acts on the active tab and is bounded in time; see [`crate::browser`].

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::{AioJson, AioQuery};
use super::types::{self, ScrollDirection, WaitKind};
use super::types::{
    BrowserInfoResult, BrowserViewport, ClickRequest, Envelope, ErrorBody, EvaluateRequest,
    FillRequest, HotKeyRequest, HoverRequest, HtmlQuery, MarkdownResult, NavigateRequest,
    NewTabRequest, PageSnapshot, PageStateResult, PointerResult, PressKeyRequest, ScreenshotQuery,
    ScrollRequest, ScrollResult, ScrollToRequest, SnapshotButton, SnapshotCounts, SnapshotInput,
    SnapshotLink, TabItem, TypeRequest, WaitRequest, WaitResult,
};
use super::validate::{self, SecondsRange};
use crate::browser::{
    self, BrowserError, Button, Condition, ElementState, Evaluation, ImageFormat, PageState,
    ScreenshotOptions, Target, WaitUntil,
};

/// Shortest `timeout` any call accepts, in seconds.
const MIN_TIMEOUT_SECS: f64 = 0.001;
/// Longest `timeout` any call accepts, in seconds.
const MAX_TIMEOUT_SECS: f64 = 300.0;
/// `timeout` when none is given, in seconds.
const DEFAULT_TIMEOUT_SECS: f64 = 30.0;
/// What a `timeout` accepts: at least a millisecond (a smaller one could not be met), at most
/// [`MAX_TIMEOUT_SECS`].
const TIMEOUT_RANGE: SecondsRange = SecondsRange::from_to(MIN_TIMEOUT_SECS, MAX_TIMEOUT_SECS);
/// The highest index of a selector's matches a call may name.
pub(super) const MAX_MATCH_INDEX: i64 = 10_000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(info))
        .routes(routes!(navigate))
        .routes(routes!(back))
        .routes(routes!(forward))
        .routes(routes!(reload))
        .routes(routes!(text))
        .routes(routes!(html))
        .routes(routes!(markdown))
        .routes(routes!(screenshot))
        .routes(routes!(snapshot))
        .routes(routes!(click))
        .routes(routes!(hover))
        .routes(routes!(fill))
        .routes(routes!(type_text))
        .routes(routes!(press_key))
        .routes(routes!(hot_key))
        .routes(routes!(scroll))
        .routes(routes!(scroll_to))
        .routes(routes!(evaluate))
        .routes(routes!(wait))
        .routes(routes!(list_tabs, new_tab))
        .routes(routes!(close_tab))
        .routes(routes!(activate_tab))
}

impl From<BrowserError> for ApiError {
    fn from(error: BrowserError) -> Self {
        let message = error.to_string();
        match error {
            BrowserError::Invalid { field, .. } => ApiError::invalid(field, message),
            BrowserError::Refused(_) => ApiError::forbidden(message),
            BrowserError::NoElement { .. }
            | BrowserError::NoIndexedElement { .. }
            | BrowserError::NoTab { .. } => ApiError::not_found(message),
            BrowserError::NotActionable(_)
            | BrowserError::Dialog(_)
            | BrowserError::NoDialog
            | BrowserError::TabGone(_)
            | BrowserError::PageChanged(_) => ApiError::conflict(message),
            BrowserError::NotRunning(_) | BrowserError::Disconnected(_) => {
                ApiError::unavailable(message)
            }
            BrowserError::Navigation { .. } | BrowserError::Protocol(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, message)
            }
            BrowserError::Timeout { .. } => ApiError::new(StatusCode::GATEWAY_TIMEOUT, message),
            BrowserError::Script(_) => ApiError::internal(message),
        }
    }
}

impl From<types::WaitUntil> for WaitUntil {
    fn from(wire: types::WaitUntil) -> Self {
        match wire {
            types::WaitUntil::Load => WaitUntil::Load,
            types::WaitUntil::DomContentLoaded => WaitUntil::DomContentLoaded,
            types::WaitUntil::NetworkIdle => WaitUntil::NetworkIdle,
            types::WaitUntil::Commit => WaitUntil::Commit,
        }
    }
}

impl From<types::ImageFormat> for ImageFormat {
    fn from(wire: types::ImageFormat) -> Self {
        match wire {
            types::ImageFormat::Png => ImageFormat::Png,
            types::ImageFormat::Jpeg => ImageFormat::Jpeg,
        }
    }
}

impl From<types::MouseButton> for Button {
    fn from(wire: types::MouseButton) -> Self {
        match wire {
            types::MouseButton::Left => Button::Left,
            types::MouseButton::Right => Button::Right,
            types::MouseButton::Middle => Button::Middle,
        }
    }
}

impl From<types::ElementState> for ElementState {
    fn from(wire: types::ElementState) -> Self {
        match wire {
            types::ElementState::Attached => ElementState::Attached,
            types::ElementState::Detached => ElementState::Detached,
            types::ElementState::Visible => ElementState::Visible,
            types::ElementState::Hidden => ElementState::Hidden,
        }
    }
}

/// A call's `timeout` field (seconds; [`DEFAULT_TIMEOUT_SECS`] when absent).
fn call_timeout(value: Option<f64>) -> Result<Duration, ApiError> {
    validate::seconds(
        "timeout",
        value.unwrap_or(DEFAULT_TIMEOUT_SECS),
        TIMEOUT_RANGE,
    )
}

fn state_result(state: PageState) -> PageStateResult {
    PageStateResult {
        url: state.url,
        title: state.title,
        status: state.status,
    }
}

/// A success with no data.
pub(super) fn done(message: impl Into<String>) -> Json<Envelope<()>> {
    Json(Envelope {
        success: true,
        message: message.into(),
        data: None,
        hint: None,
    })
}

/// The `Host` the client reached sandboxd at (host and port), so that reported URLs work as
/// given through the same port.
pub(super) fn request_host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("localhost")
        .to_string()
}

/// The browser's CDP endpoint, noVNC page and viewports.
#[utoipa::path(get, path = "/v1/browser/info", tag = "browser",
    responses(
        (status = 200, body = Envelope<BrowserInfoResult>),
        (status = 503, description = "the browser is not running", body = ErrorBody),
    ))]
pub async fn info(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Envelope<BrowserInfoResult>>, ApiError> {
    let info = state.browser.info().await?;
    let host = request_host(&headers);
    let settings = &state.settings.browser;
    // CDP and noVNC are served on this same port (`/cdp`, `/vnc/`), behind the same key.
    let cdp_url = settings.public_cdp_url.clone().unwrap_or_else(|| {
        if info.ws_path.is_empty() {
            format!("http://{host}/cdp")
        } else {
            format!("ws://{host}/cdp{}", info.ws_path)
        }
    });
    let vnc_url = settings
        .public_vnc_url
        .clone()
        .unwrap_or_else(|| format!("http://{host}/vnc/index.html"));
    Ok(Json(Envelope::ok(BrowserInfoResult {
        user_agent: info.user_agent,
        cdp_url,
        vnc_url,
        viewport: BrowserViewport {
            width: state.settings.screen.width,
            height: state.settings.screen.height,
        },
        page_viewport: info
            .page_viewport
            .map(|(width, height)| BrowserViewport { width, height }),
    })))
}

/// Opens a URL in the active tab and waits until `wait_until`.
#[utoipa::path(post, path = "/v1/browser/page/navigate", tag = "browser-page",
    request_body = NavigateRequest,
    responses(
        (status = 200, body = Envelope<PageStateResult>),
        (status = 403, description = "the URL policy refused the URL", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 502, description = "the page could not be loaded", body = ErrorBody),
        (status = 504, description = "the page did not get far enough in time", body = ErrorBody),
    ))]
pub async fn navigate(
    State(state): State<AppState>,
    AioJson(request): AioJson<NavigateRequest>,
) -> Result<Json<Envelope<PageStateResult>>, ApiError> {
    let until = request.wait_until.map_or(WaitUntil::Load, WaitUntil::from);
    let limit = call_timeout(request.timeout)?;
    validate::not_blank("url", &request.url)?;
    let result = state.browser.navigate(&request.url, until, limit).await?;
    Ok(Json(Envelope::ok(state_result(result))))
}

fn history_answer(result: Option<PageState>, which: &str) -> Json<Envelope<PageStateResult>> {
    match result {
        Some(page) => Json(Envelope::ok(state_result(page))),
        None => Json(Envelope {
            success: false,
            message: format!("there is no {which} page in this tab's history"),
            data: None,
            hint: None,
        }),
    }
}

/// Goes back one page (`success: false` when there is none) and waits for `load`.
#[utoipa::path(post, path = "/v1/browser/page/back", tag = "browser-page",
    responses((status = 200, description = "`data` is null when there is no previous page",
        body = Envelope<Option<PageStateResult>>)))]
pub async fn back(
    State(state): State<AppState>,
) -> Result<Json<Envelope<PageStateResult>>, ApiError> {
    let result = state.browser.back(browser::OP_TIMEOUT).await?;
    Ok(history_answer(result, "previous"))
}

/// Goes forward one page (`success: false` when there is none) and waits for `load`.
#[utoipa::path(post, path = "/v1/browser/page/forward", tag = "browser-page",
    responses((status = 200, description = "`data` is null when there is no next page",
        body = Envelope<Option<PageStateResult>>)))]
pub async fn forward(
    State(state): State<AppState>,
) -> Result<Json<Envelope<PageStateResult>>, ApiError> {
    let result = state.browser.forward(browser::OP_TIMEOUT).await?;
    Ok(history_answer(result, "next"))
}

/// Reloads the active tab and waits for `load`.
#[utoipa::path(post, path = "/v1/browser/page/reload", tag = "browser-page",
    responses((status = 200, body = Envelope<PageStateResult>)))]
pub async fn reload(
    State(state): State<AppState>,
) -> Result<Json<Envelope<PageStateResult>>, ApiError> {
    let result = state.browser.reload(browser::OP_TIMEOUT).await?;
    Ok(Json(Envelope::ok(state_result(result))))
}

fn bounded_answer(bounded: browser::Bounded, what: &str) -> Json<Envelope<String>> {
    let mut envelope = Envelope::ok(bounded.content);
    if let Some(total) = bounded.truncated_from {
        envelope.message = format!("the {what} was cut to its first characters ({total} in all)");
    }
    Json(envelope)
}

/// The rendered, visible text of the active tab.
#[utoipa::path(get, path = "/v1/browser/page/text", tag = "browser-page",
    responses((status = 200, body = Envelope<String>)))]
pub async fn text(State(state): State<AppState>) -> Result<Json<Envelope<String>>, ApiError> {
    Ok(bounded_answer(state.browser.text().await?, "text"))
}

/// The active tab's HTML.
#[utoipa::path(get, path = "/v1/browser/page/html", tag = "browser-page", params(HtmlQuery),
    responses((status = 200, body = Envelope<String>)))]
pub async fn html(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<HtmlQuery>,
) -> Result<Json<Envelope<String>>, ApiError> {
    let html = state.browser.html(query.outer.unwrap_or(true)).await?;
    Ok(bounded_answer(html, "HTML"))
}

/// The active tab's visible content as Markdown.
#[utoipa::path(get, path = "/v1/browser/page/markdown", tag = "browser-page",
    responses((status = 200, body = Envelope<MarkdownResult>)))]
pub async fn markdown(
    State(state): State<AppState>,
) -> Result<Json<Envelope<MarkdownResult>>, ApiError> {
    let md = state.browser.markdown().await?;
    Ok(Json(Envelope::ok(MarkdownResult {
        url: md.url,
        title: md.title,
        markdown: md.markdown,
        truncated: md.truncated,
    })))
}

/// A screenshot of the active tab (the viewport, or the whole page), as raw image bytes.
#[utoipa::path(get, path = "/v1/browser/page/screenshot", tag = "browser-page", params(ScreenshotQuery),
    responses(
        (status = 200, description = "the image: PNG, or JPEG with `format=jpeg`",
            content(("image/png"), ("image/jpeg"))),
        (status = 422, description = "a bad format or quality", body = ErrorBody),
    ))]
pub async fn screenshot(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<ScreenshotQuery>,
) -> Result<Response, ApiError> {
    let format = query.format.map_or(ImageFormat::Png, ImageFormat::from);
    let quality = validate::jpeg_quality(query.quality)?;
    let shot = state
        .browser
        .screenshot(ScreenshotOptions {
            full_page: query.full_page.unwrap_or(false),
            clip: None,
            format,
            quality,
        })
        .await?;
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(shot.format.content_type()),
        )],
        shot.bytes.clone(),
    )
        .into_response();
    if let Some((width, height)) = png_size(&shot.bytes) {
        let headers = response.headers_mut();
        headers.insert("x-image-width", HeaderValue::from(width));
        headers.insert("x-image-height", HeaderValue::from(height));
    }
    Ok(response)
}

/// Width and height from a PNG's IHDR chunk.
pub(super) fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let width = u32::from_be_bytes(bytes[16..20].try_into().ok()?);
    let height = u32::from_be_bytes(bytes[20..24].try_into().ok()?);
    Some((width, height))
}

/// Agentbox's page snapshot (not in AIO): URL, title, the start of the visible text, and the
/// visible links, buttons and inputs with CSS selectors usable in `click` and `fill`.
#[utoipa::path(get, path = "/v1/browser/page/snapshot", tag = "browser-page",
    responses((status = 200, body = Envelope<PageSnapshot>)))]
pub async fn snapshot(
    State(state): State<AppState>,
) -> Result<Json<Envelope<PageSnapshot>>, ApiError> {
    let s = state.browser.snapshot().await?;
    Ok(Json(Envelope::ok(PageSnapshot {
        url: s.url,
        title: s.title,
        text_preview: s.text_preview,
        text_length: s.text_length,
        links: s
            .links
            .into_iter()
            .map(|l| SnapshotLink {
                text: l.text,
                href: l.href,
                selector: l.selector,
            })
            .collect(),
        buttons: s
            .buttons
            .into_iter()
            .map(|b| SnapshotButton {
                text: b.text,
                selector: b.selector,
            })
            .collect(),
        inputs: s
            .inputs
            .into_iter()
            .map(|i| SnapshotInput {
                kind: i.kind,
                name: i.name,
                placeholder: i.placeholder,
                label: i.label,
                value: i.value,
                checked: i.checked,
                selector: i.selector,
            })
            .collect(),
        counts: SnapshotCounts {
            links: s.counts.links,
            buttons: s.counts.buttons,
            inputs: s.counts.inputs,
        },
    })))
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

/// Text typed or filled in: at most [`browser::input::MAX_TYPED_CHARS`] characters.
pub(super) fn typed_text<'a>(field: &str, text: &'a str) -> Result<&'a str, ApiError> {
    validate::at_most_chars(field, text, browser::input::MAX_TYPED_CHARS)
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

/// Evaluates JavaScript in the active tab. `data` is the result as JSON; an exception (or a
/// rejected promise) answers `success: false` with its message.
#[utoipa::path(post, path = "/v1/browser/page/evaluate", tag = "browser-page",
    request_body = EvaluateRequest,
    responses(
        (status = 200, body = Envelope<Object>),
        (status = 504, description = "the script ran too long and was terminated", body = ErrorBody),
    ))]
pub async fn evaluate(
    State(state): State<AppState>,
    AioJson(request): AioJson<EvaluateRequest>,
) -> Result<Json<Envelope<serde_json::Value>>, ApiError> {
    validate::not_blank("expression", &request.expression)?;
    let limit = call_timeout(request.timeout)?;
    match state.browser.evaluate(&request.expression, limit).await? {
        Evaluation::Value(value) => Ok(Json(Envelope::ok(value))),
        Evaluation::Exception(message) => Ok(Json(Envelope {
            success: false,
            message,
            data: None,
            hint: None,
        })),
    }
}

/// Waits for a condition on the active tab: `selector` (with `state`), `load`, `url`,
/// `network_idle`, `function` (an expression becoming truthy), `request` or `response` (one
/// whose URL matches `url_pattern`, from now on; the value describes it), `download` (the next
/// download completes; saved to `save_path`, or the workspace under its suggested name) or
/// `timeout` (a pause).
#[utoipa::path(post, path = "/v1/browser/page/wait", tag = "browser-page",
    request_body = WaitRequest,
    responses(
        (status = 200, body = Envelope<WaitResult>),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 504, description = "the condition did not hold in time", body = ErrorBody),
    ))]
pub async fn wait(
    State(state): State<AppState>,
    AioJson(request): AioJson<WaitRequest>,
) -> Result<Json<Envelope<WaitResult>>, ApiError> {
    let limit = call_timeout(request.timeout)?;
    let kind = request.kind;
    if kind == WaitKind::Download {
        return super::browser_network::wait_download(&state, request.save_path, limit).await;
    }
    let condition = match kind {
        WaitKind::Selector => Condition::Selector {
            selector: validate::required_text("selector", &request.selector)?.to_string(),
            state: request
                .state
                .map_or(ElementState::Visible, ElementState::from),
        },
        WaitKind::Load => Condition::Load,
        WaitKind::Url => {
            let url = request
                .url
                .as_deref()
                .or(request.url_pattern.as_deref())
                .filter(|u| !u.trim().is_empty())
                .ok_or_else(|| ApiError::invalid("url", "`url` (or `url_pattern`) is required"))?;
            Condition::Url(url.to_string())
        }
        WaitKind::NetworkIdle => Condition::NetworkIdle,
        WaitKind::Function => {
            let expression =
                validate::required_text("expression", &request.expression)?.to_string();
            let polling = validate::number(
                "polling",
                request
                    .polling
                    .unwrap_or(browser::wait::DEFAULT_POLLING.as_millis() as f64),
                0.0..=f64::INFINITY,
                "a number of milliseconds",
            )?;
            let polling = Duration::from_secs_f64(polling / 1000.0)
                .clamp(browser::wait::MIN_POLLING, browser::wait::MAX_POLLING);
            Condition::Function {
                expression,
                polling,
            }
        }
        WaitKind::Request | WaitKind::Response => {
            let pattern = request
                .url_pattern
                .as_deref()
                .or(request.url.as_deref())
                .filter(|u| !u.trim().is_empty())
                .ok_or_else(|| {
                    ApiError::invalid("url_pattern", "`url_pattern` (or `url`) is required")
                })?
                .trim()
                .to_string();
            if kind == WaitKind::Request {
                Condition::Request(pattern)
            } else {
                Condition::Response(pattern)
            }
        }
        WaitKind::Timeout => Condition::Time(limit),
        WaitKind::Download => unreachable!("handled above"),
    };
    match state.browser.wait(&condition, limit).await {
        Ok(waited) => Ok(Json(Envelope::ok(WaitResult {
            kind,
            elapsed_ms: waited.elapsed.as_millis() as u64,
            value: waited.value,
        }))),
        Err(BrowserError::Script(message)) => Ok(Json(Envelope {
            success: false,
            message: format!("the expression threw: {message}"),
            data: None,
            hint: None,
        })),
        Err(other) => Err(other.into()),
    }
}

fn tab_item(tab: browser::TabInfo) -> TabItem {
    TabItem {
        index: tab.index,
        url: tab.url,
        title: tab.title,
        active: tab.active,
        dialog: tab.dialog.as_ref().map(super::browser_dialog::dialog_info),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_keeps_the_port_the_client_used() {
        let mut headers = HeaderMap::new();
        assert_eq!(request_host(&headers), "localhost");
        headers.insert(header::HOST, HeaderValue::from_static("10.0.0.5:8080"));
        assert_eq!(request_host(&headers), "10.0.0.5:8080");
        headers.insert(header::HOST, HeaderValue::from_static("[fd00::1]:8080"));
        assert_eq!(request_host(&headers), "[fd00::1]:8080");
        headers.insert(header::HOST, HeaderValue::from_static("box.example"));
        assert_eq!(request_host(&headers), "box.example");
    }

    #[test]
    fn field_validation_names_the_field() {
        assert!(
            call_timeout(Some(30000.0))
                .unwrap_err()
                .message
                .contains("timeout")
        );
        assert!(call_timeout(Some(0.0)).is_err());
        // Positive but too small to be met: refused, not a certain 504.
        assert!(call_timeout(Some(3.9e-140)).is_err());
        assert_eq!(call_timeout(None).unwrap(), Duration::from_secs(30));
        let err = mouse_target(&None, None, Some(1.0), None).unwrap_err();
        assert_eq!(err.loc.unwrap(), vec!["body", "y"]);
        assert!(matches!(
            mouse_target(&Some("#a".into()), None, None, None).unwrap(),
            Target::Selector { index: 0, .. }
        ));
    }

    #[test]
    fn png_dimensions() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend_from_slice(&1280u32.to_be_bytes());
        png.extend_from_slice(&720u32.to_be_bytes());
        assert_eq!(png_size(&png), Some((1280, 720)));
        assert_eq!(png_size(b"GIF89a"), None);
    }
}
