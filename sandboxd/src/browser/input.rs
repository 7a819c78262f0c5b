//! Acting on the active tab like a person: mouse clicks and hovers (at an element or a point),
//! typing, filling fields, key presses and scrolling. Mouse and keyboard go through CDP's
//! `Input.dispatch*Event`, so pages receive trusted events.
//!
//! Elements are found by CSS selector in the main frame. An action on an element waits up to
//! [`ACTION_WAIT`] for it to exist, be visible, be enabled and not be covered by another element,
//! like Playwright's actionability checks, then fails naming what was wrong.

use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchKeyEventParams, DispatchKeyEventType, DispatchMouseEventParams, DispatchMouseEventType,
    InsertTextParams, MouseButton,
};
use chromiumoxide::keys::{KeyDefinition, USKEYBOARD_LAYOUT};
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::error::BrowserError;
use super::{BrowserService, js, script};

/// How long an action waits for its element to become actionable.
pub const ACTION_WAIT: Duration = Duration::from_secs(5);
/// Most characters `type` and `fill` accept.
pub const MAX_TYPED_CHARS: usize = 20_000;
/// Longest pause between typed characters.
pub const MAX_TYPE_DELAY: Duration = Duration::from_secs(1);

const ALT: i64 = 1;
const CONTROL: i64 = 2;
const META: i64 = 4;
const SHIFT: i64 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Button {
    #[default]
    Left,
    Right,
    Middle,
}

impl Button {
    fn cdp(self) -> MouseButton {
        match self {
            Self::Left => MouseButton::Left,
            Self::Right => MouseButton::Right,
            Self::Middle => MouseButton::Middle,
        }
    }

    fn mask(self) -> i64 {
        match self {
            Self::Left => 1,
            Self::Right => 2,
            Self::Middle => 4,
        }
    }
}

/// Where a mouse action goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// The `index`-th (0-based) element matching a CSS selector, at its centre.
    Selector { selector: String, index: usize },
    /// The `index`-th (0-based) interactive element, as `GET /v1/browser/page/elements` numbers
    /// them.
    Indexed { index: usize },
    /// A point in the viewport, in CSS pixels.
    Point { x: f64, y: f64 },
}

/// Where a mouse action went.
#[derive(Debug, Clone, PartialEq)]
pub struct Pointed {
    pub x: f64,
    pub y: f64,
    /// A short description of the element (`button#send`), when aimed at one.
    pub element: Option<String>,
}

/// A scroll position.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ScrollPosition {
    /// `window`, or the element that scrolled.
    pub target: String,
    pub x: f64,
    pub y: f64,
}

#[derive(Deserialize)]
struct Located {
    error: Option<String>,
    message: Option<String>,
    count: Option<usize>,
    element: Option<String>,
    x: Option<f64>,
    y: Option<f64>,
    covered: Option<String>,
    #[serde(default)]
    disabled: bool,
}

#[derive(Deserialize)]
struct FillPrepared {
    error: Option<String>,
    message: Option<String>,
    kind: Option<String>,
    count: Option<usize>,
    mode: Option<String>,
}

impl BrowserService {
    /// Clicks `count` times (1..=3) with `button` at the target.
    pub async fn click(
        &self,
        target: &Target,
        button: Button,
        count: u8,
    ) -> Result<Pointed, BrowserError> {
        self.bounded("clicking", |_, page| async move {
            let pointed = locate(&page, target, true).await?;
            mouse_move(&page, pointed.x, pointed.y).await?;
            for n in 1..=i64::from(count.clamp(1, 3)) {
                mouse(
                    &page,
                    DispatchMouseEventType::MousePressed,
                    &pointed,
                    button,
                    n,
                )
                .await?;
                mouse(
                    &page,
                    DispatchMouseEventType::MouseReleased,
                    &pointed,
                    button,
                    n,
                )
                .await?;
            }
            Ok(pointed)
        })
        .await
    }

    /// Moves the mouse over the target.
    pub async fn hover(&self, target: &Target) -> Result<Pointed, BrowserError> {
        self.bounded("hovering", |_, page| async move {
            let pointed = locate(&page, target, false).await?;
            mouse_move(&page, pointed.x, pointed.y).await?;
            Ok(pointed)
        })
        .await
    }

