//! The network of the browser's tabs: the requests each tab made (a ring buffer per tab, fed by
//! CDP `Network` events, exported as HAR 1.2), and the rules that change requests: extra headers
//! for every request (`Network.setExtraHTTPHeaders`), headers for one origin only and routes
//! that abort or answer matching requests (both through the `Fetch` domain: matching requests
//! pause, and this module continues, fails or fulfils them), and the page emulation of
//! `POST /v1/browser/config` (viewport size, user agent).
//!
//! The rules ([`Rules`]) belong to the browser service, not to a CDP connection: they outlive
//! reconnections and Chromium restarts. A tab is watched from the first time an API call uses it
//! (as for the console): the current rules are applied to it then, and again to every watched
//! tab whenever they change. A tab the API never used (a popup nobody touched) has none of them,
//! and its requests are not recorded.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::emulation::{
    ClearDeviceMetricsOverrideParams, SetDeviceMetricsOverrideParams,
};
use chromiumoxide::cdp::browser_protocol::fetch::{
    self, ContinueRequestParams, EventRequestPaused, FailRequestParams, FulfillRequestParams,
    HeaderEntry, RequestPattern,
};
use chromiumoxide::cdp::browser_protocol::network::{
    ErrorReason, EventLoadingFailed, EventLoadingFinished, EventRequestWillBeSent,
    EventResponseReceived, Headers, Response, SetExtraHttpHeadersParams,
    SetUserAgentOverrideParams,
};
use chromiumoxide::cdp::browser_protocol::target::TargetId;
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};

use super::BrowserService;
use super::error::BrowserError;
use super::wait::url_matches;

/// Requests kept per tab (the oldest go first).
pub const MAX_REQUESTS: usize = 1000;
/// Characters kept of one header value.
const MAX_HEADER_VALUE_CHARS: usize = 2048;
/// Headers kept per request or response.
const MAX_HEADERS_KEPT: usize = 100;
/// Bytes of names and values kept per request's or response's headers (the rest are dropped):
/// with [`MAX_URL_CHARS`], a tab's records stay within about 20 MiB.
const MAX_HEADER_BYTES: usize = 8192;
/// Characters kept of a recorded URL.
const MAX_URL_CHARS: usize = 4096;

/// A request as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// CDP's request id (a redirect keeps its request's id).
    pub id: String,
    pub url: String,
    pub method: String,
    /// `document`, `stylesheet`, `image`, `script`, `xhr`, `fetch`, `other`...
    pub resource_type: String,
    /// The response's status; none while waiting for it, or when the request failed.
    pub status: Option<i64>,
    pub status_text: Option<String>,
    pub mime_type: Option<String>,
    pub request_headers: BTreeMap<String, String>,
    pub response_headers: BTreeMap<String, String>,
    /// When it was sent, milliseconds since the Unix epoch.
    pub started: f64,
    /// From sending to the end of the response (or the failure), milliseconds.
    pub duration_ms: Option<f64>,
    /// Phases of the request, milliseconds (HAR's meaning), when the browser measured them.
    pub timing: Option<Timing>,
    /// Bytes received over the network (headers and body).
    pub encoded_size: Option<f64>,
    /// Why it failed (`net::ERR_...`), when it did.
    pub failure: Option<String>,
    pub from_cache: bool,
    pub remote_address: Option<String>,
    /// `http/1.1`, `h2`...
    pub protocol: Option<String>,
    /// Whether it ended (finished or failed).
    pub finished: bool,
    /// `aborted` or `fulfilled` when a route took it, `headers` when scoped headers were added.
    pub route: Option<String>,
    /// CDP's monotonic clock when sent, seconds (for the duration).
    #[serde(skip)]
    pub(crate) sent_at: f64,
}

/// HAR's timing phases, milliseconds; -1 where a phase did not happen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    pub blocked: f64,
    pub dns: f64,
    pub connect: f64,
    pub ssl: f64,
    pub send: f64,
    pub wait: f64,
    pub receive: f64,
}

