//! A page snapshot for agents (not part of AIO's API): the URL and title, the start of the
//! visible text, and the visible links, buttons and form fields, each with a CSS selector that
//! matches exactly that element, so an agent can read a page and act on it without parsing HTML.
//! Idea from seed 002 (`createSnapshot`). Bounded: [`TEXT_PREVIEW_CHARS`] characters of text and
//! [`MAX_ITEMS`] items of each kind; `counts` tells how many there are in all.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::BrowserError;
use super::{BrowserService, js, script};

/// Characters of visible text in `text_preview` (whitespace collapsed).
pub const TEXT_PREVIEW_CHARS: usize = 4000;
/// Links, buttons and inputs listed, at most, of each kind.
pub const MAX_ITEMS: usize = 50;
/// Characters of each item's text, label or value.
pub const ITEM_TEXT_CHARS: usize = 200;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    pub url: String,
    pub title: String,
    pub text_preview: String,
    /// Length of the whole visible text (whitespace collapsed).
    pub text_length: usize,
    pub links: Vec<LinkItem>,
    pub buttons: Vec<ButtonItem>,
    pub inputs: Vec<InputItem>,
    pub counts: Counts,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LinkItem {
    pub text: String,
    /// Absolute URL.
    pub href: String,
    pub selector: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ButtonItem {
    pub text: String,
    pub selector: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InputItem {
    /// The input type (`text`, `email`, `checkbox`...), or `textarea`, `select`,
    /// `contenteditable`.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub placeholder: String,
    /// From `<label>`, `aria-label`, `aria-labelledby` or `title`.
    pub label: String,
    /// The current value (never for passwords and file inputs; the selected option's text for
    /// a select).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// For checkboxes and radio buttons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked: Option<bool>,
    pub selector: String,
}

/// How many visible items of each kind the page has (the lists stop at [`MAX_ITEMS`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Counts {
    pub links: usize,
    pub buttons: usize,
    pub inputs: usize,
}

impl BrowserService {
    /// Takes a snapshot of the active tab.
    pub async fn snapshot(&self) -> Result<Snapshot, BrowserError> {
        self.bounded("taking the page snapshot", |_, page| async move {
            script::call(
                &page,
                js::SNAPSHOT,
                &[
                    json!(TEXT_PREVIEW_CHARS),
                    json!(MAX_ITEMS),
                    json!(ITEM_TEXT_CHARS),
                ],
            )
            .await
        })
        .await
    }
}
