//! The CDP connection to the sandbox's Chromium: made lazily on first use, checked on every use,
//! remade when Chromium was restarted.
//!
//! Chromium is supervised: when it dies the supervisor starts a new one, which has a new browser
//! websocket URL. Every use therefore reads `/json/version` first (a local HTTP request, well
//! under a millisecond): when the websocket URL changed, or the handler task that drives the old
//! connection has ended, the old connection is dropped and a new one made. An operation that
//! still fails with a broken connection is retried once on a fresh connection
//! ([`Connection::run`]).
//!
//! chromiumoxide only connects here ([`Browser::connect_with_config`]); it never launches a
//! browser. No `Origin` header is sent, so Chromium needs no `--remote-allow-origins`.
//!
//! Tabs are the browser's `page` targets. Their order is the order in which this connection first
//! saw them (tabs opened through the API come last), so indexes stay stable while tabs are only
//! opened. The *active* tab is the one API calls act on: the tab last opened or activated through
//! the API; when there is none (or it was closed), the most recently opened tab. A tab with an
//! open JavaScript dialog takes no page call ([`super::dialog`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chromiumoxide::cdp::browser_protocol::target::{
    CreateTargetParams, GetTargetsParams, TargetId, TargetInfo,
};
use chromiumoxide::handler::HandlerConfig;
use chromiumoxide::{Browser, Page};
use futures::StreamExt;
use serde::Deserialize;

use super::error::BrowserError;

/// How long reading `/json/version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(3);
/// How long opening the websocket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a tab may take to be attached after it appeared.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);
/// chromiumoxide's own limit on one command; ours (per operation) are shorter.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// What `/json/version` says.
#[derive(Debug, Clone, Deserialize)]
pub struct VersionInfo {
    #[serde(rename = "Browser", default)]
    pub browser: String,
    #[serde(rename = "User-Agent", default)]
    pub user_agent: String,
    #[serde(rename = "webSocketDebuggerUrl")]
    pub ws_url: String,
}

/// A tab as the API shows it.
#[derive(Debug, Clone)]
pub struct Tab {
    pub index: usize,
    pub target_id: TargetId,
    pub url: String,
    pub title: String,
    pub active: bool,
}

/// The lazily made, transparently remade connection.
pub struct Connection {
    addr: SocketAddr,
    http: reqwest::Client,
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// The network rules every session applies to its tabs.
    rules: Arc<super::network::Rules>,
}

/// One websocket connection to one Chromium process.
pub struct Session {
    pub browser: Browser,
    ws_url: String,
    handler: tokio::task::JoinHandle<()>,
    book: Mutex<TabBook>,
    /// The console messages of the tabs this connection used.
    pub consoles: super::console::Consoles,
    /// The requests of the tabs this connection used, and the rules applied to them.
    pub networks: super::network::Networks,
    /// The JavaScript dialogs open in the tabs this connection used.
    pub dialogs: super::dialog::Dialogs,
}

/// The order tabs were first seen in, and the active one.
#[derive(Default)]
struct TabBook {
    seen: HashMap<TargetId, u64>,
    next: u64,
    active: Option<TargetId>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.handler.abort();
    }
}

