//! Forms and finding things on the active tab: the indexed interactive elements
//! (`GET /v1/browser/page/elements`, whose indexes `click` and `fill` accept), choosing an option
//! of a `<select>`, checking and unchecking, filling a whole form, giving a file input files,
//! finding text, and scrolling an element into view.
//!
//! Like [`super::input`], an action waits up to [`ACTION_WAIT`] for its element to exist and
//! reports a selector that matches nothing as [`BrowserError::NoElement`].

use std::path::PathBuf;
use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::dom::SetFileInputFilesParams;
use chromiumoxide::cdp::browser_protocol::input::DispatchMouseEventType;
use chromiumoxide::cdp::js_protocol::runtime::{EvaluateParams, ReleaseObjectGroupParams};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::error::BrowserError;
use super::input::{ACTION_WAIT, Button, Pointed, invalid_selector, mouse, mouse_move, no_element};
use super::{BrowserService, js, script};

/// Most elements `elements` lists.
pub const MAX_ELEMENTS: usize = 500;
/// Characters of each element's text or label.
pub const ELEMENT_TEXT_CHARS: usize = 200;
/// Most matches `find_text` lists.
pub const MAX_TEXT_MATCHES: usize = 100;
/// Characters of context either side of a text match.
pub const MATCH_CONTEXT_CHARS: usize = 60;
/// Most items one `fill_form` takes.
pub const MAX_FORM_ITEMS: usize = 200;
/// Most files one `upload_file` takes.
pub const MAX_UPLOAD_FILES: usize = 100;

/// The interactive elements of the page (as many as [`MAX_ELEMENTS`]); each one's `index` is
/// what `click` and `fill` accept without a selector.
#[derive(Debug, Clone, Deserialize)]
pub struct Elements {
    /// One JSON object per element (`index`, `tag`, `type`, `text`, `selector`, position...).
    pub elements: Vec<Value>,
    /// How many interactive elements the page has.
    pub total: usize,
}

/// How `select_option` picks the option.
#[derive(Debug, Clone, PartialEq)]
pub enum OptionChoice {
    Value(String),
    Label(String),
    Index(usize),
}

/// The option `select_option` chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChosenOption {
    pub value: String,
    pub label: String,
    pub index: usize,
}

/// What `check` / `uncheck` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// `checkbox`, `radio`, `switch`...
    pub kind: String,
    /// Whether it had to be clicked (false: it already was in the wanted state).
    pub changed: bool,
}

/// One field of `fill_form`.
#[derive(Debug, Clone, PartialEq)]
pub struct FormItem {
    /// A CSS selector, or `None` for the `index`-th interactive element.
    pub selector: Option<String>,
    pub index: usize,
    pub value: FormValue,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FormValue {
    /// Text for a text field, or the value (or label) of a `<select>`'s option.
    Text(String),
    /// Checked or not, for a checkbox, radio button or switch.
    Flag(bool),
}

/// A `fill_form` item that failed: its position and why.
#[derive(Debug)]
pub struct FormFailure {
    pub item: usize,
    pub error: BrowserError,
}

/// Where `scroll_to_element` left the element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScrolledTo {
    pub element: String,
    pub x: f64,
    pub y: f64,
    pub visible: bool,
    pub scroll_x: f64,
    pub scroll_y: f64,
}

/// Where `find_text` found the keyword.
#[derive(Debug, Clone, Deserialize)]
pub struct TextMatches {
    /// One JSON object per match (`index`, `text`, `context`, `element`, `visible`, `x`, `y`).
    pub matches: Vec<Value>,
    pub total: usize,
}

/// The common failures of a script resolving an element with `find.js`.
#[derive(Debug, Deserialize)]
struct Failure {
    error: Option<String>,
    message: Option<String>,
    count: Option<usize>,
    kind: Option<String>,
}

impl Failure {
    /// Whether waiting may help (the element may not exist yet).
    fn missing(&self) -> bool {
        matches!(self.error.as_deref(), Some("none" | "index"))
    }