/// What a route does with the requests it matches.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteAction {
    /// Fails them (`net::ERR_BLOCKED_BY_CLIENT`).
    Abort,
    /// Answers them without the network.
    Fulfill {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

/// A route: requests whose URL matches `pattern` (the URL itself, or a glob where `*` is any
/// characters) get `action`.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub pattern: String,
    pub action: RouteAction,
}

/// The page emulation of `POST /v1/browser/config`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Emulation {
    /// The viewport size (CSS pixels), instead of the window's.
    pub viewport: Option<(u32, u32)>,
    pub user_agent: Option<String>,
}

/// Every rule, as applied to a tab.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleSet {
    /// Added to every request.
    pub extra_headers: BTreeMap<String, String>,
    /// Added to the requests to one origin (`scheme://host[:port]`), by origin.
    pub scoped_headers: BTreeMap<String, BTreeMap<String, String>>,
    /// In the order added; the first match wins.
    pub routes: Vec<Route>,
    pub emulation: Emulation,
}

/// The rules, shared by every connection of the service.
#[derive(Debug, Default)]
pub struct Rules {
    set: Mutex<RuleSet>,
}

impl Rules {
    fn lock(&self) -> std::sync::MutexGuard<'_, RuleSet> {
        // Every update is one assignment: a poisoned lock is still consistent.
        self.set.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn snapshot(&self) -> RuleSet {
        self.lock().clone()
    }

    pub fn update<T>(&self, change: impl FnOnce(&mut RuleSet) -> T) -> T {
        change(&mut self.lock())
    }
}

/// A tab's records, and the rules' labels of paused requests whose record has not come yet
/// (`Fetch.requestPaused` may come before `Network.requestWillBeSent`).
#[derive(Default)]
struct Log {
    records: VecDeque<RequestRecord>,
    pending: HashMap<String, &'static str>,
}

type Ring = Arc<Mutex<Log>>;

struct Watched {
    page: Page,
    ring: Ring,
    task: tokio::task::JoinHandle<()>,
}

/// The watched tabs of one CDP connection.
pub struct Networks {
    rules: Arc<Rules>,
    tabs: Mutex<HashMap<TargetId, Watched>>,
}

impl Drop for Networks {
    fn drop(&mut self) {
        for watched in self.lock().values() {
            watched.task.abort();
        }
    }
}

fn lock_ring(ring: &Ring) -> std::sync::MutexGuard<'_, Log> {
    ring.lock().unwrap_or_else(|e| e.into_inner())
}

