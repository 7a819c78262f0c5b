//! Waiting for the active tab to reach a condition: a selector's state, the load, a URL, network
//! quiet, a JavaScript condition, a request sent or a response received, or just time. Every
//! wait is bounded by its timeout.

use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::network::{
    EventLoadingFailed, EventLoadingFinished, EventRequestWillBeSent, EventResponseReceived,
};
use chromiumoxide::listeners::EventStream;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::error::BrowserError;
use super::script::{self, Evaluation};
use super::{BrowserService, js};

/// How long the network must be quiet for `network_idle`.
const NETWORK_QUIET: Duration = Duration::from_millis(500);
/// Default and bounds of the polling interval.
pub const DEFAULT_POLLING: Duration = Duration::from_millis(100);
pub const MIN_POLLING: Duration = Duration::from_millis(10);
pub const MAX_POLLING: Duration = Duration::from_secs(5);

/// The state a selector waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ElementState {
    Attached,
    Detached,
    #[default]
    Visible,
    Hidden,
}

impl ElementState {
    fn name(self) -> &'static str {
        match self {
            Self::Attached => "attached",
            Self::Detached => "detached",
            Self::Visible => "visible",
            Self::Hidden => "hidden",
        }
    }
}

/// What to wait for.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    Selector {
        selector: String,
        state: ElementState,
    },
    /// `document.readyState` is `complete`.
    Load,
    /// The tab's URL equals this one, or matches it as a glob (`*` any characters).
    Url(String),
    /// The document has loaded and no request started or finished for 500 ms (among those
    /// seen while waiting).
    NetworkIdle,
    /// The expression (or the function it evaluates to) returns a truthy value.
    Function {
        expression: String,
        polling: Duration,
    },
    /// The tab sends a request whose URL matches (see [`traffic_matches`]), from now on.
    Request(String),
    /// The tab receives a response whose URL matches (see [`traffic_matches`]), from now on.
    Response(String),
    /// Just this long.
    Time(Duration),
}

/// What a wait ended with.
#[derive(Debug, Clone, PartialEq)]
pub struct Waited {
    pub elapsed: Duration,
    /// For `Function`: the truthy value; for `Url`: the URL.
    pub value: Option<Value>,
}

#[derive(Deserialize)]
struct SelectorCheck {
    ok: Option<bool>,
    error: Option<String>,
}

impl BrowserService {
    /// Waits for `condition`, at most `limit`.
    pub async fn wait(
        &self,
        condition: &Condition,
        limit: Duration,
    ) -> Result<Waited, BrowserError> {
        let started = Instant::now();
        let deadline = started + limit;
        if let Condition::Time(duration) = condition {
            tokio::time::sleep((*duration).min(limit)).await;
            return Ok(Waited {
                elapsed: started.elapsed(),
                value: None,
            });
        }
        if let Condition::Request(pattern) | Condition::Response(pattern) = condition {
            let response = matches!(condition, Condition::Response(_));
            let value = tokio::time::timeout(
                limit,
                self.connection.with_page(|_, page| async move {
                    next_traffic(&page, pattern, response).await
                }),
            )
            .await
            .map_err(|_| {
                BrowserError::timeout(format!("waiting for {}", describe(condition)), limit)
            })??;
            return Ok(Waited {
                elapsed: started.elapsed(),
                value: Some(value),
            });
        }
        let what = describe(condition);
        let what = what.as_str();
        let outcome = tokio::time::timeout(
            limit + Duration::from_secs(5),
            self.connection.with_page(|_, page| async move {
                poll_until(&page, condition, deadline, limit, what).await
            }),
        )
        .await
        .map_err(|_| {
            BrowserError::timeout(format!("waiting for {}", describe(condition)), limit)
        })??;
        Ok(Waited {
            elapsed: started.elapsed(),
            value: outcome,
        })
    }
}

fn describe(condition: &Condition) -> String {
    match condition {
        Condition::Selector { selector, state } => {
            format!("{selector:?} to be {}", state.name())
        }
        Condition::Load => "the page to load".into(),
        Condition::Url(url) => format!("the URL to match {url:?}"),
        Condition::NetworkIdle => "the network to be idle".into(),
        Condition::Function { .. } => "the expression to return a truthy value".into(),
        Condition::Request(pattern) => format!("a request to {pattern:?}"),
        Condition::Response(pattern) => format!("a response from {pattern:?}"),
        Condition::Time(d) => format!("{d:?}"),
    }
}

