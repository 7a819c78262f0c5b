//! The rest of AIO's browser page API: indexed elements, selects, checkboxes, whole forms, file
//! inputs, finding text, scrolling to an element, the console (`/v1/browser/page/*`), cookies
//! (`/v1/browser/cookies`) and saved state (`/v1/browser/state/*`). AIO's SDK types most answers
//! loosely (`data: Any`); the shapes here are Agentbox's (cookies and state are Playwright's).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// `POST /v1/browser/page/select_option`: one of `value`, `label` or `index`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct SelectOptionRequest {
    /// CSS selector of the `<select>` (its first match).
    pub selector: String,
    /// The option's `value`.
    pub value: Option<String>,
    /// The option's visible label.
    pub label: Option<String>,
    /// The option's position (0-based).
    pub index: Option<f64>,
}

/// The option chosen.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SelectedOption {
    pub value: String,
    pub label: String,
    pub index: usize,
}

/// `POST /v1/browser/page/check`, `/uncheck`, `/scroll_to_element`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct SelectorRequest {
    /// CSS selector (its first match).
    pub selector: String,
}

/// What `check` / `uncheck` did.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct CheckResult {
    /// `checkbox`, `radio`, `switch`...
    pub kind: String,
    /// Whether the element was clicked (false: it already was in that state).
    pub changed: bool,
    pub checked: bool,
}

/// `POST /v1/browser/page/fill_form`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FillFormRequest {
    /// The fields, set in order: each `{"selector": CSS, "value": ...}` (or `"index"`, an
    /// element of `GET /v1/browser/page/elements`, instead of `selector`). `value` is text for
    /// text fields, an option's value or label for a `<select>`, true or false for a checkbox
    /// or radio button (`text` and `checked` are accepted too).
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Value>,
}

/// `POST /v1/browser/page/find_text`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FindTextRequest {
    /// Text to find, case-insensitively.
    pub keyword: String,
}

/// Where `scroll_to_element` left the element.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ScrolledToElement {
    /// `tag#id` of the element.
    pub element: String,
    /// Its centre in the viewport, CSS pixels.
    pub x: f64,
    pub y: f64,
    pub visible: bool,
    pub scroll_x: f64,
    pub scroll_y: f64,
}

/// `POST /v1/browser/page/upload_file`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct UploadFileRequest {
    /// CSS selector of an `<input type=file>` (its first match).
    pub selector: String,
    /// Paths of files in the sandbox (inside the allowed file roots).
    pub files: Vec<String>,
}

/// `GET /v1/browser/page/console` query.
#[derive(Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConsoleQuery {
    /// Forget the messages after answering them.
    pub clear: Option<bool>,
}

/// `POST /v1/browser/page/console/export`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ConsoleExportRequest {
    /// Where to write the JSON array of messages (inside the allowed file roots).
    pub save_path: String,
    /// Forget the messages once written.
    pub clear: Option<bool>,
}

/// A file written by an export or a state save.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SavedFile {
    pub path: String,
    /// Messages (console) or cookies (state) written.
    pub count: usize,
    /// Origins whose localStorage was written (state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origins: Option<Vec<String>>,
}

/// One console message.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ConsoleEntry {
    /// `log`, `info`, `warning`, `error`, `debug`...
    #[serde(rename = "type")]
    pub level: String,
    pub text: String,
    /// `console`, `exception`, or the browser's log source (`network`, `security`...).
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: f64,
}

/// `GET /v1/browser/cookies` query.
#[derive(Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CookiesQuery {
    /// Comma-separated URLs: only the cookies sent to one of them.
    pub urls: Option<String>,
}

/// A cookie (Playwright's shape).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct CookieItem {
    pub name: String,
    pub value: String,
    pub domain: String,
    pub path: String,
    /// Seconds since the Unix epoch; -1 for a session cookie.
    pub expires: f64,
    #[serde(rename = "httpOnly")]
    pub http_only: bool,
    pub secure: bool,
    /// `Strict`, `Lax` or `None`.
    #[serde(rename = "sameSite")]
    pub same_site: String,
}

/// `POST /v1/browser/cookies`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct SetCookiesRequest {
    pub cookies: Vec<CookieInput>,
}

/// A cookie to set: `name`, `value`, and `url` or `domain` (with `path`, default `/`).
#[derive(Debug, Default, Clone, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct CookieInput {
    pub name: Option<String>,
    pub value: Option<String>,
    pub url: Option<String>,
    pub domain: Option<String>,
    pub path: Option<String>,
    /// Seconds since the Unix epoch; absent or -1: a session cookie.
    pub expires: Option<f64>,
    #[serde(rename = "httpOnly", alias = "http_only")]
    pub http_only: Option<bool>,
    pub secure: Option<bool>,
    /// `Strict`, `Lax` or `None`.
    #[serde(rename = "sameSite", alias = "same_site")]
    pub same_site: Option<String>,
}

/// `POST /v1/browser/state/save` and `/load`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct StatePathRequest {
    /// The state file (JSON, Playwright's `storage_state` format), inside the allowed file roots.
    pub path: String,
}

/// What `state/load` set.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct StateLoaded {
    pub path: String,
    pub cookies: usize,
    /// Origins whose localStorage was set (a tab shows them).
    pub origins: Vec<String>,
    /// Origins no tab shows: open a page of one and load again to set its localStorage.
    pub skipped_origins: Vec<String>,
}