impl Networks {
    pub fn new(rules: Arc<Rules>) -> Self {
        Self {
            rules,
            tabs: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TargetId, Watched>> {
        self.tabs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts recording `page`'s requests and applies the rules to it, unless it is watched
    /// already.
    pub async fn watch(&self, page: &Page) {
        let target = page.target_id().clone();
        if self
            .lock()
            .get(&target)
            .is_some_and(|w| !w.task.is_finished())
        {
            return;
        }
        let (sent, received, finished, failed, paused) = match (
            page.event_listener::<EventRequestWillBeSent>().await,
            page.event_listener::<EventResponseReceived>().await,
            page.event_listener::<EventLoadingFinished>().await,
            page.event_listener::<EventLoadingFailed>().await,
            page.event_listener::<EventRequestPaused>().await,
        ) {
            (Ok(a), Ok(b), Ok(c), Ok(d), Ok(e)) => (a, b, c, d, e),
            _ => {
                tracing::warn!(target = target.as_ref(), "cannot watch the tab's network");
                return;
            }
        };
        let ring: Ring = Arc::default();
        let sink = ring.clone();
        let rules = self.rules.clone();
        let tab = page.clone();
        let task = tokio::spawn(async move {
            let events = futures::stream::select_all([
                sent.map(|e| Event::Sent(Box::new((*e).clone()))).boxed(),
                received
                    .map(|e| Event::Received(Box::new((*e).clone())))
                    .boxed(),
                finished.map(|e| Event::Finished((*e).clone())).boxed(),
                failed.map(|e| Event::Failed((*e).clone())).boxed(),
                paused
                    .map(|e| Event::Paused(Box::new((*e).clone())))
                    .boxed(),
            ]);
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Event::Paused(paused) => {
                        let decision = decide(&rules.snapshot(), &paused);
                        if let Some(label) = decision.label() {
                            mark_route(&sink, &paused, label);
                        }
                        let tab = tab.clone();
                        tokio::spawn(async move {
                            if let Err(error) = answer(&tab, &paused, decision).await {
                                tracing::debug!(%error, url = paused.request.url, "answering a paused request failed");
                            }
                        });
                    }
                    other => record(&mut lock_ring(&sink), other),
                }
            }
        });
        let previous = self.lock().insert(
            target,
            Watched {
                page: page.clone(),
                ring,
                task,
            },
        );
        if let Some(old) = previous {
            old.task.abort();
        }
        // A tab that cannot take the rules (it is closing, say) still serves other calls;
        // changing the rules reports the active tab's failure.
        if let Err(error) = apply(page, &self.rules.snapshot()).await {
            tracing::warn!(%error, "cannot apply the network rules to a tab");
        }
    }

    /// Applies the current rules to every watched tab; answers the error of `target`'s, if any
    /// (other tabs' errors are logged: they may be closing).
    pub async fn apply_all(&self, target: &TargetId) -> Result<(), BrowserError> {
        let rules = self.rules.snapshot();
        let pages: Vec<Page> = self.lock().values().map(|w| w.page.clone()).collect();
        let mut outcome = Ok(());
        for page in pages {
            if let Err(error) = apply(&page, &rules).await {
                if page.target_id() == target {
                    outcome = Err(error);
                } else {
                    tracing::debug!(%error, "applying the network rules to a tab failed");
                }
            }
        }
        outcome
    }

    /// The requests of a tab, oldest first.
    pub fn requests(&self, target: &TargetId) -> Vec<RequestRecord> {
        let tabs = self.lock();
        match tabs.get(target) {
            Some(watched) => lock_ring(&watched.ring).records.iter().cloned().collect(),
            None => Vec::new(),
        }
    }

    /// Forgets the tabs not in `alive`.
    pub fn retain(&self, alive: impl Fn(&TargetId) -> bool) {
        self.lock().retain(|target, watched| {
            let keep = alive(target);
            if !keep {
                watched.task.abort();
            }
            keep
        });
    }
}

enum Event {
    Sent(Box<EventRequestWillBeSent>),
    Received(Box<EventResponseReceived>),
    Finished(EventLoadingFinished),
    Failed(EventLoadingFailed),
    Paused(Box<EventRequestPaused>),
}

/// What to do with a paused request.
#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Continue,
    Abort,
    Fulfill {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Continue with these headers added (replacing same-named ones).
    AddHeaders(BTreeMap<String, String>),
}

impl Decision {
    fn label(&self) -> Option<&'static str> {
        match self {
            Self::Continue => None,
            Self::Abort => Some("aborted"),
            Self::Fulfill { .. } => Some("fulfilled"),
            Self::AddHeaders(_) => Some("headers"),
        }
    }
}

/// The origin (`scheme://host[:port]`) of a URL, when it has one.
pub fn origin_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    match parsed.origin() {
        origin @ url::Origin::Tuple(..) => Some(origin.ascii_serialization()),
        url::Origin::Opaque(_) => None,
    }
}

