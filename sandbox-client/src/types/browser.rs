//! The browser API (`/v1/browser/info`, `/v1/browser/page/*`, `/v1/browser/tabs`): AIO's field
//! names, plus `GET /v1/browser/page/snapshot` (Agentbox's own).
//!
//! Units follow AIO: `timeout` fields are seconds; `delay` (typing) and `polling` (waiting) are
//! milliseconds; coordinates are CSS pixels in the viewport.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/browser/info`.
#[derive(Debug, Serialize, ToSchema)]
pub struct BrowserInfoResult {
    pub user_agent: String,
    /// The browser's CDP websocket (`ws://host:9222/devtools/browser/<id>`; it changes when
    /// Chromium restarts), or `SANDBOXD_PUBLIC_CDP_URL`.
    pub cdp_url: String,
    /// The noVNC page (`http://host:6080/vnc.html`), or `SANDBOXD_PUBLIC_VNC_URL`.
    pub vnc_url: String,
    /// The browser window (the screen; Chromium runs maximized).
    pub viewport: BrowserViewport,
    /// The active tab's viewport (`innerWidth` × `innerHeight`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_viewport: Option<BrowserViewport>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BrowserViewport {
    pub width: u32,
    pub height: u32,
}

/// `POST /v1/browser/page/navigate`.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct NavigateRequest {
    /// An http(s) URL (or `about:blank`). Private and local addresses are refused unless
    /// allowed by configuration.
    pub url: String,
    /// load (default) | domcontentloaded | networkidle | commit.
    pub wait_until: Option<String>,
    /// Seconds (default 30, at most 300).
    pub timeout: Option<f64>,
}

/// Where the tab is after a navigation.
#[derive(Debug, Serialize, ToSchema)]
pub struct PageStateResult {
    pub url: String,
    pub title: String,
    /// HTTP status of the main document (absent for `about:blank`, cached or same-document
    /// navigations).
    pub status: Option<i64>,
}

/// `POST /v1/browser/page/click`: a `selector` or a point (`x`, `y`).
#[derive(Debug, Default, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClickRequest {
    /// CSS selector; the element's centre is clicked.
    pub selector: Option<String>,
    /// Which match of `selector` (0-based, default 0).
    pub index: Option<f64>,
    pub x: Option<f64>,
    pub y: Option<f64>,
    /// left (default) | right | middle.
    pub button: Option<String>,
    /// 1 (default) to 3.
    pub click_count: Option<f64>,
}

/// `POST /v1/browser/page/hover`: a `selector` or a point.
#[derive(Debug, Default, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HoverRequest {
    pub selector: Option<String>,
    pub index: Option<f64>,
    pub x: Option<f64>,
    pub y: Option<f64>,
}

/// Where a mouse action went.
#[derive(Debug, Serialize, ToSchema)]
pub struct PointerResult {
    pub x: f64,
    pub y: f64,
    /// The element aimed at (`button#send`), when a selector was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub element: Option<String>,
}

/// `POST /v1/browser/page/fill`: replace a field's content.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct FillRequest {
    pub text: String,
    /// CSS selector of an input, textarea or editable element (required).
    pub selector: Option<String>,
    /// Which match of `selector` (0-based, default 0).
    pub index: Option<f64>,
}

/// `POST /v1/browser/page/type`: type into the focused element.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TypeRequest {
    pub text: String,
    /// Milliseconds between characters (default 0, at most 1000).
    pub delay: Option<f64>,
}

/// `POST /v1/browser/page/press_key`.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct PressKeyRequest {
    /// A key name (`Enter`, `Tab`, `ArrowDown`, `a`) or a combination (`Control+a`).
    pub key: String,
}

/// `POST /v1/browser/page/hot_key`.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HotKeyRequest {
    /// Keys pressed together, modifiers first: `["Control", "a"]`.
    pub keys: Vec<String>,
}

/// `POST /v1/browser/page/scroll`.
#[derive(Debug, Default, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ScrollRequest {
    /// down (default) | up | left | right.
    pub direction: Option<String>,
    /// CSS pixels (default 300).
    pub amount: Option<f64>,
}

/// `POST /v1/browser/page/scroll_to`.
#[derive(Debug, Default, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ScrollToRequest {
    pub x: Option<f64>,
    pub y: Option<f64>,
}