    /// The error for a failure of the script acting on `what` (`check`, `select`...).
    fn into_error(self, selector: Option<&str>, index: usize, what: &str) -> BrowserError {
        let element = super::input::the_element(selector, index);
        match self.error.as_deref() {
            Some("invalid") => invalid_selector(selector.unwrap_or(""), self.message),
            Some("none" | "index") => no_element(selector, index, self.count),
            Some("kind") => BrowserError::NotActionable(format!(
                "{element} is {}, which cannot be {what}",
                self.kind
                    .unwrap_or_else(|| "another kind of element".into())
            )),
            _ => BrowserError::NotActionable(format!(
                "cannot {what} {element}: {}",
                self.message.unwrap_or_default()
            )),
        }
    }
}

/// Runs a `find.js`-based script until its element exists (at most [`ACTION_WAIT`]); answers
/// the script's value, or the failure.
async fn call_finding<T: DeserializeOwned>(
    page: &Page,
    script: &str,
    args: &[Value],
) -> Result<Result<T, Failure>, BrowserError> {
    let deadline = Instant::now() + ACTION_WAIT;
    loop {
        let value: Value = script::call(page, script, args).await?;
        let failure = value
            .get("error")
            .and_then(Value::as_str)
            .is_some()
            .then(|| serde_json::from_value::<Failure>(value.clone()))
            .transpose()
            .map_err(|e| BrowserError::Protocol(format!("unexpected script answer: {e}")))?;
        match failure {
            None => {
                return serde_json::from_value(value)
                    .map(Ok)
                    .map_err(|e| BrowserError::Protocol(format!("unexpected script answer: {e}")));
            }
            Some(failure) if failure.missing() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some(failure) => return Ok(Err(failure)),
        }
    }
}

#[derive(Deserialize)]
struct CheckState {
    kind: String,
    checked: bool,
    disabled: bool,
    x: Option<f64>,
    y: Option<f64>,
}

#[derive(Deserialize)]
struct FormKind {
    kind: String,
}

#[derive(Deserialize)]
struct FileInput {
    multiple: bool,
}

#[derive(Deserialize)]
struct Empty {}

impl BrowserService {
    /// The page's interactive elements.
    pub async fn elements(&self) -> Result<Elements, BrowserError> {
        self.bounded("listing the page's elements", |_, page| async move {
            script::call(
                &page,
                &js::ELEMENTS,
                &[json!(MAX_ELEMENTS), json!(ELEMENT_TEXT_CHARS)],
            )
            .await
        })
        .await
    }

    /// Chooses an option of the first `<select>` matching `selector`.
    pub async fn select_option(
        &self,
        selector: &str,
        choice: &OptionChoice,
    ) -> Result<ChosenOption, BrowserError> {
        self.bounded("selecting the option", |_, page| async move {
            select_on(&page, Some(selector), 0, choice).await
        })
        .await
    }

    /// Checks (`want` true) or unchecks the first checkbox, radio button or switch matching
    /// `selector`: clicks it when it is not in that state yet.
    pub async fn set_checked(&self, selector: &str, want: bool) -> Result<Checked, BrowserError> {
        self.bounded("checking the element", |_, page| async move {
            check_on(&page, Some(selector), 0, want).await
        })
        .await
    }

    /// Sets every field of a form in order, stopping at the first that fails.
    pub async fn fill_form(&self, items: &[FormItem]) -> Result<usize, FormFailure> {
        for (n, item) in items.iter().enumerate() {
            self.fill_item(item)
                .await
                .map_err(|error| FormFailure { item: n, error })?;
        }
        Ok(items.len())
    }