fn decide(rules: &RuleSet, paused: &EventRequestPaused) -> Decision {
    let url = &paused.request.url;
    if let Some(route) = rules.routes.iter().find(|r| url_matches(&r.pattern, url)) {
        return match &route.action {
            RouteAction::Abort => Decision::Abort,
            RouteAction::Fulfill {
                status,
                headers,
                body,
            } => Decision::Fulfill {
                status: *status,
                headers: headers.clone(),
                body: body.clone(),
            },
        };
    }
    match origin_of(url).and_then(|o| rules.scoped_headers.get(&o)) {
        Some(headers) if !headers.is_empty() => Decision::AddHeaders(headers.clone()),
        _ => Decision::Continue,
    }
}

async fn answer(
    page: &Page,
    paused: &EventRequestPaused,
    decision: Decision,
) -> Result<(), BrowserError> {
    let id = paused.request_id.clone();
    match decision {
        Decision::Continue => {
            page.execute(ContinueRequestParams::new(id)).await?;
        }
        Decision::Abort => {
            page.execute(FailRequestParams::new(id, ErrorReason::BlockedByClient))
                .await?;
        }
        Decision::Fulfill {
            status,
            headers,
            body,
        } => {
            let mut params = FulfillRequestParams::new(id, i64::from(status));
            params.response_headers = Some(
                headers
                    .into_iter()
                    .map(|(n, v)| HeaderEntry::new(n, v))
                    .collect(),
            );
            params.body = Some(
                base64::engine::general_purpose::STANDARD
                    .encode(body)
                    .into(),
            );
            page.execute(params).await?;
        }
        Decision::AddHeaders(extra) => {
            let mut headers: Vec<HeaderEntry> = header_map(&paused.request.headers)
                .into_iter()
                .filter(|(name, _)| !extra.keys().any(|e| e.eq_ignore_ascii_case(name)))
                .map(|(n, v)| HeaderEntry::new(n, v))
                .collect();
            headers.extend(extra.into_iter().map(|(n, v)| HeaderEntry::new(n, v)));
            let mut params = ContinueRequestParams::new(id);
            params.headers = Some(headers);
            page.execute(params).await?;
        }
    }
    Ok(())
}

/// A glob for `Fetch.enable` (`*` any characters, `?` one, `\` escapes) that matches at least
/// every URL `pattern` matches.
fn fetch_glob(pattern: &str) -> String {
    let mut glob = String::with_capacity(pattern.len() + 2);
    for c in pattern.chars() {
        if matches!(c, '?' | '\\') {
            glob.push('\\');
        }
        glob.push(c);
    }
    if !pattern.contains('*') {
        // `url_matches` ignores a trailing slash on exact URLs.
        while glob.ends_with('/') {
            glob.pop();
        }
        glob.push('*');
    }
    glob
}

/// The `Fetch` patterns the rules need (none: `Fetch` is disabled).
fn fetch_patterns(rules: &RuleSet) -> Vec<RequestPattern> {
    let routes = rules.routes.iter().map(|r| fetch_glob(&r.pattern));
    let origins = rules
        .scoped_headers
        .iter()
        .filter(|(_, headers)| !headers.is_empty())
        .map(|(origin, _)| format!("{}/*", fetch_glob(origin).trim_end_matches('*')));
    routes
        .chain(origins)
        .map(|glob| RequestPattern {
            url_pattern: Some(glob),
            resource_type: None,
            request_stage: None,
        })
        .collect()
}

