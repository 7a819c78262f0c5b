//! The browser capability behind `/v1/browser/...`: drives the sandbox's Chromium over the
//! DevTools protocol (CDP) with chromiumoxide. No HTTP in here.
//!
//! - [`connection`]: the lazy, self-healing CDP connection, tabs and the active tab.
//! - [`navigation`]: navigate / back / forward / reload with `wait_until`.
//! - [`content`]: text, HTML, Markdown, screenshots, `evaluate`.
//! - [`input`]: clicks, hovers, typing, filling, keys, scrolling.
//! - [`forms`]: the indexed interactive elements, selects, checkboxes, whole forms, file inputs,
//!   finding text, scrolling to an element.
//! - [`cookies`]: cookies, and saving and loading the browser's state (cookies + localStorage).
//! - [`console`]: the console messages each tab logged.
//! - [`dialog`]: JavaScript dialogs: reported, answered, or answered by the default policy.
//! - [`network`]: the requests each tab made (and their HAR), extra and origin-scoped headers,
//!   routes that abort or answer requests, and the page emulation of the browser config.
//! - [`wait`]: waiting for conditions.
//! - [`download`]: waiting for a download.
//! - [`snapshot`]: the agent-oriented page summary.
//! - [`tabs`]: list, open, close, activate.
//! - [`url_policy`]: which URLs may be opened.
//! - [`script`]: running JavaScript (sandboxd's scripts live in `js/`).
//! - [`captcha`]: which captcha widgets the page shows (detection only, never solving).
//!
//! Every operation acts on the *active tab*, is bounded in time, and reports failures as
//! [`BrowserError`]. Nothing connects to Chromium until the first operation, so an unused browser
//! API costs no memory.

pub mod captcha;
pub mod connection;
pub mod console;
pub mod content;
pub mod cookies;
pub mod dialog;
pub mod download;
pub mod error;
pub mod forms;
pub mod input;
pub mod navigation;
pub mod network;
pub mod script;
pub mod snapshot;
pub mod tabs;
pub mod url_policy;
pub mod wait;

use std::sync::Arc;
use std::time::Duration;

use chromiumoxide::Page;
use serde::Deserialize;

pub use connection::Connection;
pub use content::{Bounded, Clip, ImageFormat, Markdown, Screenshot, ScreenshotOptions};
pub use dialog::OpenDialog;
pub use error::BrowserError;
pub use input::{Button, Pointed, ScrollPosition, Target};
pub use navigation::{PageState, WaitUntil};
pub use script::Evaluation;
pub use snapshot::Snapshot;
pub use tabs::TabInfo;
pub use url_policy::{AllowedHost, Refusal, UrlPolicy};
pub use wait::{Condition, ElementState, Waited};

use connection::Session;

/// Settings of the browser API (`/v1/browser/...`).
#[derive(Debug, Clone)]
pub struct BrowserSettings {
    /// Chromium's DevTools HTTP endpoint inside the container (`SANDBOXD_BROWSER_CDP_ADDR`,
    /// default `127.0.0.1:9229`).
    pub cdp_addr: std::net::SocketAddr,
    /// Open private and local addresses too (`SANDBOXD_BROWSER_ALLOW_PRIVATE`, default false).
    pub allow_private: bool,
    /// Host names, addresses and CIDR ranges opened even when private
    /// (`SANDBOXD_BROWSER_ALLOW_HOSTS`, comma-separated).
    pub allow_hosts: Vec<AllowedHost>,
    /// The CDP URL `GET /v1/browser/info` reports (`SANDBOXD_PUBLIC_CDP_URL`); when unset it is
    /// derived from the request's `Host` header (port 9222).
    pub public_cdp_url: Option<String>,
    /// The noVNC URL `GET /v1/browser/info` reports (`SANDBOXD_PUBLIC_VNC_URL`); when unset it is
    /// derived from the request's `Host` header (port 6080, `/vnc.html`).
    pub public_vnc_url: Option<String>,
    /// The supervised program that runs Chromium, restarted by `POST /v1/browser/restart`
    /// with `mode: hard` (`SANDBOXD_BROWSER_PROGRAM`, default `chromium`).
    pub program: String,
}

