//! `POST /v1/util/convert_to_markdown`: an `http(s)` URL, a `data:` URI or a file as Markdown.
//! URLs go through the browser (its URL policy, in a tab of its own: [`crate::browser`]),
//! files through the file confinement, HTML through [`crate::markdown`].

use std::io::Read;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use base64::Engine;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::AioJson;
use super::types::{ConvertToMarkdownRequest, Envelope, ErrorBody};
use super::validate;
use crate::markdown::{self, MAX_SOURCE_BYTES, MarkdownError};

/// How long a URL may take to load.
const LOAD_LIMIT: Duration = Duration::from_secs(30);

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(convert_to_markdown))
}

/// Converts `uri` to Markdown; `data` is the Markdown text.
#[utoipa::path(post, path = "/v1/util/convert_to_markdown", tag = "util",
    request_body = ConvertToMarkdownRequest,
    responses(
        (status = 200, body = Envelope<String>),
        (status = 403, description = "the URL policy or the file confinement refused `uri`", body = ErrorBody),
        (status = 404, description = "no such file", body = ErrorBody),
        (status = 413, description = "the document is larger than 4 MiB", body = ErrorBody),
        (status = 422, description = "`uri` is missing, of an unsupported kind, or the document cannot be converted (the message says why)", body = ErrorBody),
        (status = 502, description = "the page could not be loaded", body = ErrorBody),
    ))]
pub async fn convert_to_markdown(
    State(state): State<AppState>,
    AioJson(request): AioJson<ConvertToMarkdownRequest>,
) -> Result<Json<Envelope<String>>, ApiError> {
    let uri = request.uri.trim();
    validate::not_blank("uri", uri)?;
    let scheme = uri
        .split_once(':')
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+'));
    let markdown = match scheme.as_deref() {
        Some("http" | "https") => state.browser.markdown_of(uri, LOAD_LIMIT).await?.markdown,
        Some("data") => {
            let (media_type, bytes) = data_uri(uri)?;
            convert(&media_type, bytes).await?
        }
        Some("file") => {
            let path = url::Url::parse(uri)
                .ok()
                .and_then(|url| url.to_file_path().ok())
                .ok_or_else(|| ApiError::invalid("uri", format!("{uri} is not a file URL")))?;
            from_file(
                &state,
                path.into_os_string().into_string().unwrap_or_default(),
            )
            .await?
        }
        Some(other) if other.len() > 1 => {
            return Err(ApiError::invalid(
                "uri",
                format!(
                    "the {other}: scheme is not converted; give an http(s) URL, a data: URI, a file: URL or a path"
                ),
            ));
        }
        // A path (a one-letter "scheme" is not one).
        _ => from_file(&state, uri.to_string()).await?,
    };
    Ok(Json(Envelope::ok(markdown)))
}

async fn from_file(state: &AppState, path: String) -> Result<String, ApiError> {
    let files = state.files.clone();
    let (bytes, name) = tokio::task::spawn_blocking(move || {
        let download = files
            .open_download(path.as_ref())
            .map_err(super::files::file_error)?;
        if download.size > MAX_SOURCE_BYTES as u64 {
            return Err(too_large(download.size));
        }
        let mut bytes = Vec::new();
        download
            .file
            .take(MAX_SOURCE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ApiError::internal(format!("reading {}: {e}", download.path.display())))?;
        if bytes.len() > MAX_SOURCE_BYTES {
            return Err(too_large(bytes.len() as u64));
        }
        Ok((bytes, download.path))
    })
    .await
    .map_err(|e| ApiError::internal(format!("reading the file: {e}")))??;
    let extension = name
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let media_type = match extension.as_str() {
        "html" | "htm" | "xhtml" => "text/html",
        _ => "text/plain",
    };
    convert(media_type, bytes).await
}

/// HTML is converted; other text is returned as it is.
async fn convert(media_type: &str, bytes: Vec<u8>) -> Result<String, ApiError> {
    let text = String::from_utf8(bytes).map_err(|_| {
        ApiError::invalid(
            "uri",
            "the document is not UTF-8 text; HTML, Markdown and plain text are converted",
        )
    })?;
    if !media_type.eq_ignore_ascii_case("text/html")
        && !media_type.eq_ignore_ascii_case("application/xhtml+xml")
    {
        return Ok(text);
    }
    markdown::html_to_markdown(text)
        .await
        .map_err(|error| match error {
            MarkdownError::TooLarge { size } => too_large(size as u64),
            MarkdownError::TooDeep { .. } => ApiError::invalid("uri", error.to_string()),
            MarkdownError::Failed(_) => ApiError::internal(error.to_string()),
        })
}

fn too_large(size: u64) -> ApiError {
    ApiError::too_large(format!(
        "the document is {size} bytes; at most {MAX_SOURCE_BYTES} bytes are converted"
    ))
}

/// A `data:` URI's media type (default `text/plain`) and decoded bytes.
fn data_uri(uri: &str) -> Result<(String, Vec<u8>), ApiError> {
    let bad = |why: &str| ApiError::invalid("uri", format!("not a usable data: URI: {why}"));
    let rest = &uri["data:".len()..];
    let (header, payload) = rest.split_once(',').ok_or_else(|| bad("no comma"))?;
    if payload.len() > MAX_SOURCE_BYTES * 3 {
        return Err(too_large(payload.len() as u64));
    }
    let mut parts = header.split(';');
    let media_type = parts
        .next()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or("text/plain")
        .to_string();
    let base64 = parts.any(|p| p.trim().eq_ignore_ascii_case("base64"));
    let bytes = if base64 {
        base64::engine::general_purpose::STANDARD
            .decode(percent_decode(payload).trim_ascii())
            .map_err(|e| bad(&format!("invalid base64 ({e})")))?
    } else {
        percent_decode(payload)
    };
    if bytes.len() > MAX_SOURCE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok((media_type, bytes))
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_uris_decode_percent_and_base64() {
        let (media, bytes) = data_uri("data:text/html,%3Ch1%3EHi%3C/h1%3E").unwrap();
        assert_eq!(
            (media.as_str(), bytes.as_slice()),
            ("text/html", &b"<h1>Hi</h1>"[..])
        );
        let (media, bytes) = data_uri("data:text/html;base64,PGI+eDwvYj4=").unwrap();
        assert_eq!(
            (media.as_str(), bytes.as_slice()),
            ("text/html", &b"<b>x</b>"[..])
        );
        let (media, bytes) = data_uri("data:,plain%20text").unwrap();
        assert_eq!(
            (media.as_str(), bytes.as_slice()),
            ("text/plain", &b"plain text"[..])
        );
        assert!(data_uri("data:text/html").is_err());
        assert!(data_uri("data:;base64,@@@").is_err());
        assert_eq!(percent_decode("100%"), b"100%");
    }
}
