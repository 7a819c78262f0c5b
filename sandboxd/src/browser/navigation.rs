//! Navigation: `navigate` (with `wait_until`), `back`, `forward`, `reload`, and the watcher that
//! decides when a navigation has got far enough.
//!
//! The watcher subscribes to the tab's events *before* the navigation starts and follows them:
//! the main frame's commit (`Page.frameNavigated`, which names the new document's loader), that
//! loader's lifecycle events (`DOMContentLoaded`, `load`, `networkIdle`), the document's HTTP
//! status (`Network.responseReceived`), same-document navigations and load failures. Events of
//! other documents are ignored, so a late event from the page being left cannot end the wait.
//! As a safety net it also polls `document.readyState` once the new document has committed.
//!
//! `Page.navigate` is sent on a short-lived CDP connection of its own to the tab (chromiumoxide's
//! [`Connection`](chromiumoxide::Connection)), not through the tab's [`Page`]: chromiumoxide
//! queues a page's `Page.navigate` behind the previous navigation until that one fired `load`
//! (or 30 s passed), so after `wait_until: commit` on a slow page, or a page stopped while
//! loading, the next navigation would hang. Its answer tells why a navigation failed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::CdpEventMessage;
use chromiumoxide::cdp::browser_protocol::network::{
    EventLoadingFailed, EventResponseReceived, ResourceType,
};
use chromiumoxide::cdp::browser_protocol::page::{
    EventFrameNavigated, EventLifecycleEvent, EventNavigatedWithinDocument,
    GetNavigationHistoryParams, NavigateParams, NavigateReturns, NavigateToHistoryEntryParams,
    NavigationType, ReloadParams,
};
use chromiumoxide::error::CdpError;
use chromiumoxide::listeners::EventStream;
use chromiumoxide::types::{Message, Method};
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::error::BrowserError;
use super::{BrowserService, script};

/// How often `document.readyState` is polled after the commit.
const READY_STATE_POLL: Duration = Duration::from_millis(100);
/// How long to wait for the reason of a failed navigation once its error page committed.
const FAILURE_REASON_WAIT: Duration = Duration::from_secs(3);

/// When a navigation counts as done (Playwright's `wait_until`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitUntil {
    /// The `load` event fired.
    #[default]
    Load,
    /// `DOMContentLoaded` fired.
    DomContentLoaded,
    /// No network connections for 500 ms (Chromium's `networkIdle` lifecycle event).
    NetworkIdle,
    /// The new document committed (the response started arriving).
    Commit,
}

impl WaitUntil {
    /// The name as the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Load => "load",
            Self::DomContentLoaded => "domcontentloaded",
            Self::NetworkIdle => "networkidle",
            Self::Commit => "commit",
        }
    }

    fn lifecycle_name(self) -> Option<&'static str> {
        match self {
            Self::Load => Some("load"),
            Self::DomContentLoaded => Some("DOMContentLoaded"),
            Self::NetworkIdle => Some("networkIdle"),
            Self::Commit => None,
        }
    }
}

/// Where a tab is after a navigation.
#[derive(Debug, Clone, PartialEq)]
pub struct PageState {
    pub url: String,
    pub title: String,
    /// The HTTP status of the main document, when it came over HTTP.
    pub status: Option<i64>,
}

/// The events a navigation is followed by.
struct Watch {
    navigated: EventStream<EventFrameNavigated>,
    within_document: EventStream<EventNavigatedWithinDocument>,
    lifecycle: EventStream<EventLifecycleEvent>,
    responses: EventStream<EventResponseReceived>,
    failures: EventStream<EventLoadingFailed>,
}

/// What the watcher has seen so far.
#[derive(Default)]
struct Progress {
    /// Loader id and URL of the main frame's new document.
    commit: Option<(String, String)>,
    /// The main frame's error page committed (the navigation failed).
    failed_commit: bool,
    /// The page came back from the back/forward cache: it is loaded already.
    restored: bool,
    same_document: Option<String>,
    lifecycle: HashSet<(String, String)>,
    statuses: HashMap<String, i64>,
    failure: Option<String>,
    ready_state: Option<String>,
}