    async fn fill_item(&self, item: &FormItem) -> Result<(), BrowserError> {
        let selector = item.selector.as_deref();
        let index = item.index;
        let kind: FormKind = self
            .bounded("filling the form", |_, page| async move {
                call_finding::<FormKind>(&page, &js::FORM_KIND, &[json!(selector), json!(index)])
                    .await?
                    .map_err(|f| f.into_error(selector, index, "filled"))
            })
            .await?;
        match (kind.kind.as_str(), &item.value) {
            ("select", FormValue::Text(text)) => {
                self.bounded("filling the form", |_, page| async move {
                    let by_value = OptionChoice::Value(text.clone());
                    match select_on(&page, selector, index, &by_value).await {
                        Err(BrowserError::Invalid { .. }) => {
                            select_on(&page, selector, index, &OptionChoice::Label(text.clone()))
                                .await
                        }
                        other => other,
                    }
                })
                .await?;
                Ok(())
            }
            ("checkbox", FormValue::Flag(want)) => {
                let want = *want;
                self.bounded("filling the form", |_, page| async move {
                    check_on(&page, selector, index, want).await
                })
                .await?;
                Ok(())
            }
            ("checkbox", FormValue::Text(_)) => Err(BrowserError::invalid(
                "value",
                format!(
                    "{} is a checkbox: give true or false",
                    super::input::the_element(selector, index)
                ),
            )),
            ("file", _) => Err(BrowserError::invalid(
                "value",
                format!(
                    "{} is a file input: give it files with POST /v1/browser/page/upload_file",
                    super::input::the_element(selector, index)
                ),
            )),
            (_, FormValue::Text(text)) => self.fill(selector, index, text).await,
            (_, FormValue::Flag(_)) => Err(BrowserError::invalid(
                "value",
                format!(
                    "{} is not a checkbox: give text",
                    super::input::the_element(selector, index)
                ),
            )),
        }
    }

    /// Scrolls the first match of `selector` into the middle of the viewport.
    pub async fn scroll_to_element(&self, selector: &str) -> Result<ScrolledTo, BrowserError> {
        self.bounded("scrolling to the element", |_, page| async move {
            call_finding::<ScrolledTo>(&page, &js::SCROLL_INTO, &[json!(selector)])
                .await?
                .map_err(|f| f.into_error(Some(selector), 0, "scrolled to"))
        })
        .await
    }

    /// Where `keyword` occurs in the page's text.
    pub async fn find_text(&self, keyword: &str) -> Result<TextMatches, BrowserError> {
        self.bounded("finding the text", |_, page| async move {
            script::call(
                &page,
                js::FIND_TEXT,
                &[
                    json!(keyword),
                    json!(MAX_TEXT_MATCHES),
                    json!(MATCH_CONTEXT_CHARS),
                ],
            )
            .await
        })
        .await
    }

    /// Gives the first file input matching `selector` these files (paths the browser reads;
    /// the caller has confined them). The page gets `input` and `change` events.
    pub async fn upload_files(
        &self,
        selector: &str,
        files: &[PathBuf],
    ) -> Result<(), BrowserError> {
        self.bounded("giving the file input its files", |_, page| async move {
            let input = call_finding::<FileInput>(&page, &js::FILE_INPUT, &[json!(selector)])
                .await?
                .map_err(|f| f.into_error(Some(selector), 0, "given files"))?;
            if files.len() > 1 && !input.multiple {
                return Err(BrowserError::invalid(
                    "files",
                    format!(
                        "the file input matching {selector:?} takes one file (it has no \
                         `multiple` attribute); {} were given",
                        files.len()
                    ),
                ));
            }
            let group = "sandboxd-upload";
            let args = serde_json::to_string(&[selector])
                .map_err(|e| BrowserError::Protocol(e.to_string()))?;
            let expression = format!("({}).apply(null, {args})", js::FIND_ELEMENT.as_str());
            let params = EvaluateParams::builder()
                .expression(expression)
                .object_group(group)
                .return_by_value(false)
                .build()
                .map_err(BrowserError::Protocol)?;
            let result = page.execute(params).await;
            let outcome = async {
                let object = result?.result.result;
                let object_id = object.object_id.ok_or_else(|| {
                    BrowserError::NotActionable(format!(
                        "the file input matching {selector:?} went away"
                    ))
                })?;
                let files = files
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect::<Vec<_>>();
                let mut set = SetFileInputFilesParams::new(files);
                set.object_id = Some(object_id);
                page.execute(set).await?;
                Ok(())
            }
            .await;
            let _ = page.execute(ReleaseObjectGroupParams::new(group)).await;
            outcome
        })
        .await
    }
}