impl Connection {
    pub fn new(addr: SocketAddr, rules: Arc<super::network::Rules>) -> Self {
        Self {
            rules,
            addr,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(VERSION_TIMEOUT)
                .build()
                .unwrap_or_default(),
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// Chromium's DevTools address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Reads Chromium's `/json/version` (without connecting over CDP).
    pub async fn version(&self) -> Result<VersionInfo, BrowserError> {
        let url = format!("http://{}/json/version", self.addr);
        let not_running = |e: String| BrowserError::NotRunning(format!("{url}: {e}"));
        let response = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| not_running(error_chain(&e.without_url())))?;
        if !response.status().is_success() {
            return Err(not_running(format!("answered {}", response.status())));
        }
        response
            .json::<VersionInfo>()
            .await
            .map_err(|e| not_running(format!("unexpected answer: {}", e.without_url())))
    }

    /// The current session, connecting (or reconnecting) when needed.
    pub async fn session(&self) -> Result<Arc<Session>, BrowserError> {
        let version = self.version().await?;
        let mut current = self.current.lock().await;
        if let Some(session) = current.as_ref() {
            if session.ws_url == version.ws_url && !session.handler.is_finished() {
                return Ok(session.clone());
            }
            tracing::info!(
                "the browser was restarted or the connection ended; reconnecting over CDP"
            );
        }
        *current = None;
        let session = Arc::new(Session::connect(&version.ws_url, self.rules.clone()).await?);
        *current = Some(session.clone());
        Ok(session)
    }

    /// Drops the current connection (whatever it is) so the next use makes a new one.
    pub async fn reset(&self) {
        *self.current.lock().await = None;
    }

    /// Forgets `session` (when it is still the current one) so the next use reconnects.
    pub async fn invalidate(&self, session: &Arc<Session>) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, session)) {
            *current = None;
        }
    }

    /// Whether a CDP connection is open (for tests and diagnostics).
    pub async fn is_connected(&self) -> bool {
        self.current
            .lock()
            .await
            .as_ref()
            .is_some_and(|s| !s.handler.is_finished())
    }

    /// Runs `op` on the current session, retrying once on a fresh connection (or with the tab
    /// re-resolved) when the connection broke or the tab vanished.
    pub async fn run<T, F, Fut>(&self, op: F) -> Result<T, BrowserError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, BrowserError>>,
    {
        let mut retried = false;
        loop {
            let session = self.session().await?;
            match op(session.clone()).await {
                Err(error) if error.is_retryable() && !retried => {
                    retried = true;
                    tracing::info!(%error, "browser operation failed; retrying once");
                    match error {
                        BrowserError::Disconnected(_) => self.invalidate(&session).await,
                        _ => session.forget_active(),
                    }
                }
                other => return other,
            }
        }
    }

    /// Runs `op` on the active tab of the current session (see [`Connection::run`]). A
    /// JavaScript dialog opening in the tab meanwhile ends the call at once with
    /// [`BrowserError::Dialog`]: the command waits on a page that runs nothing until the dialog
    /// is answered.
    pub async fn with_page<T, F, Fut>(&self, op: F) -> Result<T, BrowserError>
    where
        F: Fn(Arc<Session>, Page) -> Fut,
        Fut: Future<Output = Result<T, BrowserError>>,
    {
        self.run(|session| {
            let op = &op;
            async move {
                let page = session.active_page().await?;
                let opening = session.dialogs.opening(page.target_id());
                tokio::select! {
                    done = op(session.clone(), page) => done,
                    dialog = opening => Err(BrowserError::Dialog(dialog)),
                }
            }
        })
        .await
    }
}