impl Progress {
    fn done(&self, until: WaitUntil) -> bool {
        if self.same_document.is_some() {
            return true;
        }
        let Some((loader, _)) = &self.commit else {
            return false;
        };
        if self.restored {
            return true;
        }
        let Some(name) = until.lifecycle_name() else {
            return true;
        };
        if self.lifecycle.contains(&(loader.clone(), name.to_string())) {
            return true;
        }
        matches!(
            (until, self.ready_state.as_deref()),
            (WaitUntil::Load, Some("complete"))
                | (
                    WaitUntil::DomContentLoaded,
                    Some("interactive" | "complete")
                )
        )
    }
}

impl Watch {
    async fn start(page: &Page) -> Result<Self, BrowserError> {
        Ok(Self {
            navigated: page.event_listener::<EventFrameNavigated>().await?,
            within_document: page
                .event_listener::<EventNavigatedWithinDocument>()
                .await?,
            lifecycle: page.event_listener::<EventLifecycleEvent>().await?,
            responses: page.event_listener::<EventResponseReceived>().await?,
            failures: page.event_listener::<EventLoadingFailed>().await?,
        })
    }

    /// Follows the navigation until `until` holds, the navigation fails, or `deadline`.
    /// `started` is chromiumoxide's `Page.navigate` call, when the navigation is one.
    async fn settle(
        mut self,
        page: &Page,
        target: &str,
        until: WaitUntil,
        deadline: Instant,
        limit: Duration,
        mut started: Option<tokio::task::JoinHandle<Result<Option<String>, CdpError>>>,
    ) -> Result<PageState, BrowserError> {
        let main_frame = page.mainframe().await.ok().flatten();
        let mut progress = Progress::default();
        let mut poll = tokio::time::interval(READY_STATE_POLL);
        let timeout =
            || BrowserError::timeout(format!("loading {target} (until {})", until.name()), limit);
        while !progress.done(until) {
            tokio::select! {
                Some(event) = self.navigated.next() => {
                    if event.frame.parent_id.is_none() {
                        let frame = &event.frame;
                        let url = match &frame.url_fragment {
                            Some(fragment) => format!("{}{fragment}", frame.url),
                            None => frame.url.clone(),
                        };
                        // An error page for another URL, committed with no document failing
                        // while this navigation ran, is the previous navigation's (a navigation
                        // that failed early answers before its error page commits): not ours.
                        if frame.unreachable_url.as_deref().is_some_and(|failed| {
                            !same_url(failed, target) && progress.failure.is_none()
                        }) {
                            continue;
                        }
                        progress.failed_commit = frame.unreachable_url.is_some();
                        progress.restored = event.r#type == NavigationType::BackForwardCacheRestore;
                        progress.commit = Some((frame.loader_id.as_ref().to_string(), url));
                        progress.ready_state = None;
                        if progress.failed_commit {
                            break;
                        }
                    }
                }
                Some(event) = self.within_document.next() => {
                    if main_frame.as_ref().is_none_or(|id| *id == event.frame_id) {
                        progress.same_document = Some(event.url.clone());
                    }
                }
                Some(event) = self.lifecycle.next() => {
                    progress.lifecycle.insert((event.loader_id.as_ref().to_string(), event.name.clone()));
                }
                Some(event) = self.responses.next() => {
                    if event.r#type == ResourceType::Document {
                        progress.statuses.insert(event.loader_id.as_ref().to_string(), event.response.status);
                    }
                }
                Some(event) = self.failures.next() => {
                    if event.r#type == ResourceType::Document && !event.canceled.unwrap_or(false) {
                        progress.failure = Some(event.error_text.clone());
                    }
                }
                result = async {
                    match started.as_mut() {
                        Some(task) => task.await,
                        None => std::future::pending().await,
                    }
                }, if started.is_some() => {
                    started = None;
                    match result {
                        Ok(Ok(Some(error_text))) => return Err(BrowserError::Navigation {
                            url: target.to_string(),
                            reason: error_text,
                        }),
                        Ok(Ok(None)) => {}
                        Ok(Err(CdpError::Chrome(error))) => return Err(BrowserError::Navigation {
                            url: target.to_string(),
                            reason: error.message,
                        }),
                        // chromiumoxide's own navigation limit; ours is the deadline.
                        Ok(Err(CdpError::Timeout)) | Ok(Err(CdpError::FrameNotFound(_))) => {}
                        Ok(Err(other)) => return Err(other.into()),
                        Err(_) => {}
                    }
                }
                _ = poll.tick() => {
                    if progress.commit.is_some() {
                        let state = tokio::time::timeout(
                            Duration::from_secs(1),
                            script::call::<String>(page, "() => document.readyState", &[]),
                        ).await;
                        if let Ok(Ok(state)) = state {
                            progress.ready_state = Some(state);
                        }
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Err(timeout()),
            }
        }
        if progress.failed_commit {
            let mut reason = progress.failure.clone();
            if let Some(task) = started.take() {
                let wait =
                    FAILURE_REASON_WAIT.min(deadline.saturating_duration_since(Instant::now()));
                if let Ok(Ok(Ok(Some(text)))) = tokio::time::timeout(wait, task).await {
                    reason = Some(text);
                }
            }
            return Err(BrowserError::Navigation {
                url: target.to_string(),
                reason: reason.unwrap_or_else(|| "the page could not be loaded".into()),
            });
        }
        // chromiumoxide hands each listener the events in the order Chromium sent them, the
        // document's response before its commit, but each into a channel of its own: the select
        // above may take the commit first and end the wait with the response still queued (seen
        // as `status: null` under load). What is queued already is taken before answering.
        while let Some(Some(event)) = self.responses.next().now_or_never() {
            if event.r#type == ResourceType::Document {
                progress
                    .statuses
                    .insert(event.loader_id.as_ref().to_string(), event.response.status);
            }
        }
        let status = progress
            .commit
            .as_ref()
            .and_then(|(loader, _)| progress.statuses.get(loader).copied());
        let fallback_url = progress
            .same_document
            .clone()
            .or_else(|| progress.commit.as_ref().map(|(_, url)| url.clone()))
            .unwrap_or_default();
        let mut state = current_state(page).await.unwrap_or(PageState {
            url: fallback_url,
            title: String::new(),
            status: None,
        });
        state.status = status;
        Ok(state)
    }
}