async fn select_on(
    page: &Page,
    selector: Option<&str>,
    index: usize,
    choice: &OptionChoice,
) -> Result<ChosenOption, BrowserError> {
    let (by, wanted) = match choice {
        OptionChoice::Value(v) => ("value", json!(v)),
        OptionChoice::Label(l) => ("label", json!(l)),
        OptionChoice::Index(i) => ("index", json!(i)),
    };
    let deadline = Instant::now() + ACTION_WAIT;
    loop {
        let value: Value = script::call(
            page,
            &js::SELECT_AT,
            &[json!(selector), json!(index), json!(by), wanted.clone()],
        )
        .await?;
        if value.get("error").is_none() {
            return serde_json::from_value(value)
                .map_err(|e| BrowserError::Protocol(format!("unexpected script answer: {e}")));
        }
        if value.get("error").and_then(Value::as_str) == Some("option") {
            let available = value.get("available").cloned().unwrap_or(json!([]));
            let field = match choice {
                OptionChoice::Value(_) => "value",
                OptionChoice::Label(_) => "label",
                OptionChoice::Index(_) => "index",
            };
            let plural = if by == "label" { "labels" } else { "values" };
            return Err(BrowserError::invalid(
                field,
                format!(
                    "{} has no option with {by} {wanted} (its options' {plural}: {available})",
                    super::input::the_element(selector, index)
                ),
            ));
        }
        let failure: Failure = serde_json::from_value(value)
            .map_err(|e| BrowserError::Protocol(format!("unexpected script answer: {e}")))?;
        if !failure.missing() || Instant::now() >= deadline {
            return Err(failure.into_error(selector, index, "given an option"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn check_on(
    page: &Page,
    selector: Option<&str>,
    index: usize,
    want: bool,
) -> Result<Checked, BrowserError> {
    let what = if want { "checked" } else { "unchecked" };
    let state = call_finding::<CheckState>(page, &js::CHECK_AT, &[json!(selector), json!(index)])
        .await?
        .map_err(|f| f.into_error(selector, index, what))?;
    let element = super::input::the_element(selector, index);
    if state.checked == want {
        return Ok(Checked {
            kind: state.kind,
            changed: false,
        });
    }
    if state.disabled {
        return Err(BrowserError::NotActionable(format!(
            "{element} is disabled"
        )));
    }
    if !want && state.kind == "radio" {
        return Err(BrowserError::NotActionable(format!(
            "{element} is a radio button, which cannot be unchecked (check another one of its group)"
        )));
    }
    match (state.x, state.y) {
        (Some(x), Some(y)) => {
            let at = Pointed {
                x,
                y,
                element: None,
            };
            mouse_move(page, x, y).await?;
            mouse(
                page,
                DispatchMouseEventType::MousePressed,
                &at,
                Button::Left,
                1,
            )
            .await?;
            mouse(
                page,
                DispatchMouseEventType::MouseReleased,
                &at,
                Button::Left,
                1,
            )
            .await?;
        }
        // Hidden or covered (a styled checkbox behind its label): click it from script.
        _ => {
            let _: Empty =
                script::call(page, &js::TOGGLE_AT, &[json!(selector), json!(index)]).await?;
        }
    }
    let after = call_finding::<CheckState>(page, &js::CHECK_AT, &[json!(selector), json!(index)])
        .await?
        .map_err(|f| f.into_error(selector, index, what))?;
    if after.checked != want {
        return Err(BrowserError::NotActionable(format!(
            "clicking {element} did not leave it {what} (the page changed it back?)"
        )));
    }
    Ok(Checked {
        kind: state.kind,
        changed: true,
    })
}