/// Applies `rules` to one tab.
async fn apply(page: &Page, rules: &RuleSet) -> Result<(), BrowserError> {
    let headers: serde_json::Map<String, Value> = rules
        .extra_headers
        .iter()
        .map(|(n, v)| (n.clone(), Value::String(v.clone())))
        .collect();
    page.execute(SetExtraHttpHeadersParams::new(Headers::new(Value::Object(
        headers,
    ))))
    .await?;
    let patterns = fetch_patterns(rules);
    if patterns.is_empty() {
        page.execute(fetch::DisableParams::default()).await?;
    } else {
        page.execute(fetch::EnableParams {
            patterns: Some(patterns),
            handle_auth_requests: None,
        })
        .await?;
    }
    match rules.emulation.viewport {
        Some((width, height)) => {
            page.execute(SetDeviceMetricsOverrideParams::new(
                i64::from(width),
                i64::from(height),
                0.0,
                false,
            ))
            .await?;
        }
        None => {
            page.execute(ClearDeviceMetricsOverrideParams::default())
                .await?;
        }
    }
    if let Some(agent) = &rules.emulation.user_agent {
        page.execute(SetUserAgentOverrideParams::new(agent.clone()))
            .await?;
    }
    Ok(())
}

fn clip(mut value: String, limit: usize) -> String {
    if value.chars().count() > limit {
        value = value.chars().take(limit).collect();
        value.push('…');
    }
    value
}

/// CDP's headers object as name → value (several values of one name are `\n`-joined by CDP),
/// bounded (see [`MAX_HEADER_BYTES`]).
fn header_map(headers: &Headers) -> BTreeMap<String, String> {
    let mut kept = BTreeMap::new();
    let Value::Object(map) = headers.inner() else {
        return kept;
    };
    let mut bytes = 0;
    for (name, value) in map.iter().take(MAX_HEADERS_KEPT) {
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let text = clip(text, MAX_HEADER_VALUE_CHARS);
        bytes += name.len() + text.len();
        if bytes > MAX_HEADER_BYTES {
            break;
        }
        kept.insert(name.clone(), text);
    }
    kept
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// The latest record of a request id.
fn latest<'a>(log: &'a mut Log, id: &str) -> Option<&'a mut RequestRecord> {
    log.records.iter_mut().rev().find(|r| r.id == id)
}

fn set_response(record: &mut RequestRecord, response: &Response) {
    record.status = Some(response.status);
    record.status_text = Some(response.status_text.clone());
    record.mime_type = Some(response.mime_type.clone()).filter(|m| !m.is_empty());
    record.response_headers = header_map(&response.headers);
    if let Some(sent) = &response.request_headers {
        // The headers as sent on the wire, when the browser reports them.
        record.request_headers.extend(header_map(sent));
    }
    record.from_cache = response.from_disk_cache.unwrap_or(false)
        || response.from_prefetch_cache.unwrap_or(false)
        || response.from_service_worker.unwrap_or(false);
    record.remote_address =
        response
            .remote_ip_address
            .as_ref()
            .map(|ip| match response.remote_port {
                Some(port) => format!("{ip}:{port}"),
                None => ip.clone(),
            });
    record.protocol = response.protocol.clone();
    record.timing = response.timing.as_ref().map(|t| {
        let span = |start: f64, end: f64| {
            if start >= 0.0 && end >= start {
                end - start
            } else {
                -1.0
            }
        };
        let first = [t.dns_start, t.connect_start, t.send_start]
            .into_iter()
            .find(|v| *v >= 0.0)
            .unwrap_or(0.0);
        Timing {
            blocked: first.max(0.0),
            dns: span(t.dns_start, t.dns_end),
            connect: span(t.connect_start, t.connect_end),
            ssl: span(t.ssl_start, t.ssl_end),
            send: span(t.send_start, t.send_end).max(0.0),
            wait: span(t.send_end, t.receive_headers_end).max(0.0),
            receive: 0.0,
        }
    });
}