/// An error and its causes, `: `-separated ("error sending request: ... Connection refused").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl Session {
    async fn connect(
        ws_url: &str,
        rules: Arc<super::network::Rules>,
    ) -> Result<Self, BrowserError> {
        let config = HandlerConfig {
            // Keep Chromium's own certificate checks and viewport: the person watching over VNC
            // sees the same browser the agent drives.
            ignore_https_errors: false,
            viewport: None,
            request_timeout: COMMAND_TIMEOUT,
            ..HandlerConfig::default()
        };
        let (browser, mut handler) = tokio::time::timeout(
            CONNECT_TIMEOUT,
            Browser::connect_with_config(ws_url, config),
        )
        .await
        .map_err(|_| BrowserError::NotRunning(format!("connecting to {ws_url} timed out")))?
        .map_err(|e| BrowserError::NotRunning(format!("connecting to {ws_url}: {e}")))?;
        let handler = tokio::spawn(async move {
            while let Some(event) = handler.next().await {
                if let Err(error) = event {
                    tracing::info!(%error, "CDP connection ended");
                    break;
                }
            }
        });
        tracing::info!(ws_url, "connected to the browser over CDP");
        Ok(Self {
            browser,
            ws_url: ws_url.to_string(),
            handler,
            book: Mutex::new(TabBook::default()),
            consoles: super::console::Consoles::default(),
            networks: super::network::Networks::new(rules),
            dialogs: super::dialog::Dialogs::default(),
        })
    }

    fn book(&self) -> std::sync::MutexGuard<'_, TabBook> {
        // A panic while holding this lock cannot leave the book inconsistent (every update is a
        // single insert or assignment), so a poisoned lock is still usable.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The browser's tabs in API order, with the active one marked.
    pub async fn tabs(&self) -> Result<Vec<Tab>, BrowserError> {
        let targets = self.browser.execute(GetTargetsParams::default()).await?;
        let pages: Vec<TargetInfo> = targets
            .result
            .target_infos
            .into_iter()
            .filter(|t| t.r#type == "page" && t.subtype.as_deref() != Some("prerender"))
            .collect();
        let mut guard = self.book();
        let TabBook { seen, next, active } = &mut *guard;
        let mut ordered: Vec<(u64, TargetInfo)> = pages
            .into_iter()
            .map(|info| {
                let seq = *seen.entry(info.target_id.clone()).or_insert_with(|| {
                    *next += 1;
                    *next
                });
                (seq, info)
            })
            .collect();
        ordered.sort_by_key(|(seq, _)| *seq);
        seen.retain(|id, _| ordered.iter().any(|(_, t)| &t.target_id == id));
        self.consoles
            .retain(|id| ordered.iter().any(|(_, t)| &t.target_id == id));
        self.networks
            .retain(|id| ordered.iter().any(|(_, t)| &t.target_id == id));
        self.dialogs
            .retain(|id| ordered.iter().any(|(_, t)| &t.target_id == id));
        let active = match active {
            Some(id) if ordered.iter().any(|(_, t)| &t.target_id == id) => Some(id.clone()),
            _ => ordered.last().map(|(_, t)| t.target_id.clone()),
        };
        Ok(ordered
            .into_iter()
            .enumerate()
            .map(|(index, (_, info))| Tab {
                index,
                active: Some(&info.target_id) == active.as_ref(),
                target_id: info.target_id,
                url: info.url,
                title: info.title,
            })
            .collect())
    }

    /// The tab API calls act on, opening one when the browser has none; a tab with an open
    /// JavaScript dialog is refused ([`BrowserError::Dialog`]): nothing can run in it.
    pub async fn active_page(&self) -> Result<Page, BrowserError> {
        let page = self.active_page_unchecked().await?;
        match self.dialogs.open(page.target_id()) {
            Some(dialog) => Err(BrowserError::Dialog(dialog)),
            None => Ok(page),
        }
    }

    /// The active tab even while a dialog is open in it (to report or answer the dialog).
    pub async fn active_page_unchecked(&self) -> Result<Page, BrowserError> {
        let tabs = self.tabs().await?;
        let target = match tabs.iter().find(|t| t.active) {
            Some(tab) => tab.target_id.clone(),
            None => self.open_tab().await?,
        };
        self.set_active(&target);
        self.page(&target).await
    }

    /// The attached page of a target, waiting for chromiumoxide to attach to a new one. Its
    /// console and its requests are watched from now on, and the network rules apply to it.
    pub async fn page(&self, target: &TargetId) -> Result<Page, BrowserError> {
        let page = self.attached_page(target).await?;
        self.consoles.watch(&page).await;
        self.networks.watch(&page).await;
        self.dialogs.watch(&page).await;
        Ok(page)
    }

    async fn attached_page(&self, target: &TargetId) -> Result<Page, BrowserError> {
        let deadline = tokio::time::Instant::now() + ATTACH_TIMEOUT;
        loop {
            match self.browser.get_page(target.clone()).await {
                Ok(page) => return Ok(page),
                Err(chromiumoxide::error::CdpError::NotFound) => {
                    if tokio::time::Instant::now() > deadline {
                        return Err(BrowserError::TabGone(format!(
                            "tab {} was not attached within {ATTACH_TIMEOUT:?}",
                            target.as_ref()
                        )));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(other) => return Err(other.into()),
            }
        }
    }

    /// Opens a blank tab at the end of the tab order and returns its target.
    pub async fn open_tab(&self) -> Result<TargetId, BrowserError> {
        let created = self
            .browser
            .execute(CreateTargetParams::new("about:blank"))
            .await?;
        let id = created.result.target_id;
        let mut book = self.book();
        book.next += 1;
        let seq = book.next;
        book.seen.insert(id.clone(), seq);
        Ok(id)
    }

    pub fn set_active(&self, target: &TargetId) {
        self.book().active = Some(target.clone());
    }

    pub fn forget_active(&self) {
        self.book().active = None;
    }
}