/// The tab's URL and title, read from the page.
pub async fn current_state(page: &Page) -> Result<PageState, BrowserError> {
    let (url, title): (String, String) = tokio::time::timeout(
        Duration::from_secs(5),
        script::call(page, "() => [location.href, document.title]", &[]),
    )
    .await
    .map_err(|_| {
        BrowserError::timeout("reading the page's URL and title", Duration::from_secs(5))
    })??;
    Ok(PageState {
        url,
        title,
        status: None,
    })
}

/// Whether two URLs are the same once parsed (`http://h` and `http://h/` are).
fn same_url(a: &str, b: &str) -> bool {
    match (url::Url::parse(a), url::Url::parse(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Sends `Page.navigate` on a connection of its own to the tab's websocket `endpoint`; answers
/// the navigation's error text (`net::ERR_NAME_NOT_RESOLVED`), if any.
async fn send_navigate(endpoint: &str, params: NavigateParams) -> Result<Option<String>, CdpError> {
    let mut connection = chromiumoxide::Connection::<CdpEventMessage>::connect(endpoint).await?;
    let call =
        connection.submit_command(params.identifier(), None, serde_json::to_value(&params)?)?;
    while let Some(message) = connection.next().await {
        match message {
            Ok(Message::Response(response)) if response.id == call => {
                if let Some(error) = response.error {
                    return Err(CdpError::Chrome(error));
                }
                let answer: NavigateReturns =
                    serde_json::from_value(response.result.unwrap_or_default())?;
                if answer.is_download == Some(true) {
                    return Ok(Some(
                        "the URL answered with a download; the tab stayed on its page".into(),
                    ));
                }
                return Ok(answer.error_text);
            }
            Ok(_) | Err(CdpError::InvalidMessage(..)) => {}
            Err(other) => return Err(other),
        }
    }
    Err(CdpError::NoResponse)
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl BrowserService {
    /// Opens `url` (after the URL policy allowed it) in the active tab and waits until `until`.
    pub async fn navigate(
        &self,
        url: &str,
        until: WaitUntil,
        limit: Duration,
    ) -> Result<PageState, BrowserError> {
        let url = self.policy.check(url).await?.to_string();
        let deadline = Instant::now() + limit;
        self.connection
            .with_page(|_, page| {
                let url = url.clone();
                async move {
                    let watch = Watch::start(&page).await?;
                    let endpoint = format!(
                        "ws://{}/devtools/page/{}",
                        self.connection.addr(),
                        page.target_id().as_ref()
                    );
                    let params = NavigateParams::new(url.clone());
                    let mut task = AbortOnDrop(Some(tokio::spawn(async move {
                        send_navigate(&endpoint, params).await
                    })));
                    watch
                        .settle(&page, &url, until, deadline, limit, task.0.take())
                        .await
                }
            })
            .await
    }

    /// Goes one entry back in the active tab's history. `None` when there is no previous entry.
    pub async fn back(&self, limit: Duration) -> Result<Option<PageState>, BrowserError> {
        self.history(-1, limit).await
    }

    /// Goes one entry forward in the active tab's history. `None` when there is no next entry.
    pub async fn forward(&self, limit: Duration) -> Result<Option<PageState>, BrowserError> {
        self.history(1, limit).await
    }

    async fn history(&self, step: i64, limit: Duration) -> Result<Option<PageState>, BrowserError> {
        let deadline = Instant::now() + limit;
        self.connection
            .with_page(|_, page| async move {
                let history = page
                    .execute(GetNavigationHistoryParams::default())
                    .await?
                    .result;
                let index = history.current_index + step;
                let Some(entry) = usize::try_from(index)
                    .ok()
                    .and_then(|i| history.entries.get(i))
                else {
                    return Ok(None);
                };
                let watch = Watch::start(&page).await?;
                page.execute(NavigateToHistoryEntryParams::new(entry.id))
                    .await?;
                let state = watch
                    .settle(&page, &entry.url, WaitUntil::Load, deadline, limit, None)
                    .await?;
                Ok(Some(state))
            })
            .await
    }

    /// Reloads the active tab and waits for `load`.
    pub async fn reload(&self, limit: Duration) -> Result<PageState, BrowserError> {
        let deadline = Instant::now() + limit;
        self.connection
            .with_page(|_, page| async move {
                let url = current_state(&page)
                    .await
                    .map(|s| s.url)
                    .unwrap_or_default();
                let watch = Watch::start(&page).await?;
                page.execute(ReloadParams::default()).await?;
                watch
                    .settle(&page, &url, WaitUntil::Load, deadline, limit, None)
                    .await
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_follows_the_committed_document_only() {
        let mut p = Progress::default();
        assert!(!p.done(WaitUntil::Commit));
        p.lifecycle.insert(("old".into(), "load".into()));
        p.commit = Some(("new".into(), "http://x/".into()));
        assert!(p.done(WaitUntil::Commit));
        assert!(!p.done(WaitUntil::Load));
        p.lifecycle
            .insert(("new".into(), "DOMContentLoaded".into()));
        assert!(p.done(WaitUntil::DomContentLoaded));
        assert!(!p.done(WaitUntil::Load));
        p.ready_state = Some("complete".into());
        assert!(p.done(WaitUntil::Load));
        assert!(!p.done(WaitUntil::NetworkIdle));
        p.lifecycle.insert(("new".into(), "networkIdle".into()));
        assert!(p.done(WaitUntil::NetworkIdle));
    }
}