fn record(ring: &mut Log, event: Event) {
    match event {
        Event::Sent(sent) => {
            if let Some(redirect) = &sent.redirect_response
                && let Some(previous) = latest(ring, sent.request_id.inner())
            {
                set_response(previous, redirect);
                previous.finished = true;
                previous.duration_ms =
                    Some(((sent.timestamp.inner() - previous.sent_at) * 1000.0).max(0.0));
            }
            if ring.records.len() >= MAX_REQUESTS {
                ring.records.pop_front();
            }
            let wall = *sent.wall_time.inner() * 1000.0;
            let route = ring
                .pending
                .remove(sent.request_id.inner())
                .map(str::to_string);
            ring.records.push_back(RequestRecord {
                id: sent.request_id.inner().clone(),
                url: clip(sent.request.url.clone(), MAX_URL_CHARS),
                method: sent.request.method.clone(),
                resource_type: sent
                    .r#type
                    .as_ref()
                    .map(|t| t.as_ref().to_ascii_lowercase())
                    .unwrap_or_else(|| "other".into()),
                status: None,
                status_text: None,
                mime_type: None,
                request_headers: header_map(&sent.request.headers),
                response_headers: BTreeMap::new(),
                started: if wall > 0.0 { wall } else { now_ms() },
                duration_ms: None,
                timing: None,
                encoded_size: None,
                failure: None,
                from_cache: false,
                remote_address: None,
                protocol: None,
                finished: false,
                route,
                sent_at: *sent.timestamp.inner(),
            });
        }
        Event::Received(received) => {
            if let Some(record) = latest(ring, received.request_id.inner()) {
                set_response(record, &received.response);
            }
        }
        Event::Finished(done) => {
            if let Some(record) = latest(ring, done.request_id.inner()) {
                record.finished = true;
                record.encoded_size = Some(done.encoded_data_length);
                let total = ((done.timestamp.inner() - record.sent_at) * 1000.0).max(0.0);
                record.duration_ms = Some(total);
                if let Some(timing) = record.timing.as_mut() {
                    let before = timing.blocked
                        + timing.dns.max(0.0)
                        + timing.connect.max(0.0)
                        + timing.send
                        + timing.wait;
                    timing.receive = (total - before).max(0.0);
                }
            }
        }
        Event::Failed(failed) => {
            if let Some(record) = latest(ring, failed.request_id.inner()) {
                record.finished = true;
                record.failure = Some(failed.error_text.clone());
                record.duration_ms =
                    Some(((failed.timestamp.inner() - record.sent_at) * 1000.0).max(0.0));
            }
        }
        Event::Paused(_) => {}
    }
}

/// Notes on a request's record that a rule took it (when the record has not come yet, on the
/// record when it comes).
fn mark_route(ring: &Ring, paused: &EventRequestPaused, label: &'static str) {
    let Some(id) = paused.network_id.as_ref() else {
        return;
    };
    let mut log = lock_ring(ring);
    match latest(&mut log, id.inner()) {
        Some(record) if !record.finished && record.status.is_none() => {
            record.route = Some(label.to_string());
        }
        _ => {
            if log.pending.len() >= MAX_REQUESTS {
                log.pending.clear();
            }
            log.pending.insert(id.inner().clone(), label);
        }
    }
}

/// Whether a record passes a `filter`: its URL contains it (case-insensitively), or its
/// resource type or method is it.
pub fn passes(record: &RequestRecord, filter: &str) -> bool {
    let filter = filter.trim().to_ascii_lowercase();
    filter.is_empty()
        || record.url.to_ascii_lowercase().contains(&filter)
        || record.resource_type == filter
        || record.method.eq_ignore_ascii_case(&filter)
}

/// HAR 1.2 (`{"log": ...}`) of `records`.
pub fn har(records: &[RequestRecord], browser: &str) -> Value {
    let (name, version) = browser.split_once('/').unwrap_or((browser, ""));
    let entries: Vec<Value> = records.iter().map(har_entry).collect();
    json!({
        "log": {
            "version": "1.2",
            "creator": {"name": "Agentbox sandboxd", "version": env!("CARGO_PKG_VERSION")},
            "browser": {"name": name, "version": version},
            "pages": [],
            "entries": entries,
        }
    })
}