    /// Replaces the content of the `index`-th match of `selector` (or, without a selector, of
    /// the `index`-th interactive element) — an input, a textarea or an editable element — with
    /// `text`, as if typed: the page gets `input` events.
    pub async fn fill(
        &self,
        selector: Option<&str>,
        index: usize,
        text: &str,
    ) -> Result<(), BrowserError> {
        self.bounded("filling the field", |_, page| async move {
            let deadline = Instant::now() + ACTION_WAIT;
            let prepared = loop {
                let prepared: FillPrepared = script::call(
                    &page,
                    &js::FILL,
                    &[json!(selector), json!(index), json!(text)],
                )
                .await?;
                let retry = matches!(prepared.error.as_deref(), Some("none" | "index" | "state"));
                if !retry || Instant::now() >= deadline {
                    break prepared;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            match (prepared.error.as_deref(), prepared.mode.as_deref()) {
                (None, Some("insert")) => {
                    if text.is_empty() {
                        press_combo(&page, "Delete").await
                    } else {
                        page.execute(InsertTextParams::new(text)).await?;
                        Ok(())
                    }
                }
                (None, _) => Ok(()),
                (Some("invalid"), _) => {
                    Err(invalid_selector(selector.unwrap_or(""), prepared.message))
                }
                (Some("none" | "index"), _) => Err(no_element(selector, index, prepared.count)),
                (Some("kind"), _) => Err(BrowserError::NotActionable(format!(
                    "{} is {}, which cannot be filled with text",
                    the_element(selector, index),
                    prepared.kind.unwrap_or_else(|| "not a text field".into())
                ))),
                (Some(_), _) => Err(BrowserError::NotActionable(format!(
                    "cannot fill {}: {}",
                    the_element(selector, index),
                    prepared.message.unwrap_or_default()
                ))),
            }
        })
        .await
    }

    /// Types `text` into the focused element, one key event per character, pausing `delay`
    /// between characters. `\n` presses Enter and `\t` presses Tab.
    pub async fn type_text(&self, text: &str, delay: Duration) -> Result<(), BrowserError> {
        let delay = delay.min(MAX_TYPE_DELAY);
        let limit = super::OP_TIMEOUT + delay * text.chars().count() as u32;
        let work = self.connection.with_page(|_, page| async move {
            for (i, ch) in text.chars().enumerate() {
                if i > 0 && !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                type_char(&page, ch).await?;
            }
            Ok(())
        });
        tokio::time::timeout(limit, work)
            .await
            .map_err(|_| BrowserError::timeout("typing", limit))?
    }

    /// Presses a key or a combination (`Enter`, `a`, `Control+a`, `Shift+Tab`).
    pub async fn press_key(&self, combo: &str) -> Result<(), BrowserError> {
        parse_combo(combo)?;
        self.bounded("pressing the key", |_, page| async move {
            press_combo(&page, combo).await
        })
        .await
    }

    /// Scrolls by (`dx`, `dy`) CSS pixels (see `js/scroll.js`).
    pub async fn scroll_by(&self, dx: f64, dy: f64) -> Result<ScrollPosition, BrowserError> {
        self.bounded("scrolling", |_, page| async move {
            script::call(&page, js::SCROLL, &[json!(dx), json!(dy)]).await
        })
        .await
    }

    /// Scrolls the page to (`x`, `y`); `None` keeps that coordinate.
    pub async fn scroll_to(
        &self,
        x: Option<f64>,
        y: Option<f64>,
    ) -> Result<ScrollPosition, BrowserError> {
        self.bounded("scrolling", |_, page| async move {
            script::call(&page, js::SCROLL_TO, &[json!(x), json!(y)]).await
        })
        .await
    }
}

pub(crate) fn invalid_selector(selector: &str, message: Option<String>) -> BrowserError {
    BrowserError::invalid(
        "selector",
        format!(
            "{selector:?} is not a valid CSS selector: {}",
            message.unwrap_or_default()
        ),
    )
}

/// "the element matching "#a"" or "interactive element 3", for messages.
pub(crate) fn the_element(selector: Option<&str>, index: usize) -> String {
    match selector {
        Some(selector) => format!("the element matching {selector:?}"),
        None => format!("interactive element {index}"),
    }
}

pub(crate) fn no_element(
    selector: Option<&str>,
    index: usize,
    count: Option<usize>,
) -> BrowserError {
    let Some(selector) = selector else {
        return BrowserError::NoIndexedElement {
            index,
            count: count.unwrap_or(0),
        };
    };
    let detail = match count {
        Some(count) if count > 0 => {
            format!(" at index {index} (it matches {count} elements)")
        }
        _ => format!(" (waited {} s)", ACTION_WAIT.as_secs()),
    };
    BrowserError::NoElement {
        selector: selector.to_string(),
        detail,
    }
}

/// Resolves a target to a point, waiting for an element to become actionable.
async fn locate(
    page: &Page,
    target: &Target,
    needs_enabled: bool,
) -> Result<Pointed, BrowserError> {
    let (selector, index) = match target {
        Target::Point { x, y } => {
            return Ok(Pointed {
                x: *x,
                y: *y,
                element: None,
            });
        }
        Target::Selector { selector, index } => (Some(selector.as_str()), *index),
        Target::Indexed { index } => (None, *index),
    };
    let matching = match selector {
        Some(selector) => format!(" matching {selector:?}"),
        None => format!(" (interactive element {index})"),
    };
    let deadline = Instant::now() + ACTION_WAIT;
    loop {
        let found: Located =
            script::call(page, &js::LOCATE, &[json!(selector), json!(index)]).await?;
        if found.error.as_deref() == Some("invalid") {
            return Err(invalid_selector(selector.unwrap_or(""), found.message));
        }
        let element = found
            .element
            .clone()
            .unwrap_or_else(|| "the element".into());
        let problem = match (found.error.as_deref(), found.x, found.y) {
            (Some("none" | "index"), _, _) => Some(no_element(selector, index, found.count)),
            (Some("hidden"), _, _) => Some(BrowserError::NotActionable(format!(
                "{element}{matching} is not visible"
            ))),
            (None, Some(x), Some(y)) => {
                if let Some(cover) = &found.covered {
                    Some(BrowserError::NotActionable(format!(
                        "{element}{matching} is covered by {cover}"
                    )))
                } else if needs_enabled && found.disabled {
                    Some(BrowserError::NotActionable(format!(
                        "{element}{matching} is disabled"
                    )))
                } else {
                    return Ok(Pointed {
                        x,
                        y,
                        element: found.element,
                    });
                }
            }
            _ => Some(BrowserError::Protocol(
                "unexpected answer while locating the element".into(),
            )),
        };
        if Instant::now() >= deadline {
            return Err(problem.unwrap_or_else(|| no_element(selector, index, None)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn mouse_move(page: &Page, x: f64, y: f64) -> Result<(), BrowserError> {
    page.execute(DispatchMouseEventParams::new(
        DispatchMouseEventType::MouseMoved,
        x,
        y,
    ))
    .await?;
    Ok(())
}

pub(crate) async fn mouse(
    page: &Page,
    kind: DispatchMouseEventType,
    at: &Pointed,
    button: Button,
    click_count: i64,
) -> Result<(), BrowserError> {
    let pressed = kind == DispatchMouseEventType::MousePressed;
    let mut params = DispatchMouseEventParams::new(kind, at.x, at.y);
    params.button = Some(button.cdp());
    params.buttons = Some(if pressed { button.mask() } else { 0 });
    params.click_count = Some(click_count);
    page.execute(params).await?;
    Ok(())
}

/// The layout entry of a key name (`Enter`, `a`, `ArrowDown`), case-insensitively for names
/// longer than one character.
fn key_definition(name: &str) -> Option<&'static KeyDefinition> {
    let alias = match name.to_ascii_lowercase().as_str() {
        "esc" => "Escape",
        "return" => "Enter",
        "space" | "spacebar" => " ",
        "del" => "Delete",
        "ins" => "Insert",
        "up" => "ArrowUp",
        "down" => "ArrowDown",
        "left" => "ArrowLeft",
        "right" => "ArrowRight",
        "pgup" => "PageUp",
        "pgdn" | "pgdown" => "PageDown",
        "ctrl" => "Control",
        "cmd" | "command" | "super" | "win" => "Meta",
        "option" => "Alt",
        _ => name,
    };
    if alias.chars().count() == 1 {
        return USKEYBOARD_LAYOUT.iter().find(|k| k.key == alias);
    }
    USKEYBOARD_LAYOUT
        .iter()
        .find(|k| k.key.eq_ignore_ascii_case(alias))
}

fn modifier_bit(key: &KeyDefinition) -> Option<i64> {
    match key.key {
        "Alt" => Some(ALT),
        "Control" => Some(CONTROL),
        "Meta" => Some(META),
        "Shift" => Some(SHIFT),
        _ => None,
    }
}

/// Splits `Control+Shift+a` into its keys; `+` alone (or at the end, `Control++`) is the plus key.
pub fn parse_combo(combo: &str) -> Result<Vec<&'static KeyDefinition>, BrowserError> {
    let trimmed = combo.trim();
    if trimmed.is_empty() {
        return Err(BrowserError::invalid("key", "the key must not be empty"));
    }
    let mut names: Vec<&str> = Vec::new();
    let mut rest = trimmed;
    while !rest.is_empty() {
        match rest.find('+') {
            Some(0) => {
                names.push("+");
                rest = rest[1..].trim_start_matches('+');
            }
            Some(at) => {
                names.push(rest[..at].trim());
                rest = &rest[at + 1..];
            }
            None => {
                names.push(rest.trim());
                rest = "";
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            key_definition(name).ok_or_else(|| {
                BrowserError::invalid(
                    "key",
                    format!(
                        "unknown key {name:?} in {combo:?}; use names like Enter, Tab, Escape, \
                         ArrowDown, PageDown, F5, a single character, or combinations like Control+a"
                    ),
                )
            })
        })
        .collect()
}

async fn press_combo(page: &Page, combo: &str) -> Result<(), BrowserError> {
    let keys = parse_combo(combo)?;
    let Some((main, modifiers)) = keys.split_last() else {
        return Ok(());
    };
    let mut held = 0;
    for key in modifiers {
        held |= modifier_bit(key).unwrap_or(0);
        key_event(page, DispatchKeyEventType::RawKeyDown, key, held, None).await?;
    }
    // With Control, Alt or Meta held a key produces no text (Control+a selects all).
    let text = if held & (CONTROL | ALT | META) != 0 {
        None
    } else {
        key_text(main, held & SHIFT != 0)
    };
    let down = if text.is_some() {
        DispatchKeyEventType::KeyDown
    } else {
        DispatchKeyEventType::RawKeyDown
    };
    key_event(
        page,
        down,
        main,
        held | modifier_bit(main).unwrap_or(0),
        text,
    )
    .await?;
    key_event(page, DispatchKeyEventType::KeyUp, main, held, None).await?;
    for key in modifiers.iter().rev() {
        held &= !modifier_bit(key).unwrap_or(0);
        key_event(page, DispatchKeyEventType::KeyUp, key, held, None).await?;
    }
    Ok(())
}

/// The text a key types: its own (`\r` for Enter), or its name when that is one character.
fn key_text(key: &KeyDefinition, shift: bool) -> Option<String> {
    if let Some(text) = key.text {
        return Some(text.to_string());
    }
    let mut chars = key.key.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if shift => Some(c.to_uppercase().to_string()),
        (Some(c), None) => Some(c.to_string()),
        _ => None,
    }
}

async fn key_event(
    page: &Page,
    kind: DispatchKeyEventType,
    key: &KeyDefinition,
    modifiers: i64,
    text: Option<String>,
) -> Result<(), BrowserError> {
    let mut params = DispatchKeyEventParams::new(kind);
    params.modifiers = Some(modifiers);
    params.key = Some(key.key.to_string());
    params.code = Some(key.code.to_string());
    params.windows_virtual_key_code = Some(key.key_code);
    params.native_virtual_key_code = Some(key.key_code);
    if key.code.starts_with("Numpad") {
        params.location = Some(3);
    }
    params.unmodified_text = text.clone();
    params.text = text;
    page.execute(params).await?;
    Ok(())
}

/// Types one character: a key press when the US layout has the character, else inserted text.
async fn type_char(page: &Page, ch: char) -> Result<(), BrowserError> {
    match ch {
        '\r' => Ok(()),
        '\n' => press_combo(page, "Enter").await,
        '\t' => press_combo(page, "Tab").await,
        _ => {
            let mut buf = [0u8; 4];
            let text: &str = ch.encode_utf8(&mut buf);
            match USKEYBOARD_LAYOUT.iter().find(|k| k.key == text) {
                Some(key) => {
                    let shift = if ch.is_ascii_uppercase() { SHIFT } else { 0 };
                    key_event(
                        page,
                        DispatchKeyEventType::KeyDown,
                        key,
                        shift,
                        Some(text.to_string()),
                    )
                    .await?;
                    key_event(page, DispatchKeyEventType::KeyUp, key, shift, None).await
                }
                None => {
                    page.execute(InsertTextParams::new(text)).await?;
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(combo: &str) -> Vec<&'static str> {
        parse_combo(combo).unwrap().iter().map(|k| k.key).collect()
    }

    #[test]
    fn key_combinations() {
        assert_eq!(keys("Enter"), ["Enter"]);
        assert_eq!(keys("enter"), ["Enter"]);
        assert_eq!(keys("Control+a"), ["Control", "a"]);
        assert_eq!(keys("ctrl+Shift+Tab"), ["Control", "Shift", "Tab"]);
        assert_eq!(keys("+"), ["+"]);
        assert_eq!(keys("Control++"), ["Control", "+"]);
        assert_eq!(keys("esc"), ["Escape"]);
        assert_eq!(keys("ArrowDown"), ["ArrowDown"]);
        assert_eq!(keys("A"), ["A"]);
        assert_eq!(keys("F5"), ["F5"]);
        for bad in ["", "Hyper", "Control+Nope"] {
            let err = parse_combo(bad).unwrap_err();
            assert!(
                matches!(err, BrowserError::Invalid { field: "key", .. }),
                "{bad}"
            );
        }
    }

    #[test]
    fn key_texts() {
        let enter = key_definition("Enter").unwrap();
        assert_eq!(key_text(enter, false).as_deref(), Some("\r"));
        let a = key_definition("a").unwrap();
        assert_eq!(key_text(a, false).as_deref(), Some("a"));
        assert_eq!(key_text(a, true).as_deref(), Some("A"));
        assert_eq!(key_text(key_definition("Tab").unwrap(), false), None);
        assert_eq!(a.code, "KeyA");
    }
}
