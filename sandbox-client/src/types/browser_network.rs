//! The browser's network and configuration (`/v1/browser/network/*`, `/v1/browser/config`,
//! `/v1/browser/restart`): AIO's request fields; AIO's SDK types the answers loosely
//! (`data: Any`), so their shapes are Agentbox's (the HAR is HAR 1.2).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::names::name_enum;

/// `POST /v1/browser/network/headers`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct SetHeadersRequest {
    /// Headers added to every request of every tab from now on; they replace the ones set
    /// before (`{}` removes them).
    pub headers: BTreeMap<String, String>,
}

/// `POST /v1/browser/network/scoped_headers`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ScopedHeadersRequest {
    /// `scheme://host[:port]` (a URL is read as its origin): only requests to it get the headers.
    pub origin: String,
    /// They replace the ones set before for this origin (`{}` removes them).
    pub headers: BTreeMap<String, String>,
}

/// The extra headers in force after a change.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct HeadersSet {
    /// Names of the headers added to every request.
    pub headers: Vec<String>,
    /// Names of the headers added to the requests to each origin.
    pub scoped: BTreeMap<String, Vec<String>>,
}

/// The answer a route gives instead of the network.
#[derive(Debug, Default, Clone, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct RouteResponseModel {
    /// HTTP status (default 200).
    pub status: Option<i64>,
    pub headers: Option<BTreeMap<String, String>>,
    /// The body, as text (UTF-8).
    pub body: Option<String>,
    /// `Content-Type` (default `text/plain; charset=utf-8`, or the one in `headers`).
    pub content_type: Option<String>,
}

/// `POST /v1/browser/network/route`: `abort: true`, or a `response`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct AddRouteRequest {
    /// The URL, or a glob where `*` (and `**`) is any characters (`**/api/*`). A route with the
    /// same pattern is replaced.
    pub url_pattern: String,
    pub response: Option<RouteResponseModel>,
    /// Fail matching requests (`net::ERR_BLOCKED_BY_CLIENT`).
    pub abort: Option<bool>,
}

/// `DELETE /v1/browser/network/route`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct RemoveRouteRequest {
    pub url_pattern: String,
}

/// A route in force.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct RouteInfo {
    pub url_pattern: String,
    /// `abort` or `fulfill`.
    pub action: String,
    /// For `fulfill`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

/// `GET /v1/browser/network/requests` query.
#[derive(Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NetworkRequestsQuery {
    /// Keep requests whose URL contains this (case-insensitively), or whose resource type
    /// (`document`, `xhr`, `fetch`, `script`...) or method is this.
    pub filter: Option<String>,
    /// Only the latest this many (1-1000).
    pub limit: Option<i64>,
}

/// HAR's timing phases, milliseconds; -1 where a phase did not happen.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NetworkTiming {
    pub blocked: f64,
    pub dns: f64,
    pub connect: f64,
    pub ssl: f64,
    pub send: f64,
    pub wait: f64,
    pub receive: f64,
}

/// One request the active tab made.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NetworkRequest {
    /// The browser's request id (a redirect's next hop keeps it).
    pub id: String,
    pub url: String,
    pub method: String,
    /// `document`, `stylesheet`, `image`, `script`, `xhr`, `fetch`, `other`...
    pub resource_type: String,
    /// None while no response came, or when the request failed.
    pub status: Option<i64>,
    pub status_text: Option<String>,
    pub mime_type: Option<String>,
    pub request_headers: BTreeMap<String, String>,
    pub response_headers: BTreeMap<String, String>,
    /// When it was sent, milliseconds since the Unix epoch.
    pub timestamp: f64,
    /// From sending to its end, milliseconds.
    pub duration_ms: Option<f64>,
    pub timing: Option<NetworkTiming>,
    /// Bytes received (headers and body).
    pub size: Option<f64>,
    /// `net::ERR_...` when it failed.
    pub failure: Option<String>,
    pub from_cache: bool,
    pub remote_address: Option<String>,
    pub protocol: Option<String>,
    /// Whether it ended (finished or failed).
    pub finished: bool,
    /// `aborted` or `fulfilled` when a route took it, `headers` when scoped headers were added.
    pub route: Option<String>,
}

/// `POST /v1/browser/network/export_har`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ExportHarRequest {
    /// Where to write the HAR (inside the allowed file roots); without it the HAR is in the
    /// answer (`har`).
    pub save_path: Option<String>,
}

/// What `export_har` wrote.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct HarExport {
    /// The file written (absent when the HAR is in `har`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Requests in it.
    pub entries: usize,
    /// The HAR 1.2 document, when no `save_path` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub har: Option<Value>,
}

/// A size in CSS pixels.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct Resolution {
    pub width: i64,
    pub height: i64,
}

/// `POST /v1/browser/config`: what is given changes; what is omitted stays. Other fields are
/// refused (422) by name.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct BrowserConfigRequest {
    /// The page viewport of every tab (CDP device metrics emulation), 100-4096 per side. The
    /// X screen and the browser window keep their size.
    pub resolution: Option<Resolution>,
    /// The same as `resolution` (one of the two).
    pub viewport: Option<Resolution>,
    /// The user agent of every tab's requests and of `navigator.userAgent`.
    pub user_agent: Option<String>,
    /// Fields sandboxd does not know.
    #[serde(flatten)]
    #[schema(ignore)]
    #[schemars(skip)]
    pub other: BTreeMap<String, Value>,
}

/// The browser configuration in force.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct BrowserConfigResult {
    /// The emulated viewport (none: the window's).
    pub resolution: Option<Resolution>,
    /// The user agent override (none: the browser's own).
    pub user_agent: Option<String>,
    /// The active tab's `innerWidth` × `innerHeight` now.
    pub viewport: Option<Resolution>,
}

name_enum! {
    /// How `POST /v1/browser/restart` restarts: `soft` reconnects sandboxd to the running
    /// browser; `hard` restarts the Chromium process (through the supervisor; its tabs are lost).
    pub enum RestartMode, "mode" {
        Soft = "soft",
        Hard = "hard",
    }
}

/// `POST /v1/browser/restart`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct BrowserRestartRequest {
    /// Default `soft`.
    pub mode: Option<RestartMode>,
    /// Not supported (422): URL rules are sandboxd's settings and the orchestrator's egress
    /// rules; a route with `abort` (`POST /v1/browser/network/route`) blocks URLs.
    pub url_blocklist: Option<Vec<String>>,
    /// Not supported (422), as `url_blocklist`.
    pub url_allowlist: Option<Vec<String>>,
    /// Not supported (422): Chromium's locale is the image's.
    pub locale: Option<String>,
}

/// What a restart did.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct BrowserRestarted {
    pub mode: RestartMode,
    /// `Chrome/...` of the browser now connected.
    pub browser: String,
    /// The browser's process id (hard restarts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    pub elapsed_ms: u64,
}