/// The scroll position after scrolling.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScrollResult {
    /// `window`, or the scrollable element that moved.
    pub target: String,
    pub x: f64,
    pub y: f64,
}

/// `POST /v1/browser/page/evaluate`.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct EvaluateRequest {
    /// JavaScript evaluated in the page. A function expression (`() => document.title`) is
    /// called; promises are awaited. The answer's `data` is the JSON value; an exception is
    /// `success: false` with its message.
    pub expression: String,
    /// Seconds (default 30, at most 300).
    pub timeout: Option<f64>,
}

/// `POST /v1/browser/page/wait`.
#[derive(Debug, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WaitRequest {
    /// selector | load | url | network_idle | function | timeout.
    #[serde(rename = "type")]
    pub kind: String,
    /// For `selector`.
    pub selector: Option<String>,
    /// For `selector`: attached | detached | visible (default) | hidden.
    pub state: Option<String>,
    /// For `url`: the URL, or a glob with `*`.
    pub url: Option<String>,
    /// For `url`: a glob with `*` (used when `url` is absent).
    pub url_pattern: Option<String>,
    /// For `function`: JavaScript that becomes truthy.
    pub expression: Option<String>,
    /// For `function`: milliseconds between checks (default 100).
    pub polling: Option<f64>,
    /// Seconds (default 30, at most 300). For `timeout`: how long to wait.
    pub timeout: Option<f64>,
}

/// What a wait ended with.
#[derive(Debug, Serialize, ToSchema)]
pub struct WaitResult {
    #[serde(rename = "type")]
    pub kind: String,
    pub elapsed_ms: u64,
    /// For `function`: the truthy value; for `url`: the URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub value: Option<Value>,
}

/// `GET /v1/browser/page/html` query.
#[derive(Debug, Deserialize, IntoParams)]
pub struct HtmlQuery {
    /// The whole document (true, default) or the body's inner HTML (false).
    pub outer: Option<bool>,
}

/// `GET /v1/browser/page/screenshot` query.
#[derive(Debug, Deserialize, IntoParams)]
pub struct ScreenshotQuery {
    /// The whole page instead of the viewport (default false).
    pub full_page: Option<bool>,
    /// png (default) | jpeg.
    pub format: Option<String>,
    /// JPEG quality 0..100.
    pub quality: Option<i64>,
}

/// `GET /v1/browser/page/markdown`.
#[derive(Debug, Serialize, ToSchema)]
pub struct MarkdownResult {
    pub url: String,
    pub title: String,
    pub markdown: String,
    /// The page was longer than the converter's input limit.
    pub truncated: bool,
}

/// `GET /v1/browser/page/snapshot` (Agentbox; not in AIO): a compact, actionable view of the
/// page. Every `selector` matches exactly its element when the snapshot was taken.
#[derive(Debug, Serialize, ToSchema)]
pub struct PageSnapshot {
    pub url: String,
    pub title: String,
    /// The start of the visible text, whitespace collapsed (at most 4000 characters).
    pub text_preview: String,
    /// The length of the whole visible text.
    pub text_length: usize,
    /// Visible links (at most 50).
    pub links: Vec<SnapshotLink>,
    /// Visible buttons (at most 50).
    pub buttons: Vec<SnapshotButton>,
    /// Visible form fields (at most 50).
    pub inputs: Vec<SnapshotInput>,
    /// How many visible links, buttons and inputs the page has in all.
    pub counts: SnapshotCounts,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotLink {
    pub text: String,
    pub href: String,
    pub selector: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotButton {
    pub text: String,
    pub selector: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotInput {
    /// Input type (`text`, `email`, `checkbox`...), or `textarea`, `select`, `contenteditable`.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub placeholder: String,
    pub label: String,
    /// Current value (never for passwords or file inputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// For checkboxes and radio buttons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked: Option<bool>,
    pub selector: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SnapshotCounts {
    pub links: usize,
    pub buttons: usize,
    pub inputs: usize,
}

/// One tab of `GET /v1/browser/tabs`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TabItem {
    pub index: usize,
    pub url: String,
    pub title: String,
    /// The tab API calls act on.
    pub active: bool,
}

/// `POST /v1/browser/tabs`.
#[derive(Debug, Default, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct NewTabRequest {
    /// Opened in the new tab (URL policy applies); blank when absent.
    pub url: Option<String>,
}