/// Time limit of an operation that has none of its own.
pub const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// sandboxd's page scripts, one function expression each. Scripts that act on an element see
/// `find` (`js/find.js`) and `interactive` (`js/interactive.js`) in scope ([`js::with_find`]).
mod js {
    use std::sync::LazyLock;

    const INTERACTIVE: &str = include_str!("js/interactive.js");
    const FIND: &str = include_str!("js/find.js");

    /// `script` with `find` and `interactive` in scope.
    fn with_find(script: &str) -> String {
        format!(
            "((interactive) => {{ const find = (\n{FIND}\n); return (\n{script}\n); }})(\n{INTERACTIVE}\n)"
        )
    }

    macro_rules! finding {
        ($($name:ident = $file:literal;)*) => {
            $(pub static $name: LazyLock<String> =
                LazyLock::new(|| with_find(include_str!($file)));)*
        };
    }

    finding! {
        LOCATE = "js/locate.js";
        FILL = "js/fill.js";
        ELEMENTS = "js/elements.js";
        SELECT_AT = "js/select.js";
        CHECK_AT = "js/check.js";
        TOGGLE_AT = "js/toggle.js";
        FIND_ELEMENT = "js/find_element.js";
        FORM_KIND = "js/form_kind.js";
        SCROLL_INTO = "js/scroll_into.js";
        FILE_INPUT = "js/file_input.js";
    }

    pub const SCROLL: &str = include_str!("js/scroll.js");
    pub const SCROLL_TO: &str = include_str!("js/scroll_to.js");
    pub const TEXT: &str = include_str!("js/text.js");
    pub const HTML: &str = include_str!("js/html.js");
    pub const MARKDOWN_SOURCE: &str = include_str!("js/markdown_source.js");
    pub const SNAPSHOT: &str = include_str!("js/snapshot.js");
    pub const WAIT_SELECTOR: &str = include_str!("js/wait_selector.js");
    pub const FIND_TEXT: &str = include_str!("js/find_text.js");
    pub const STORAGE: &str = include_str!("js/storage.js");
    pub const STORAGE_LOAD: &str = include_str!("js/storage_load.js");
}

/// The browser as the API uses it.
pub struct BrowserService {
    connection: Connection,
    policy: UrlPolicy,
    rules: Arc<network::Rules>,
}

/// Facts for `GET /v1/browser/info`.
#[derive(Debug, Clone)]
pub struct BrowserInfo {
    pub user_agent: String,
    /// `Chrome/156.0...`.
    pub product: String,
    /// The path of the browser's CDP websocket (`/devtools/browser/<id>`).
    pub ws_path: String,
    /// The active tab's viewport (`innerWidth` × `innerHeight`), when it could be read.
    pub page_viewport: Option<(u32, u32)>,
}

impl BrowserService {
    pub fn new(settings: &BrowserSettings) -> Self {
        let rules = Arc::new(network::Rules::default());
        Self {
            connection: Connection::new(settings.cdp_addr, rules.clone()),
            rules,
            policy: UrlPolicy {
                allow_private: settings.allow_private,
                allow_hosts: settings.allow_hosts.clone(),
            },
        }
    }

    pub fn policy(&self) -> &UrlPolicy {
        &self.policy
    }

    /// Whether a CDP connection is open right now.
    pub async fn is_connected(&self) -> bool {
        self.connection.is_connected().await
    }

    /// The browser's user agent and CDP endpoint, and the active tab's viewport.
    pub async fn info(&self) -> Result<BrowserInfo, BrowserError> {
        let version = self.connection.version().await?;
        let ws_path = url::Url::parse(&version.ws_url)
            .map(|u| u.path().to_string())
            .unwrap_or_default();
        #[derive(Deserialize)]
        struct Size {
            width: u32,
            height: u32,
        }
        let size = tokio::time::timeout(
            Duration::from_secs(5),
            self.connection.with_page(|_, page| async move {
                script::call::<Size>(
                    &page,
                    "() => ({ width: innerWidth, height: innerHeight })",
                    &[],
                )
                .await
            }),
        )
        .await;
        Ok(BrowserInfo {
            user_agent: version.user_agent,
            product: version.browser,
            ws_path,
            page_viewport: match size {
                Ok(Ok(size)) => Some((size.width, size.height)),
                _ => None,
            },
        })
    }