fn har_headers(headers: &BTreeMap<String, String>) -> Vec<Value> {
    headers
        .iter()
        .flat_map(|(name, value)| {
            value
                .split('\n')
                .map(|v| json!({"name": name, "value": v}))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn har_entry(record: &RequestRecord) -> Value {
    let started = UNIX_EPOCH + Duration::from_secs_f64((record.started / 1000.0).max(0.0));
    let query: Vec<Value> = url::Url::parse(&record.url)
        .map(|u| {
            u.query_pairs()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect()
        })
        .unwrap_or_default();
    let http_version = record.protocol.clone().unwrap_or_else(|| "HTTP/1.1".into());
    let timing = record.timing.clone().unwrap_or(Timing {
        blocked: -1.0,
        dns: -1.0,
        connect: -1.0,
        ssl: -1.0,
        send: 0.0,
        wait: record.duration_ms.unwrap_or(0.0),
        receive: 0.0,
    });
    let redirect = record
        .response_headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut entry = json!({
        "startedDateTime": agentbox_http::timestamp::rfc3339(started),
        "time": record.duration_ms.unwrap_or(0.0),
        "request": {
            "method": record.method,
            "url": record.url,
            "httpVersion": http_version,
            "cookies": [],
            "headers": har_headers(&record.request_headers),
            "queryString": query,
            "headersSize": -1,
            "bodySize": -1,
        },
        "response": {
            "status": record.status.unwrap_or(0),
            "statusText": record.status_text.clone().unwrap_or_default(),
            "httpVersion": http_version,
            "cookies": [],
            "headers": har_headers(&record.response_headers),
            "content": {
                "size": record.encoded_size.unwrap_or(0.0).max(0.0),
                "mimeType": record.mime_type.clone().unwrap_or_default(),
            },
            "redirectURL": redirect,
            "headersSize": -1,
            "bodySize": record.encoded_size.map_or(-1.0, |s| s.max(0.0)),
        },
        "cache": {},
        "timings": {
            "blocked": timing.blocked,
            "dns": timing.dns,
            "connect": timing.connect,
            "ssl": timing.ssl,
            "send": timing.send,
            "wait": timing.wait,
            "receive": timing.receive,
        },
        "_resourceType": record.resource_type,
    });
    if let (Some(failure), Some(object)) = (&record.failure, entry.as_object_mut()) {
        object.insert("_failure".into(), Value::String(failure.clone()));
    }
    if let (Some(address), Some(object)) = (&record.remote_address, entry.as_object_mut()) {
        object.insert("serverIPAddress".into(), Value::String(address.clone()));
    }
    entry
}

impl BrowserService {
    /// The requests of the active tab since it was first used through the API, oldest first.
    pub async fn requests(&self) -> Result<Vec<RequestRecord>, BrowserError> {
        self.bounded("reading the requests", |session, page| async move {
            Ok(session.networks.requests(page.target_id()))
        })
        .await
    }

    /// The current rules.
    pub fn rules(&self) -> RuleSet {
        self.rules.snapshot()
    }

    /// Changes the rules and applies them to every watched tab (and to the active tab, which is
    /// watched from now on).
    pub async fn change_rules<T>(
        &self,
        change: impl FnOnce(&mut RuleSet) -> T,
    ) -> Result<T, BrowserError> {
        let before = self.rules.snapshot();
        let result = self.rules.update(change);
        let applied = self
            .bounded("applying the network rules", |session, page| async move {
                session.networks.apply_all(page.target_id()).await
            })
            .await;
        if let Err(error) = applied {
            // Keep the rules the browser has.
            self.rules.update(|rules| *rules = before);
            return Err(error);
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, url: &str) -> RequestRecord {
        RequestRecord {
            id: id.into(),
            url: url.into(),
            method: "GET".into(),
            resource_type: "document".into(),
            status: Some(200),
            status_text: Some("OK".into()),
            mime_type: Some("text/html".into()),
            request_headers: BTreeMap::from([("Accept".into(), "*/*".into())]),
            response_headers: BTreeMap::from([("Set-Cookie".into(), "a=1\nb=2".into())]),
            started: 1_700_000_000_000.0,
            duration_ms: Some(12.5),
            timing: None,
            encoded_size: Some(300.0),
            failure: None,
            from_cache: false,
            remote_address: None,
            protocol: Some("http/1.1".into()),
            finished: true,
            route: None,
            sent_at: 0.0,
        }
    }

    #[test]
    fn fetch_globs_cover_the_patterns() {
        assert_eq!(fetch_glob("**/api/*"), "**/api/*");
        assert_eq!(fetch_glob("http://a/b?x=1"), "http://a/b\\?x=1*");
        assert_eq!(fetch_glob("http://a/b/"), "http://a/b*");
        let rules = RuleSet {
            scoped_headers: BTreeMap::from([
                (
                    "http://h:8000".into(),
                    BTreeMap::from([("X".into(), "1".into())]),
                ),
                ("http://empty".into(), BTreeMap::new()),
            ]),
            ..RuleSet::default()
        };
        let patterns = fetch_patterns(&rules);
        assert_eq!(patterns.len(), 1);
        assert_eq!(patterns[0].url_pattern.as_deref(), Some("http://h:8000/*"));
    }

    #[test]
    fn origins_and_filters() {
        assert_eq!(
            origin_of("http://127.0.0.1:8000/a?b").as_deref(),
            Some("http://127.0.0.1:8000")
        );
        assert_eq!(
            origin_of("https://example.com/").as_deref(),
            Some("https://example.com")
        );
        assert_eq!(origin_of("data:text/plain,x"), None);
        let r = record("1", "http://h/Page.html");
        assert!(passes(&r, "page.html"));
        assert!(passes(&r, "document"));
        assert!(passes(&r, "get"));
        assert!(passes(&r, ""));
        assert!(!passes(&r, "xhr"));
    }

    #[test]
    fn har_is_1_2_with_one_entry_per_request() {
        let har = har(
            &[record("1", "http://h/a?q=1&r=2"), record("2", "http://h/b")],
            "Chrome/140.0.1",
        );
        let log = &har["log"];
        assert_eq!(log["version"], "1.2");
        assert_eq!(log["browser"]["name"], "Chrome");
        let entries = log["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        let first = &entries[0];
        assert_eq!(first["request"]["url"], "http://h/a?q=1&r=2");
        assert_eq!(first["request"]["queryString"][1]["name"], "r");
        assert_eq!(first["response"]["status"], 200);
        assert_eq!(first["response"]["headers"].as_array().unwrap().len(), 2);
        assert_eq!(first["time"], 12.5);
        assert!(
            first["startedDateTime"]
                .as_str()
                .unwrap()
                .starts_with("2023-11-14T22:13:20")
        );
    }

    #[test]
    fn routes_come_before_scoped_headers() {
        let rules = RuleSet {
            scoped_headers: BTreeMap::from([(
                "http://h".into(),
                BTreeMap::from([("X-A".into(), "1".into())]),
            )]),
            routes: vec![Route {
                pattern: "**/blocked*".into(),
                action: RouteAction::Abort,
            }],
            ..RuleSet::default()
        };
        let paused = |url: &str| -> EventRequestPaused {
            serde_json::from_value(json!({
                "requestId": "interception-1",
                "request": {
                    "url": url, "method": "GET", "headers": {},
                    "initialPriority": "High", "referrerPolicy": "no-referrer"
                },
                "frameId": "F",
                "resourceType": "Document",
            }))
            .unwrap()
        };
        assert_eq!(
            decide(&rules, &paused("http://h/blocked.html")),
            Decision::Abort
        );
        assert!(matches!(
            decide(&rules, &paused("http://h/ok")),
            Decision::AddHeaders(_)
        ));
        assert_eq!(
            decide(&rules, &paused("http://other/ok")),
            Decision::Continue
        );
    }
}
