//! The browser API (`/v1/browser/info`, `/v1/browser/page/*`, `/v1/browser/tabs`): AIO's field
//! names, plus `GET /v1/browser/page/snapshot` (Agentbox's own).
//!
//! Units follow AIO: `timeout` fields are seconds; `delay` (typing) and `polling` (waiting) are
//! milliseconds; coordinates are CSS pixels in the viewport.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::desktop::ImageFormat;
use super::names::name_enum;

name_enum! {
    /// When a navigation counts as done (Playwright's `wait_until`): `load` (the load event),
    /// `domcontentloaded`, `networkidle` (no connections for 500 ms; `networkidle0` and
    /// `networkidle2` are read as `networkidle`) or `commit` (the response started arriving).
    pub enum WaitUntil, "wait_until" {
        Load = "load",
        DomContentLoaded = "domcontentloaded",
        NetworkIdle = "networkidle" | "networkidle0" | "networkidle2",
        Commit = "commit",
    }
}

name_enum! {
    /// A mouse button of a page click.
    pub enum MouseButton, "button" {
        Left = "left",
        Right = "right",
        Middle = "middle",
    }
}

name_enum! {
    /// Which way a page scrolls.
    pub enum ScrollDirection, "direction" {
        Down = "down",
        Up = "up",
        Left = "left",
        Right = "right",
    }
}

name_enum! {
    /// What a page wait waits for: an element (`selector`, with `state`), the `load` event, a
    /// `url`, `network_idle` (also `networkidle`), a `function` becoming truthy, a `request`
    /// sent or a `response` received (`url_pattern`), a `download` completed, or a pause
    /// (`timeout`).
    pub enum WaitKind, "type" {
        Selector = "selector",
        Load = "load",
        Url = "url",
        NetworkIdle = "network_idle" | "networkidle",
        Function = "function",
        Request = "request",
        Response = "response",
        Download = "download",
        Timeout = "timeout",
    }
}

name_enum! {
    /// The state an element waited for is in.
    pub enum ElementState, "state" {
        Attached = "attached",
        Detached = "detached",
        Visible = "visible",
        Hidden = "hidden",
    }
}

/// `GET /v1/browser/info`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
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

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct BrowserViewport {
    pub width: u32,
    pub height: u32,
}

/// `POST /v1/browser/page/navigate`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct NavigateRequest {
    /// An http(s) URL (or `about:blank`). Private and local addresses are refused unless
    /// allowed by configuration.
    pub url: String,
    /// Default `load`.
    pub wait_until: Option<WaitUntil>,
    /// Seconds (default 30, at most 300).
    pub timeout: Option<f64>,
}

/// Where the tab is after a navigation.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct PageStateResult {
    pub url: String,
    pub title: String,
    /// HTTP status of the main document (absent for `about:blank`, cached or same-document
    /// navigations).
    pub status: Option<i64>,
}

/// `POST /v1/browser/page/click`: a `selector` or a point (`x`, `y`).
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ClickRequest {
    /// CSS selector; the element's centre is clicked.
    pub selector: Option<String>,
    /// Which match of `selector` (0-based, default 0); without `selector` (and `x`/`y`), the
    /// index of an element of `GET /v1/browser/page/elements`.
    pub index: Option<f64>,
    pub x: Option<f64>,
    pub y: Option<f64>,
    /// Default `left`.
    pub button: Option<MouseButton>,
    /// 1 (default) to 3.
    pub click_count: Option<f64>,
}

/// `POST /v1/browser/page/hover`: a `selector` or a point.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct HoverRequest {
    pub selector: Option<String>,
    pub index: Option<f64>,
    pub x: Option<f64>,
    pub y: Option<f64>,
}

/// Where a mouse action went.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct PointerResult {
    pub x: f64,
    pub y: f64,
    /// The element aimed at (`button#send`), when a selector was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub element: Option<String>,
}

/// `POST /v1/browser/page/fill`: replace a field's content.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FillRequest {
    pub text: String,
    /// CSS selector of an input, textarea or editable element.
    pub selector: Option<String>,
    /// Which match of `selector` (0-based, default 0); without `selector`, the index of an
    /// element of `GET /v1/browser/page/elements`.
    pub index: Option<f64>,
}

/// `POST /v1/browser/page/type`: type into the focused element.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct TypeRequest {
    pub text: String,
    /// Milliseconds between characters (default 0, at most 1000).
    pub delay: Option<f64>,
}