    /// The active tab, for work that outlives one operation (a page recording).
    pub async fn active_page(&self) -> Result<Page, BrowserError> {
        self.bounded("finding the active tab", |_, page| async move { Ok(page) })
            .await
    }

    /// Drops the CDP connection and makes a new one (whichever Chromium now listens: after a
    /// restart, the new one), within `limit`; answers the browser's version.
    pub async fn reconnect(
        &self,
        limit: Duration,
    ) -> Result<connection::VersionInfo, BrowserError> {
        self.connection.reset().await;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let attempt = tokio::time::timeout_at(deadline, self.connection.session()).await;
            match attempt {
                Ok(Ok(_)) => return self.connection.version().await,
                // Chromium is still starting: its DevTools endpoint does not answer yet.
                Ok(Err(BrowserError::NotRunning(_))) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(Err(error)) => return Err(error),
                Err(_) => return Err(BrowserError::timeout("reconnecting to the browser", limit)),
            }
        }
    }

    /// Asks Chromium to close itself (CDP `Browser.close`): its orderly shutdown, which writes
    /// its cookie store and its session to disk. (SIGTERM ends it at once: the session is saved,
    /// cookies set since the store's last 30 s commit are not.) The connection ends with it; the
    /// caller waits for the process to exit.
    pub async fn close_browser(&self) -> Result<(), BrowserError> {
        let session = tokio::time::timeout(OP_TIMEOUT, self.connection.session())
            .await
            .map_err(|_| BrowserError::timeout("connecting to close the browser", OP_TIMEOUT))??;
        // The answer may never come: the browser is gone before it is sent.
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            session
                .browser
                .execute(chromiumoxide::cdp::browser_protocol::browser::CloseParams::default()),
        )
        .await;
        self.connection.reset().await;
        Ok(())
    }

    /// Chromium's `/json/version` (its websocket URL changes when it restarts).
    pub async fn version(&self) -> Result<connection::VersionInfo, BrowserError> {
        self.connection.version().await
    }

    /// Runs `op` on the active tab within [`OP_TIMEOUT`].
    async fn bounded<T, F, Fut>(&self, what: &str, op: F) -> Result<T, BrowserError>
    where
        F: Fn(Arc<Session>, Page) -> Fut,
        Fut: Future<Output = Result<T, BrowserError>>,
    {
        tokio::time::timeout(OP_TIMEOUT, self.connection.with_page(op))
            .await
            .map_err(|_| BrowserError::timeout(what, OP_TIMEOUT))?
    }

    /// Runs `op` on the session within [`OP_TIMEOUT`].
    async fn bounded_session<T, F, Fut>(&self, what: &str, op: F) -> Result<T, BrowserError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, BrowserError>>,
    {
        tokio::time::timeout(OP_TIMEOUT, self.connection.run(op))
            .await
            .map_err(|_| BrowserError::timeout(what, OP_TIMEOUT))?
    }
}

/// The JavaScript dialogs of the active tab ([`dialog`] watches them; an operation here changes
/// nothing else).
impl BrowserService {
    /// The dialog open in the active tab, if any.
    pub async fn open_dialog(&self) -> Result<Option<dialog::OpenDialog>, BrowserError> {
        self.connection
            .run(|session| async move {
                let page = session.active_page_unchecked().await?;
                Ok(session.dialogs.open(page.target_id()))
            })
            .await
    }

    /// Accepts or dismisses the active tab's dialog (`prompt_text` answers a prompt), and returns
    /// the dialog it answered.
    pub async fn answer_dialog(
        &self,
        accept: bool,
        prompt_text: Option<&str>,
    ) -> Result<dialog::OpenDialog, BrowserError> {
        self.connection
            .run(|session| async move {
                let page = session.active_page_unchecked().await?;
                let target = page.target_id().clone();
                let dialog = session
                    .dialogs
                    .open(&target)
                    .ok_or(BrowserError::NoDialog)?;
                let mut params =
                    chromiumoxide::cdp::browser_protocol::page::HandleJavaScriptDialogParams::new(
                        accept,
                    );
                if let Some(text) = prompt_text {
                    params.prompt_text = Some(text.to_string());
                }
                page.execute(params).await?;
                session.dialogs.answered(&target);
                Ok(dialog)
            })
            .await
    }
}
