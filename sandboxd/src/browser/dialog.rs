//! JavaScript dialogs (`alert`, `confirm`, `prompt`, `beforeunload`): seen, reported, answered.
//!
//! While a dialog is open, its tab runs no script and answers no page command: every call would
//! hang until the dialog goes. So each tab an API call uses is watched
//! (`Page.javascriptDialogOpening` / `Page.javascriptDialogClosed`): a page call on a tab with an
//! open dialog fails at once with [`BrowserError::Dialog`](super::BrowserError::Dialog) naming its kind and text, and a call
//! during which one opens ends at once the same way ([`Dialogs::opening`]). The caller answers it
//! with [`BrowserService::answer_dialog`](super::BrowserService::answer_dialog) (`POST /v1/browser/page/dialog`); one left open is
//! answered by the default policy [`DialogPolicy`] [`GRACE`] after it opened: an alert and a
//! `beforeunload` are accepted, a confirm and a prompt dismissed (the choice that changes
//! nothing).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::page::{
    DialogType, EventJavascriptDialogClosed, EventJavascriptDialogOpening,
    HandleJavaScriptDialogParams,
};
use chromiumoxide::cdp::browser_protocol::target::TargetId;
use futures::StreamExt;
use tokio::sync::watch;

/// How long a dialog nobody answers stays open before the default policy answers it.
pub const GRACE: Duration = Duration::from_secs(3);
/// Characters kept of a dialog's message.
const MAX_MESSAGE_CHARS: usize = 2000;

/// An open dialog.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenDialog {
    /// `alert`, `confirm`, `prompt` or `beforeunload`.
    pub kind: &'static str,
    pub message: String,
    /// The prompt's default answer.
    pub default_prompt: Option<String>,
    /// The page that opened it.
    pub url: String,
    /// Milliseconds since the Unix epoch.
    pub opened_at_ms: u64,
    /// Which dialog of the tab this is (1 for the first), to tell one from the next.
    seq: u64,
}

/// What the default policy does to a dialog of this kind.
pub struct DialogPolicy;

impl DialogPolicy {
    /// Accept (`true`) or dismiss (`false`).
    pub fn accepts(kind: &str) -> bool {
        matches!(kind, "alert" | "beforeunload")
    }
}

fn kind_name(kind: &DialogType) -> &'static str {
    match kind {
        DialogType::Alert => "alert",
        DialogType::Confirm => "confirm",
        DialogType::Prompt => "prompt",
        DialogType::Beforeunload => "beforeunload",
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

struct Watched {
    state: watch::Sender<Option<OpenDialog>>,
    task: tokio::task::JoinHandle<()>,
}

/// The dialogs of one CDP connection's tabs.
#[derive(Default)]
pub struct Dialogs {
    tabs: Mutex<HashMap<TargetId, Watched>>,
}

impl Drop for Dialogs {
    fn drop(&mut self) {
        for watched in self.lock().values() {
            watched.task.abort();
        }
    }
}

impl Dialogs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TargetId, Watched>> {
        // Every update is one insert or remove: a poisoned lock is still consistent.
        self.tabs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts watching `page` unless it is watched already.
    pub async fn watch(&self, page: &Page) {
        let target = page.target_id().clone();
        if self
            .lock()
            .get(&target)
            .is_some_and(|w| !w.task.is_finished())
        {
            return;
        }
        let (opening, closed) = match (
            page.event_listener::<EventJavascriptDialogOpening>().await,
            page.event_listener::<EventJavascriptDialogClosed>().await,
        ) {
            (Ok(opening), Ok(closed)) => (opening, closed),
            _ => {
                tracing::warn!(target = target.as_ref(), "cannot watch the tab's dialogs");
                return;
            }
        };
        let (state, _) = watch::channel(None);
        let sink = state.clone();
        let page = page.clone();
        let task = tokio::spawn(async move {
            enum Seen {
                Opened(OpenDialog),
                Closed,
            }
            let mut seq = 0;
            let opening = opening.map(move |e| {
                seq += 1;
                Seen::Opened(OpenDialog {
                    kind: kind_name(&e.r#type),
                    message: e.message.chars().take(MAX_MESSAGE_CHARS).collect(),
                    default_prompt: e.default_prompt.clone(),
                    url: e.url.clone(),
                    opened_at_ms: now_ms(),
                    seq,
                })
            });
            let closed = closed.map(|_| Seen::Closed);
            let mut seen = futures::stream::select(opening, closed);
            while let Some(event) = seen.next().await {
                match event {
                    Seen::Opened(dialog) => {
                        tracing::info!(
                            kind = dialog.kind,
                            message = %dialog.message,
                            "a JavaScript dialog opened"
                        );
                        tokio::spawn(answer_after_grace(
                            page.clone(),
                            sink.subscribe(),
                            dialog.clone(),
                        ));
                        sink.send_replace(Some(dialog));
                    }
                    Seen::Closed => {
                        sink.send_replace(None);
                    }
                }
            }
        });
        if let Some(old) = self.lock().insert(target, Watched { state, task }) {
            old.task.abort();
        }
    }

    /// The dialog open in `target`, if any.
    pub fn open(&self, target: &TargetId) -> Option<OpenDialog> {
        self.lock()
            .get(target)
            .and_then(|w| w.state.borrow().clone())
    }

    /// Resolves when a dialog opens in `target` (never, for a tab that is not watched).
    pub fn opening(&self, target: &TargetId) -> impl Future<Output = OpenDialog> + use<> {
        let receiver = self.lock().get(target).map(|w| w.state.subscribe());
        async move {
            let Some(mut receiver) = receiver else {
                return std::future::pending().await;
            };
            loop {
                if receiver.changed().await.is_err() {
                    return std::future::pending().await;
                }
                if let Some(dialog) = receiver.borrow_and_update().clone() {
                    return dialog;
                }
            }
        }
    }

    /// Marks `target`'s dialog answered (the closed event follows; a call right after must not
    /// see it still open).
    pub(super) fn answered(&self, target: &TargetId) {
        if let Some(watched) = self.lock().get(target) {
            watched.state.send_replace(None);
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

/// Answers `dialog` by the default policy unless it was answered within [`GRACE`].
async fn answer_after_grace(
    page: Page,
    mut state: watch::Receiver<Option<OpenDialog>>,
    dialog: OpenDialog,
) {
    let still_open = |state: &watch::Receiver<Option<OpenDialog>>| {
        state.borrow().as_ref().is_some_and(|d| d.seq == dialog.seq)
    };
    let deadline = tokio::time::Instant::now() + GRACE;
    loop {
        match tokio::time::timeout_at(deadline, state.changed()).await {
            Ok(Ok(())) if still_open(&state) => continue,
            Ok(Ok(())) => return,
            Ok(Err(_)) => return,
            Err(_) => break,
        }
    }
    if !still_open(&state) {
        return;
    }
    let accept = DialogPolicy::accepts(dialog.kind);
    tracing::info!(
        kind = dialog.kind,
        accept,
        "nobody answered the JavaScript dialog; the default policy answers it"
    );
    if let Err(error) = page
        .execute(HandleJavaScriptDialogParams::new(accept))
        .await
    {
        tracing::debug!(%error, "answering the dialog failed (it may have closed already)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_changes_nothing_it_can_avoid() {
        assert!(DialogPolicy::accepts("alert"));
        assert!(DialogPolicy::accepts("beforeunload"));
        assert!(!DialogPolicy::accepts("confirm"));
        assert!(!DialogPolicy::accepts("prompt"));
    }
}
