//! The page: `/v1/browser/info`, navigation (`navigate`, `back`, `forward`, `reload`), what it
//! holds (`text`, `html`, `markdown`, `screenshot`, Agentbox's own `snapshot`), `evaluate` and
//! `wait` (for a selector, a URL, a download...). Every call acts on the active tab.

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{call_timeout, save_path_error, state_result};
use crate::api::error::ApiError;
use crate::api::extract::{AioJson, AioQuery};
use crate::api::types::{
    BrowserInfoResult, BrowserViewport, Envelope, ErrorBody, EvaluateRequest, HtmlQuery,
    MarkdownResult, NavigateRequest, PageSnapshot, PageStateResult, ScreenshotQuery,
    SnapshotButton, SnapshotCounts, SnapshotInput, SnapshotLink, WaitKind, WaitRequest, WaitResult,
};
use crate::api::{AppState, files, validate};
use crate::browser;
use crate::browser::{
    BrowserError, Condition, ElementState, Evaluation, ImageFormat, PageState, ScreenshotOptions,
    WaitUntil,
};

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
        .routes(routes!(evaluate))
        .routes(routes!(wait))
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
    let host = crate::api::extract::request_host(&headers);
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
pub(crate) fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
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
        return wait_download(&state, request.save_path, limit).await;
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

/// Bytes moved per read when saving a download.
const SAVE_CHUNK: usize = 256 * 1024;

/// `POST /v1/browser/page/wait` with `type: download`: waits for the next download to complete
/// and saves it to `save_path` (a file, or a directory to put it in under its suggested name),
/// or to the workspace under its suggested name.
pub(super) async fn wait_download(
    state: &AppState,
    save_path: Option<String>,
    limit: Duration,
) -> Result<Json<Envelope<WaitResult>>, ApiError> {
    let started = Instant::now();
    if let Some(path) = &save_path {
        super::validate::not_blank("save_path", path)?;
        let path = path.clone();
        files::run(state, move |files| {
            files.confinement().resolve(OsStr::new(&path))?;
            Ok(())
        })
        .await
        .map_err(|e| save_path_error(e, "save_path"))?;
    }
    let downloaded = state.browser.wait_download(limit).await?;
    let spooled = downloaded.path.clone();
    let name = downloaded.suggested_filename.clone();
    let saved = files::run(state, move |files| {
        use std::io::Read;
        let mut upload = files.begin_upload(save_path.as_deref().map(OsStr::new), Some(&name))?;
        let io = |source| crate::files::FileError::Io {
            op: "reading the download",
            path: spooled.clone(),
            source,
        };
        let mut file = std::fs::File::open(&spooled).map_err(io)?;
        let mut buffer = vec![0u8; SAVE_CHUNK];
        loop {
            let read = file.read(&mut buffer).map_err(io)?;
            if read == 0 {
                break;
            }
            upload.write_chunk(&buffer[..read])?;
        }
        let outcome = upload.finish()?;
        if let Err(error) = std::fs::remove_file(&spooled) {
            tracing::debug!(%error, "cannot remove a spooled download");
        }
        Ok(outcome)
    })
    .await;
    let saved = match saved {
        Ok(saved) => saved,
        Err(error) => {
            let _ = std::fs::remove_file(&downloaded.path);
            return Err(save_path_error(error, "save_path"));
        }
    };
    Ok(Json(Envelope::ok(WaitResult {
        kind: WaitKind::Download,
        elapsed_ms: started.elapsed().as_millis() as u64,
        value: Some(serde_json::json!({
            "url": downloaded.url,
            "suggested_filename": downloaded.suggested_filename,
            "path": saved.path.to_string_lossy(),
            "size": saved.size,
        })),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_dimensions() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend_from_slice(&1280u32.to_be_bytes());
        png.extend_from_slice(&720u32.to_be_bytes());
        assert_eq!(png_size(&png), Some((1280, 720)));
        assert_eq!(png_size(b"GIF89a"), None);
    }
}