async fn poll_until(
    page: &Page,
    condition: &Condition,
    deadline: Instant,
    limit: Duration,
    what: &str,
) -> Result<Option<Value>, BrowserError> {
    let timeout = || BrowserError::timeout(format!("waiting for {what}"), limit);
    let interval = match condition {
        Condition::Function { polling, .. } => *polling,
        _ => DEFAULT_POLLING,
    };
    let mut network = match condition {
        Condition::NetworkIdle => Some(NetworkActivity::start(page).await?),
        _ => None,
    };
    loop {
        let step = async {
            match condition {
                Condition::Selector { selector, state } => {
                    let check: SelectorCheck = script::call(
                        page,
                        js::WAIT_SELECTOR,
                        &[json!(selector), json!(state.name())],
                    )
                    .await?;
                    if let Some(error) = check.error {
                        return Err(BrowserError::invalid(
                            "selector",
                            format!("{selector:?} is not a valid CSS selector: {error}"),
                        ));
                    }
                    Ok(check.ok.unwrap_or(false).then_some(None))
                }
                Condition::Load => {
                    let state: String =
                        script::call(page, "() => document.readyState", &[]).await?;
                    Ok((state == "complete").then_some(None))
                }
                Condition::Url(pattern) => {
                    let url: String = script::call(page, "() => location.href", &[]).await?;
                    Ok(url_matches(pattern, &url).then_some(Some(Value::String(url))))
                }
                Condition::NetworkIdle => {
                    let state: String =
                        script::call(page, "() => document.readyState", &[]).await?;
                    let quiet = network
                        .as_mut()
                        .is_some_and(|n| n.quiet_for() >= NETWORK_QUIET);
                    Ok((state == "complete" && quiet).then_some(None))
                }
                Condition::Function { expression, .. } => {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(1));
                    match script::evaluate(page, expression, left).await? {
                        Evaluation::Exception(message) => Err(BrowserError::Script(message)),
                        Evaluation::Value(value) => Ok(truthy(&value).then_some(Some(value))),
                    }
                }
                Condition::Time(_) | Condition::Request(_) | Condition::Response(_) => {
                    Ok(Some(None))
                }
            }
        };
        let step = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), step);
        match step.await {
            Ok(Ok(Some(value))) => return Ok(value),
            Ok(Ok(None)) => {}
            // A navigation in progress destroys the context a check ran in: check again.
            Ok(Err(BrowserError::Script(message)))
                if !matches!(condition, Condition::Function { .. }) =>
            {
                tracing::debug!(%message, "wait check failed; retrying");
            }
            Ok(Err(BrowserError::PageChanged(message))) => {
                tracing::debug!(%message, "wait check failed; retrying");
            }
            Ok(Err(BrowserError::Protocol(message))) if message.contains("context") => {
                tracing::debug!(%message, "wait check failed; retrying");
            }
            Ok(Err(error)) => return Err(error),
            Err(_) => return Err(timeout()),
        }
        if Instant::now() >= deadline {
            return Err(timeout());
        }
        tokio::time::sleep(interval.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// Network requests starting and ending while waiting.
struct NetworkActivity {
    sent: EventStream<EventRequestWillBeSent>,
    finished: EventStream<EventLoadingFinished>,
    failed: EventStream<EventLoadingFailed>,
    last: Instant,
}

impl NetworkActivity {
    async fn start(page: &Page) -> Result<Self, BrowserError> {
        Ok(Self {
            sent: page.event_listener::<EventRequestWillBeSent>().await?,
            finished: page.event_listener::<EventLoadingFinished>().await?,
            failed: page.event_listener::<EventLoadingFailed>().await?,
            last: Instant::now(),
        })
    }

    /// How long no request started or ended.
    fn quiet_for(&mut self) -> Duration {
        let mut seen = false;
        while let Some(Some(_)) = self.sent.next().now_or_never() {
            seen = true;
        }
        while let Some(Some(_)) = self.finished.next().now_or_never() {
            seen = true;
        }
        while let Some(Some(_)) = self.failed.next().now_or_never() {
            seen = true;
        }
        if seen {
            self.last = Instant::now();
        }
        self.last.elapsed()
    }
}

/// Whether a request's URL is the one waited for: it matches `pattern` as a glob (with `*`), or
/// (without `*`) equals it or contains it.
pub fn traffic_matches(pattern: &str, url: &str) -> bool {
    url_matches(pattern, url) || (!pattern.contains('*') && url.contains(pattern))
}

/// The next request (or response) of `page` whose URL matches `pattern`, as JSON.
async fn next_traffic(page: &Page, pattern: &str, response: bool) -> Result<Value, BrowserError> {
    if response {
        let mut received = page.event_listener::<EventResponseReceived>().await?;
        while let Some(event) = received.next().await {
            if traffic_matches(pattern, &event.response.url) {
                return Ok(json!({
                    "url": event.response.url,
                    "status": event.response.status,
                    "status_text": event.response.status_text,
                    "mime_type": event.response.mime_type,
                    "resource_type": event.r#type.as_ref().to_ascii_lowercase(),
                }));
            }
        }
    } else {
        let mut sent = page.event_listener::<EventRequestWillBeSent>().await?;
        while let Some(event) = sent.next().await {
            if traffic_matches(pattern, &event.request.url) {
                return Ok(json!({
                    "url": event.request.url,
                    "method": event.request.method,
                    "resource_type": event
                        .r#type
                        .as_ref()
                        .map(|t| t.as_ref().to_ascii_lowercase())
                        .unwrap_or_else(|| "other".into()),
                }));
            }
        }
    }
    Err(BrowserError::Disconnected(
        "the tab's events ended while waiting".into(),
    ))
}

/// Whether `url` equals `pattern` or matches it as a glob (`*` and `**` match any characters).
pub fn url_matches(pattern: &str, url: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == url || pattern.trim_end_matches('/') == url.trim_end_matches('/');
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let mut rest = url;
    for (i, part) in parts.iter().enumerate() {
        if part.is_empty() {
            continue;
        }
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// JavaScript truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty() && s != "NaN" && s != "-0",
        Value::Array(_) | Value::Object(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(url_matches("http://a/b", "http://a/b"));
        assert!(url_matches("http://a/b/", "http://a/b"));
        assert!(!url_matches("http://a/b", "http://a/c"));
        assert!(url_matches(
            "**/done.html",
            "http://127.0.0.1:8000/x/done.html"
        ));
        assert!(url_matches("http://*/done*", "http://h/done.html?x=1"));
        assert!(!url_matches("http://*/done", "http://h/done.html"));
        assert!(url_matches("*", "anything"));
    }

    #[test]
    fn truthiness() {
        assert!(!truthy(&json!(null)));
        assert!(!truthy(&json!(0)));
        assert!(!truthy(&json!("")));
        assert!(truthy(&json!("x")));
        assert!(truthy(&json!([])));
        assert!(truthy(&json!(2)));
    }
}
