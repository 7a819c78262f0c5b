//! What can go wrong when driving the browser, one variant per kind of answer a caller needs.

use std::time::Duration;

use chromiumoxide::error::CdpError;

use super::url_policy::Refusal;

#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// Chromium's DevTools endpoint does not answer (not started yet, or being restarted).
    #[error("the browser is not running: {0}; the supervisor restarts it, retry shortly")]
    NotRunning(String),
    /// The CDP connection broke; the caller reconnects and retries once.
    #[error("the connection to the browser was lost: {0}")]
    Disconnected(String),
    /// The tab an operation was working on went away (closed by someone else).
    #[error("the tab was closed while the operation ran: {0}")]
    TabGone(String),
    /// The page navigated (or reloaded) while a command ran in it, so the document the command
    /// addressed is gone; whether it took effect first is unknown.
    #[error(
        "the page navigated while the command ran ({0}); it may not have taken effect: check the page and try again"
    )]
    PageChanged(String),
    /// The URL policy refused a URL.
    #[error("{0}")]
    Refused(Refusal),
    /// A request field has a value the browser cannot use.
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    /// No element matches the selector.
    #[error("no element matches the selector {selector:?}{detail}")]
    NoElement { selector: String, detail: String },
    /// No interactive element at this index (`GET /v1/browser/page/elements`).
    #[error(
        "no interactive element at index {index} (the page has {count}; list them with GET /v1/browser/page/elements)"
    )]
    NoIndexedElement { index: usize, count: usize },
    /// The element exists but cannot take the action (hidden, covered, disabled, wrong kind).
    #[error("{0}")]
    NotActionable(String),
    /// No tab at this index.
    #[error("no tab at index {index} (there are {count} tabs)")]
    NoTab { index: usize, count: usize },
    /// Navigation reached no page (DNS, connection, TLS errors...).
    #[error("navigating to {url} failed: {reason}")]
    Navigation { url: String, reason: String },
    /// The operation did not finish in time.
    #[error("{what} did not finish within {}", human(*limit))]
    Timeout { what: String, limit: Duration },
    /// A script sandboxd itself runs in the page threw.
    #[error("a script run in the page failed: {0}")]
    Script(String),
    /// A JavaScript dialog is open in the tab (or opened during the call): the page runs
    /// nothing until it is answered.
    #[error(
        "a JavaScript {} is open in the active tab: {:?}; answer it with POST /v1/browser/page/dialog (accept: true or false), or the default policy will {} it {} s after it opened",
        .0.kind, .0.message,
        if super::dialog::DialogPolicy::accepts(.0.kind) { "accept" } else { "dismiss" },
        super::dialog::GRACE.as_secs()
    )]
    Dialog(super::dialog::OpenDialog),
    /// No JavaScript dialog is open in the active tab.
    #[error("no JavaScript dialog is open in the active tab")]
    NoDialog,
    /// The browser rejected a command or answered something unexpected.
    #[error("the browser rejected the command: {0}")]
    Protocol(String),
}

fn human(limit: Duration) -> String {
    let secs = limit.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs:.1} s")
    }
}

impl BrowserError {
    pub fn timeout(what: impl Into<String>, limit: Duration) -> Self {
        Self::Timeout {
            what: what.into(),
            limit,
        }
    }

    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            message: message.into(),
        }
    }

    /// Whether reconnecting (or re-resolving the tab) and trying again may help.
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(self, Self::Disconnected(_) | Self::TabGone(_))
    }
}

/// Chromium's answers to a command whose document or JavaScript context a navigation
/// destroyed while it ran.
fn is_page_change(message: &str) -> bool {
    [
        "Inspected target navigated or closed",
        "Execution context was destroyed",
        "Cannot find context with specified id",
        "Cannot find default execution context",
    ]
    .iter()
    .any(|known| message.contains(known))
}

impl From<Refusal> for BrowserError {
    fn from(refusal: Refusal) -> Self {
        if refusal.unresolvable {
            Self::Navigation {
                url: refusal.url,
                reason: refusal.reason,
            }
        } else {
            Self::Refused(refusal)
        }
    }
}

impl From<CdpError> for BrowserError {
    fn from(error: CdpError) -> Self {
        match error {
            CdpError::Ws(e) => Self::Disconnected(e.to_string()),
            CdpError::Io(e) => Self::Disconnected(e.to_string()),
            CdpError::ChannelSendError(e) => Self::Disconnected(e.to_string()),
            CdpError::NoResponse => Self::Disconnected("no response from the browser".into()),
            CdpError::Timeout => {
                Self::Protocol("the browser did not answer a command in time".into())
            }
            CdpError::Chrome(e) => {
                let message = e.message;
                if message.contains("Session with given id not found")
                    || message.contains("No target with given id")
                    || message.contains("Target closed")
                    || message.contains("Not attached to an active page")
                {
                    Self::TabGone(message)
                } else if is_page_change(&message) {
                    Self::PageChanged(message)
                } else {
                    Self::Protocol(message)
                }
            }
            CdpError::JavascriptException(details) => Self::Script(
                details
                    .exception
                    .as_ref()
                    .and_then(|e| e.description.clone())
                    .unwrap_or(details.text.clone()),
            ),
            CdpError::NotFound => Self::TabGone("the tab is no longer attached".into()),
            other => Self::Protocol(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chrome(message: &str) -> BrowserError {
        BrowserError::from(CdpError::Chrome(chromiumoxide::types::Error {
            code: -32000,
            message: message.into(),
        }))
    }

    /// A navigation during a command (another client's, or the page's own) is a conflict with
    /// the page's state, answered 409, not a browser failure (502): the contract test saw
    /// `POST /v1/browser/page/check` answer an undocumented 502 that way.
    #[test]
    fn a_navigation_during_a_command_is_a_page_change() {
        for message in [
            "Inspected target navigated or closed",
            "Execution context was destroyed.",
            "Cannot find context with specified id",
        ] {
            assert!(
                matches!(chrome(message), BrowserError::PageChanged(_)),
                "{message}"
            );
        }
        assert!(matches!(chrome("Target closed"), BrowserError::TabGone(_)));
        assert!(matches!(
            chrome("Invalid parameters"),
            BrowserError::Protocol(_)
        ));
    }
}
