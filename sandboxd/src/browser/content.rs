//! Reading the active tab: visible text, HTML, Markdown, screenshots, and the caller's own
//! expressions (`evaluate`).

use std::time::Duration;

use base64::Engine;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{
    BringToFrontParams, CaptureScreenshotFormat, CaptureScreenshotParams, GetLayoutMetricsParams,
    Viewport,
};
use serde::Deserialize;
use serde_json::json;

use super::error::BrowserError;
use super::script::{self, Evaluation};
use super::{BrowserService, js};

/// Most characters of text `text` answers.
pub const MAX_TEXT_CHARS: usize = 2_000_000;
/// Most characters of HTML `html` answers.
pub const MAX_HTML_CHARS: usize = 8_000_000;
/// Most characters of HTML fed to the Markdown converter.
const MAX_MARKDOWN_SOURCE_CHARS: usize = 4_000_000;
/// Elements nested deeper than this are flattened to text before conversion (the converter
/// recurses once per level).
const MAX_MARKDOWN_DEPTH: usize = 200;
/// Tallest full-page screenshot, in CSS pixels (Chromium's texture limit).
const MAX_FULL_PAGE: f64 = 16_384.0;

/// Text, possibly cut at a limit.
#[derive(Debug, Clone)]
pub struct Bounded {
    pub content: String,
    /// The full length in characters, when the content was cut.
    pub truncated_from: Option<usize>,
}

#[derive(Deserialize)]
struct ScriptText {
    #[serde(alias = "html")]
    text: String,
    length: usize,
}

impl From<ScriptText> for Bounded {
    fn from(t: ScriptText) -> Self {
        let cut = t.text.chars().count() < t.length;
        Self {
            content: t.text,
            truncated_from: cut.then_some(t.length),
        }
    }
}

/// The page as Markdown.
#[derive(Debug, Clone)]
pub struct Markdown {
    pub url: String,
    pub title: String,
    pub markdown: String,
    pub truncated: bool,
}

#[derive(Deserialize)]
struct MarkdownSource {
    html: String,
    truncated: bool,
    url: String,
    title: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageFormat {
    #[default]
    Png,
    Jpeg,
}

impl ImageFormat {
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Jpeg => "image/jpeg",
        }
    }
}

/// What to capture.
#[derive(Debug, Clone, Copy)]
pub struct ScreenshotOptions {
    pub full_page: bool,
    /// Only this rectangle of the page (CSS pixels from the document's top left).
    pub clip: Option<Clip>,
    pub format: ImageFormat,
    /// JPEG quality, 1 to 100; PNG ignores it.
    pub quality: u8,
}

/// A rectangle of the page, in CSS pixels from the document's top left.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clip {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// An encoded image.
#[derive(Debug, Clone)]
pub struct Screenshot {
    pub bytes: Vec<u8>,
    pub format: ImageFormat,
    /// CSS pixels captured.
    pub width: u32,
    pub height: u32,
}

impl BrowserService {
    /// The rendered text of the active tab (`innerText` of the body).
    pub async fn text(&self) -> Result<Bounded, BrowserError> {
        self.bounded("reading the page's text", |_, page| async move {
            let text: ScriptText = script::call(&page, js::TEXT, &[json!(MAX_TEXT_CHARS)]).await?;
            Ok(text.into())
        })
        .await
    }

    /// The active tab's HTML: the whole document (`outer`) or the body's inner HTML.
    pub async fn html(&self, outer: bool) -> Result<Bounded, BrowserError> {
        self.bounded("reading the page's HTML", |_, page| async move {
            let html: ScriptText =
                script::call(&page, js::HTML, &[json!(outer), json!(MAX_HTML_CHARS)]).await?;
            Ok(html.into())
        })
        .await
    }

    /// The active tab's visible content as Markdown.
    pub async fn markdown(&self) -> Result<Markdown, BrowserError> {
        let source: MarkdownSource = self
            .bounded("reading the page for Markdown", |_, page| async move {
                script::call(
                    &page,
                    js::MARKDOWN_SOURCE,
                    &[json!(MAX_MARKDOWN_SOURCE_CHARS), json!(MAX_MARKDOWN_DEPTH)],
                )
                .await
            })
            .await?;
        let markdown = to_markdown(source.html).await?;
        Ok(Markdown {
            url: source.url,
            title: source.title,
            markdown,
            truncated: source.truncated,
        })
    }