/// `POST /v1/browser/page/press_key`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct PressKeyRequest {
    /// A key name (`Enter`, `Tab`, `ArrowDown`, `a`) or a combination (`Control+a`).
    pub key: String,
}

/// `POST /v1/browser/page/hot_key`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct HotKeyRequest {
    /// Keys pressed together, modifiers first: `["Control", "a"]`.
    pub keys: Vec<String>,
}

/// `POST /v1/browser/page/scroll`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ScrollRequest {
    /// Default `down`.
    pub direction: Option<ScrollDirection>,
    /// CSS pixels (default 300).
    pub amount: Option<f64>,
}

/// `POST /v1/browser/page/scroll_to`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ScrollToRequest {
    pub x: Option<f64>,
    pub y: Option<f64>,
}

/// The scroll position after scrolling.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ScrollResult {
    /// `window`, or the scrollable element that moved.
    pub target: String,
    pub x: f64,
    pub y: f64,
}

/// `POST /v1/browser/page/evaluate`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct EvaluateRequest {
    /// JavaScript evaluated in the page. A function expression (`() => document.title`) is
    /// called; promises are awaited. The answer's `data` is the JSON value; an exception is
    /// `success: false` with its message.
    pub expression: String,
    /// Seconds (default 30, at most 300).
    pub timeout: Option<f64>,
}

/// `POST /v1/browser/page/wait`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct WaitRequest {
    #[serde(rename = "type")]
    pub kind: WaitKind,
    /// For `selector`.
    pub selector: Option<String>,
    /// For `selector` (default `visible`).
    pub state: Option<ElementState>,
    /// For `url`: the URL, or a glob with `*`. For `request` and `response`: the same as
    /// `url_pattern`.
    pub url: Option<String>,
    /// For `url`: a glob with `*` (used when `url` is absent). For `request` and `response`: a
    /// glob with `*`, or text the URL contains.
    pub url_pattern: Option<String>,
    /// For `function`: JavaScript that becomes truthy.
    pub expression: Option<String>,
    /// For `function`: milliseconds between checks (default 100).
    pub polling: Option<f64>,
    /// For `download`: where to save the file (a file, or a directory to put it in under its
    /// suggested name; inside the allowed file roots). Default: the workspace.
    pub save_path: Option<String>,
    /// Seconds (default 30, at most 300). For `timeout`: how long to wait.
    pub timeout: Option<f64>,
}

/// What a wait ended with.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct WaitResult {
    #[serde(rename = "type")]
    pub kind: WaitKind,
    pub elapsed_ms: u64,
    /// For `function`: the truthy value; for `url`: the URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub value: Option<Value>,
}

/// `GET /v1/browser/page/html` query.
#[derive(Debug, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HtmlQuery {
    /// The whole document (true, default) or the body's inner HTML (false).
    pub outer: Option<bool>,
}

/// `GET /v1/browser/page/screenshot` query.
#[derive(Debug, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScreenshotQuery {
    /// The whole page instead of the viewport (default false).
    pub full_page: Option<bool>,
    /// Default `png`.
    #[param(inline)]
    pub format: Option<ImageFormat>,
    /// JPEG quality, 1-100 (default 80); PNG ignores it.
    #[param(minimum = 1, maximum = 100)]
    pub quality: Option<i64>,
}

/// `GET /v1/browser/page/markdown`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct MarkdownResult {
    pub url: String,
    pub title: String,
    pub markdown: String,
    /// The page was longer than the converter's input limit.
    pub truncated: bool,
}

/// `GET /v1/browser/page/snapshot` (Agentbox; not in AIO): a compact, actionable view of the
/// page. Every `selector` matches exactly its element when the snapshot was taken.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
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

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SnapshotLink {
    pub text: String,
    pub href: String,
    pub selector: String,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SnapshotButton {
    pub text: String,
    pub selector: String,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
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

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SnapshotCounts {
    pub links: usize,
    pub buttons: usize,
    pub inputs: usize,
}

/// One tab of `GET /v1/browser/tabs`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TabItem {
    pub index: usize,
    pub url: String,
    pub title: String,
    /// The tab API calls act on.
    pub active: bool,
    /// The JavaScript dialog open in the tab, if any: page calls on the tab answer 409 until it
    /// is answered (`POST /v1/browser/page/dialog`) or the default policy answers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialog: Option<DialogInfo>,
}

/// A JavaScript dialog open in a tab.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct DialogInfo {
    /// `alert`, `confirm`, `prompt` or `beforeunload`.
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    /// A prompt's default answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_prompt: Option<String>,
    /// The page that opened it.
    pub url: String,
    /// When it opened, in milliseconds since the Unix epoch.
    pub opened_at_ms: u64,
    /// What the default policy will do if nobody answers: `accept` or `dismiss`.
    pub default_action: String,
    /// When the default policy answers it, in milliseconds since the Unix epoch.
    pub default_action_at_ms: u64,
}

