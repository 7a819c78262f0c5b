//! The console messages each tab logged: `console.*` calls (`Runtime.consoleAPICalled`), uncaught
//! exceptions (`Runtime.exceptionThrown`) and the browser's own log entries (`Log.entryAdded`:
//! failed requests, security and intervention warnings).
//!
//! A tab is watched from the first time an API call uses it (its page is attached): a task per
//! tab keeps the latest [`MAX_MESSAGES`] messages in a ring buffer, each cut to
//! [`MAX_MESSAGE_CHARS`] characters. Log entries the browser kept from before are replayed when
//! watching starts (`Log.enable` sends them); `console.*` calls made before are not.
//! A tab's buffer goes away with the tab, or with the CDP connection.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::log::{EnableParams as LogEnableParams, EventEntryAdded};
use chromiumoxide::cdp::browser_protocol::target::TargetId;
use chromiumoxide::cdp::js_protocol::runtime::{
    EventConsoleApiCalled, EventExceptionThrown, RemoteObject,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::BrowserService;
use super::error::BrowserError;

/// Messages kept per tab (the oldest go first).
pub const MAX_MESSAGES: usize = 1000;
/// Characters kept of one message's text.
pub const MAX_MESSAGE_CHARS: usize = 4000;

/// One console message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsoleMessage {
    /// `log`, `info`, `warning`, `error`, `debug`... (`console.warn` is `warning`).
    #[serde(rename = "type")]
    pub level: String,
    pub text: String,
    /// `console` (a `console.*` call), `exception` (uncaught), or the browser's log source
    /// (`network`, `security`, `javascript`, `intervention`...).
    pub source: String,
    /// The script or resource it came from, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Line in `url` (0-based, as CDP reports it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
    /// Milliseconds since the Unix epoch.
    pub timestamp: f64,
}

type Ring = Arc<Mutex<VecDeque<ConsoleMessage>>>;

struct Watched {
    ring: Ring,
    task: tokio::task::JoinHandle<()>,
}

/// The buffers of one CDP connection's tabs.
#[derive(Default)]
pub struct Consoles {
    tabs: Mutex<HashMap<TargetId, Watched>>,
}

impl Drop for Consoles {
    fn drop(&mut self) {
        for watched in self.lock().values() {
            watched.task.abort();
        }
    }
}

impl Consoles {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TargetId, Watched>> {
        // Every update is one insert, remove or push: a poisoned lock is still consistent.
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
        let (api, exceptions, log) = match (
            page.event_listener::<EventConsoleApiCalled>().await,
            page.event_listener::<EventExceptionThrown>().await,
            page.event_listener::<EventEntryAdded>().await,
        ) {
            (Ok(api), Ok(exceptions), Ok(log)) => (api, exceptions, log),
            _ => {
                tracing::warn!(target = target.as_ref(), "cannot watch the tab's console");
                return;
            }
        };
        if let Err(error) = page.execute(LogEnableParams::default()).await {
            tracing::debug!(%error, "Log.enable failed; browser log entries are not collected");
        }
        let ring: Ring = Arc::default();
        let sink = ring.clone();
        let task = tokio::spawn(async move {
            let api = api.map(|e| from_console_call(&e));
            let exceptions = exceptions.map(|e| from_exception(&e));
            let log = log.map(|e| from_log_entry(&e));
            let mut all = futures::stream::select(futures::stream::select(api, exceptions), log);
            while let Some(message) = all.next().await {
                let mut ring = sink.lock().unwrap_or_else(|e| e.into_inner());
                if ring.len() >= MAX_MESSAGES {
                    ring.pop_front();
                }
                ring.push_back(message);
            }
        });
        if let Some(old) = self.lock().insert(target, Watched { ring, task }) {
            old.task.abort();
        }
    }

    /// The messages of a tab, oldest first; with `clear`, the buffer is emptied.
    pub fn messages(&self, target: &TargetId, clear: bool) -> Vec<ConsoleMessage> {
        let tabs = self.lock();
        let Some(watched) = tabs.get(target) else {
            return Vec::new();
        };
        let mut ring = watched.ring.lock().unwrap_or_else(|e| e.into_inner());
        if clear {
            ring.drain(..).collect()
        } else {
            ring.iter().cloned().collect()
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

fn clip(text: String) -> String {
    if text.chars().count() > MAX_MESSAGE_CHARS {
        let mut cut: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
        cut.push('…');
        cut
    } else {
        text
    }
}

/// How a console argument reads: strings as they are, other values as JSON, objects by their
/// description (`Array(3)`, `HTMLDivElement`).
fn argument_text(arg: &RemoteObject) -> String {
    match &arg.value {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(value) => value.to_string(),
        None => arg
            .unserializable_value
            .as_ref()
            .map(|v| v.as_ref().to_string())
            .or_else(|| arg.description.clone())
            .unwrap_or_else(|| arg.r#type.as_ref().to_string()),
    }
}

fn from_console_call(event: &EventConsoleApiCalled) -> ConsoleMessage {
    let text = event
        .args
        .iter()
        .map(argument_text)
        .collect::<Vec<_>>()
        .join(" ");
    let frame = event
        .stack_trace
        .as_ref()
        .and_then(|s| s.call_frames.first());
    let level = match event.r#type.as_ref() {
        "warning" => "warning".to_string(),
        other => other.to_string(),
    };
    ConsoleMessage {
        level,
        text: clip(text),
        source: "console".into(),
        url: frame.map(|f| f.url.clone()).filter(|u| !u.is_empty()),
        line: frame.map(|f| f.line_number),
        timestamp: *event.timestamp.inner(),
    }
}

fn from_exception(event: &EventExceptionThrown) -> ConsoleMessage {
    let details = &event.exception_details;
    ConsoleMessage {
        level: "error".into(),
        text: clip(super::script::exception_message(details)),
        source: "exception".into(),
        url: details.url.clone(),
        line: Some(details.line_number),
        timestamp: *event.timestamp.inner(),
    }
}

fn from_log_entry(event: &EventEntryAdded) -> ConsoleMessage {
    let entry = &event.entry;
    ConsoleMessage {
        level: match entry.level.as_ref() {
            "verbose" => "debug".to_string(),
            other => other.to_string(),
        },
        text: clip(entry.text.clone()),
        source: entry.source.as_ref().to_string(),
        url: entry.url.clone(),
        line: entry.line_number,
        timestamp: *entry.timestamp.inner(),
    }
}

impl BrowserService {
    /// The console messages of the active tab since it was first used through the API; with
    /// `clear`, they are forgotten after this answer.
    pub async fn console(&self, clear: bool) -> Result<Vec<ConsoleMessage>, BrowserError> {
        self.bounded("reading the console", |session, page| async move {
            Ok(session.consoles.messages(page.target_id(), clear))
        })
        .await
    }
}