    /// A screenshot of the active tab's viewport, or of the whole page.
    pub async fn screenshot(&self, options: ScreenshotOptions) -> Result<Screenshot, BrowserError> {
        self.bounded("taking the screenshot", |_, page| async move {
            capture(&page, options).await
        })
        .await
    }

    /// Evaluates the caller's expression in the active tab (see [`script::evaluate`]).
    pub async fn evaluate(
        &self,
        expression: &str,
        limit: Duration,
    ) -> Result<Evaluation, BrowserError> {
        self.connection
            .with_page(|_, page| async move { script::evaluate(&page, expression, limit).await })
            .await
    }
}

async fn capture(page: &Page, options: ScreenshotOptions) -> Result<Screenshot, BrowserError> {
    // A tab in the background renders no frames, so capturing it would wait forever.
    let hidden: bool =
        script::call(page, "() => document.visibilityState === 'hidden'", &[]).await?;
    if hidden {
        page.execute(BringToFrontParams::default()).await?;
    }
    let metrics = page
        .execute(GetLayoutMetricsParams::default())
        .await?
        .result;
    let mut params = CaptureScreenshotParams::builder().format(match options.format {
        ImageFormat::Png => CaptureScreenshotFormat::Png,
        ImageFormat::Jpeg => CaptureScreenshotFormat::Jpeg,
    });
    if options.format == ImageFormat::Jpeg {
        params = params.quality(i64::from(options.quality));
    }
    let viewport = &metrics.css_visual_viewport;
    let (width, height) = if let Some(clip) = options.clip {
        let width = clip.width.clamp(1.0, MAX_FULL_PAGE).ceil();
        let height = clip.height.clamp(1.0, MAX_FULL_PAGE).ceil();
        params = params
            .clip(Viewport {
                x: clip.x.max(0.0),
                y: clip.y.max(0.0),
                width,
                height,
                scale: 1.0,
            })
            .capture_beyond_viewport(true);
        (width, height)
    } else if options.full_page {
        let size = &metrics.css_content_size;
        let width = size.width.max(viewport.client_width).ceil();
        let height = size
            .height
            .max(viewport.client_height)
            .min(MAX_FULL_PAGE)
            .ceil();
        params = params
            .clip(Viewport {
                x: 0.0,
                y: 0.0,
                width,
                height,
                scale: 1.0,
            })
            .capture_beyond_viewport(true);
        (width, height)
    } else {
        (viewport.client_width, viewport.client_height)
    };
    let data = page.execute(params.build()).await?.result.data;
    let encoded: &str = data.as_ref();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| BrowserError::Protocol(format!("the screenshot is not valid base64: {e}")))?;
    Ok(Screenshot {
        bytes,
        format: options.format,
        width: width.round() as u32,
        height: height.round() as u32,
    })
}

/// Converts the page's HTML (its depth bounded in the page) with the one converter,
/// [`crate::markdown::convert`].
async fn to_markdown(html: String) -> Result<String, BrowserError> {
    crate::markdown::convert(html)
        .await
        .map_err(|e| BrowserError::Protocol(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn markdown_conversion_keeps_structure_and_survives_depth() {
        let md = to_markdown(
            r#"<h1>Title</h1><p>Some <b>bold</b> text with <a href="https://example.com/x">a link</a>.</p><ul><li>one</li><li>two</li></ul>"#.into(),
        )
        .await
        .unwrap();
        assert!(md.contains("# Title"), "{md}");
        assert!(md.contains("**bold**"), "{md}");
        assert!(md.contains("[a link](https://example.com/x)"), "{md}");
        assert!(md.contains("one") && md.contains("two"), "{md}");
        let deep = format!(
            "{}deep{}",
            "<div>".repeat(MAX_MARKDOWN_DEPTH + 50),
            "</div>".repeat(MAX_MARKDOWN_DEPTH + 50)
        );
        assert!(to_markdown(deep).await.unwrap().contains("deep"));
    }

    #[test]
    fn image_formats() {
        assert_eq!(ImageFormat::Jpeg.content_type(), "image/jpeg");
    }
}