/// `POST /v1/browser/page/dialog`: answers the active tab's dialog.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct DialogAnswerRequest {
    /// `true` presses OK (an alert's only button; a confirm's or prompt's OK; leaving the page
    /// for `beforeunload`), `false` presses Cancel.
    pub accept: bool,
    /// The text a prompt answers with (when accepting).
    #[serde(default)]
    pub prompt_text: Option<String>,
}

/// `POST /v1/browser/tabs`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct NewTabRequest {
    /// Opened in the new tab (URL policy applies); blank when absent.
    pub url: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each name sandboxd accepted before these fields were enums (in any case) still parses to
    /// the same value, and each value is sent under its canonical name.
    fn check<T>(accepted: &[(&str, T)], refused: &[&str])
    where
        T: serde::de::DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
    {
        for (text, expected) in accepted {
            for text in [
                text.to_string(),
                text.to_ascii_uppercase(),
                format!(" {text} "),
            ] {
                let parsed: T = serde_json::from_value(serde_json::json!(text))
                    .unwrap_or_else(|e| panic!("{text:?}: {e}"));
                assert_eq!(&parsed, expected, "{text:?}");
            }
        }
        for text in refused {
            assert!(
                serde_json::from_value::<T>(serde_json::json!(text)).is_err(),
                "{text:?} was accepted"
            );
        }
    }

    #[test]
    fn wait_until_names() {
        check(
            &[
                ("load", WaitUntil::Load),
                ("domcontentloaded", WaitUntil::DomContentLoaded),
                ("DOMContentLoaded", WaitUntil::DomContentLoaded),
                ("networkidle", WaitUntil::NetworkIdle),
                ("networkidle0", WaitUntil::NetworkIdle),
                ("networkidle2", WaitUntil::NetworkIdle),
                ("commit", WaitUntil::Commit),
            ],
            &["soon", "later", "", "network_idle"],
        );
        assert_eq!(
            serde_json::to_value(WaitUntil::NetworkIdle).unwrap(),
            "networkidle"
        );
    }

    #[test]
    fn mouse_button_names() {
        check(
            &[
                ("left", MouseButton::Left),
                ("right", MouseButton::Right),
                ("middle", MouseButton::Middle),
            ],
            &["top", "wheel", "back"],
        );
    }

    #[test]
    fn scroll_direction_names() {
        check(
            &[
                ("down", ScrollDirection::Down),
                ("up", ScrollDirection::Up),
                ("left", ScrollDirection::Left),
                ("right", ScrollDirection::Right),
            ],
            &["sideways", ""],
        );
    }

    #[test]
    fn wait_kind_names() {
        check(
            &[
                ("selector", WaitKind::Selector),
                ("load", WaitKind::Load),
                ("url", WaitKind::Url),
                ("network_idle", WaitKind::NetworkIdle),
                ("networkidle", WaitKind::NetworkIdle),
                ("function", WaitKind::Function),
                ("request", WaitKind::Request),
                ("response", WaitKind::Response),
                ("download", WaitKind::Download),
                ("timeout", WaitKind::Timeout),
            ],
            &["downloads", "idle"],
        );
        assert_eq!(
            serde_json::to_value(WaitKind::NetworkIdle).unwrap(),
            "network_idle"
        );
    }

    #[test]
    fn element_state_names() {
        check(
            &[
                ("attached", ElementState::Attached),
                ("detached", ElementState::Detached),
                ("visible", ElementState::Visible),
                ("hidden", ElementState::Hidden),
            ],
            &["shown"],
        );
    }

    #[test]
    fn a_bad_name_in_a_request_names_the_value_and_the_choices() {
        let error = serde_json::from_value::<NavigateRequest>(
            serde_json::json!({"url": "about:blank", "wait_until": "later"}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains(
                "unknown wait_until \"later\": expected one of load, domcontentloaded, networkidle (or networkidle0, networkidle2), commit"
            ),
            "{error}"
        );
        let request: NavigateRequest =
            serde_json::from_value(serde_json::json!({"url": "about:blank", "wait_until": null}))
                .unwrap();
        assert_eq!(request.wait_until, None);
    }
}
