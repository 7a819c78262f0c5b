//! Elements and forms on the page (`/v1/browser/page/*`): the indexed interactive elements,
//! `select_option`, `check` / `uncheck`, `fill_form`, `find_text`, `scroll_to_element` and
//! `upload_file`. See [`crate::browser::forms`].
//!
//! Files (uploads, exports) are confined to the allowed file roots like the file API's. An
//! upload's paths are checked here (resolved beneath a root, symlinks followed, a regular file)
//! and handed to Chromium as resolved, symlink-free paths; Chromium opens them itself later, so a
//! symlink swapped into that path in between would be followed (the same process user either
//! way: the agent could read the file anyway, this only widens what a page upload can send).

use std::ffi::OsStr;
use std::path::PathBuf;

use axum::Json;
use axum::extract::State;
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{MAX_MATCH_INDEX, done, typed_text};
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{
    CheckResult, Envelope, ErrorBody, FillFormRequest, FindTextRequest, ScrolledToElement,
    SelectOptionRequest, SelectedOption, SelectorRequest, UploadFileRequest,
};
use crate::api::{AppState, files, validate};
use crate::browser::forms::{FormItem, FormValue, MAX_FORM_ITEMS, MAX_UPLOAD_FILES, OptionChoice};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(elements))
        .routes(routes!(select_option))
        .routes(routes!(check))
        .routes(routes!(uncheck))
        .routes(routes!(fill_form))
        .routes(routes!(find_text))
        .routes(routes!(scroll_to_element))
        .routes(routes!(upload_file))
}

/// The interactive elements of the active tab (visible links, buttons, form fields, editable
/// and ARIA-interactive elements, in document order), at most 500. Each one's `index` is what
/// `click` and `fill` accept without a `selector`; `message` says how many there are in all.
#[utoipa::path(get, path = "/v1/browser/page/elements", tag = "browser-page",
    responses((status = 200, body = Envelope<Vec<Object>>)))]
pub async fn elements(
    State(state): State<AppState>,
) -> Result<Json<Envelope<Vec<Value>>>, ApiError> {
    let found = state.browser.elements().await?;
    let mut envelope = Envelope::ok(found.elements);
    envelope.message = format!("{} interactive elements", found.total);
    if found.total > crate::browser::forms::MAX_ELEMENTS {
        envelope.message.push_str(&format!(
            " (the first {} are listed)",
            crate::browser::forms::MAX_ELEMENTS
        ));
    }
    Ok(Json(envelope))
}

fn selector_field(selector: &str) -> Result<&str, ApiError> {
    let selector = selector.trim();
    if selector.is_empty() {
        return Err(ApiError::invalid(
            "selector",
            "`selector` must not be empty",
        ));
    }
    Ok(selector)
}

/// Chooses an option of a `<select>` by `value`, `label` or `index` (one of them), firing
/// `input` and `change`.
#[utoipa::path(post, path = "/v1/browser/page/select_option", tag = "browser-page",
    request_body = SelectOptionRequest,
    responses(
        (status = 200, body = Envelope<SelectedOption>),
        (status = 404, description = "no element matches the selector", body = ErrorBody),
        (status = 409, description = "the element is not a select, or is disabled", body = ErrorBody),
        (status = 422, description = "no such option, or none or several of value/label/index", body = ErrorBody),
    ))]
pub async fn select_option(
    State(state): State<AppState>,
    AioJson(request): AioJson<SelectOptionRequest>,
) -> Result<Json<Envelope<SelectedOption>>, ApiError> {
    let selector = selector_field(&request.selector)?;
    let choice = match (&request.value, &request.label, request.index) {
        (Some(value), None, None) => OptionChoice::Value(value.clone()),
        (None, Some(label), None) => OptionChoice::Label(label.clone()),
        (None, None, Some(_)) => OptionChoice::Index(validate::whole_number(
            "index",
            request.index,
            0,
            0..=MAX_MATCH_INDEX,
        )? as usize),
        (None, None, None) => {
            return Err(ApiError::invalid(
                "value",
                "give the option's `value`, `label` or `index`",
            ));
        }
        _ => {
            return Err(ApiError::invalid(
                "value",
                "give only one of `value`, `label` and `index`",
            ));
        }
    };
    let chosen = state.browser.select_option(selector, &choice).await?;
    Ok(Json(Envelope::ok(SelectedOption {
        value: chosen.value,
        label: chosen.label,
        index: chosen.index,
    })))
}

async fn set_checked(
    state: &AppState,
    request: &SelectorRequest,
    want: bool,
) -> Result<Json<Envelope<CheckResult>>, ApiError> {
    let selector = selector_field(&request.selector)?;
    let done = state.browser.set_checked(selector, want).await?;
    let mut envelope = Envelope::ok(CheckResult {
        kind: done.kind,
        changed: done.changed,
        checked: want,
    });
    if !done.changed {
        envelope.message = format!(
            "{selector} was already {}",
            if want { "checked" } else { "unchecked" }
        );
    }
    Ok(Json(envelope))
}

/// Checks a checkbox, radio button or switch (clicks it unless it is checked already).
#[utoipa::path(post, path = "/v1/browser/page/check", tag = "browser-page",
    request_body = SelectorRequest,
    responses(
        (status = 200, body = Envelope<CheckResult>),
        (status = 404, description = "no element matches the selector", body = ErrorBody),
        (status = 409, description = "not a checkbox, disabled, or it did not change", body = ErrorBody),
        (status = 422, description = "`selector` is missing or invalid", body = ErrorBody),
    ))]
pub async fn check(
    State(state): State<AppState>,
    AioJson(request): AioJson<SelectorRequest>,
) -> Result<Json<Envelope<CheckResult>>, ApiError> {
    set_checked(&state, &request, true).await
}

/// Unchecks a checkbox or switch (clicks it unless it is unchecked already).
#[utoipa::path(post, path = "/v1/browser/page/uncheck", tag = "browser-page",
    request_body = SelectorRequest,
    responses(
        (status = 200, body = Envelope<CheckResult>),
        (status = 404, description = "no element matches the selector", body = ErrorBody),
        (status = 409, description = "not a checkbox, a radio button, disabled, or it did not change", body = ErrorBody),
        (status = 422, description = "`selector` is missing or invalid", body = ErrorBody),
    ))]
pub async fn uncheck(
    State(state): State<AppState>,
    AioJson(request): AioJson<SelectorRequest>,
) -> Result<Json<Envelope<CheckResult>>, ApiError> {
    set_checked(&state, &request, false).await
}

fn item_loc(item: usize, field: &str) -> Vec<String> {
    vec![
        "body".into(),
        "items".into(),
        item.to_string(),
        field.to_string(),
    ]
}

/// Reads one `fill_form` item: `{"selector" | "index", "value" | "text" | "checked"}`.
fn form_item(n: usize, item: &Value) -> Result<FormItem, ApiError> {
    let object = item.as_object().ok_or_else(|| {
        ApiError::invalid_at(
            vec!["body".into(), "items".into(), n.to_string()],
            format!("items[{n}] must be an object with `selector` and `value`"),
        )
    })?;
    let selector = match object.get("selector") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Some(_) => {
            return Err(ApiError::invalid_at(
                item_loc(n, "selector"),
                format!("items[{n}].selector must be a non-empty CSS selector"),
            ));
        }
    };
    let index = match object.get("index") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|i| *i <= MAX_MATCH_INDEX as u64)
                .ok_or_else(|| {
                    ApiError::invalid_at(
                        item_loc(n, "index"),
                        format!(
                            "items[{n}].index must be a whole number from 0 to {MAX_MATCH_INDEX}"
                        ),
                    )
                })? as usize,
        ),
    };
    if selector.is_none() && index.is_none() {
        return Err(ApiError::invalid_at(
            item_loc(n, "selector"),
            format!(
                "items[{n}] needs a `selector` (or an `index` from GET /v1/browser/page/elements)"
            ),
        ));
    }
    let raw = ["value", "text", "checked"]
        .iter()
        .find_map(|k| object.get(*k).filter(|v| !v.is_null()));
    let value = match raw {
        Some(Value::Bool(b)) => FormValue::Flag(*b),
        Some(Value::String(s)) => FormValue::Text(
            typed_text("value", s)
                .map_err(|e| {
                    ApiError::invalid_at(item_loc(n, "value"), format!("items[{n}]: {}", e.message))
                })?
                .to_string(),
        ),
        Some(Value::Number(x)) => FormValue::Text(x.to_string()),
        _ => {
            return Err(ApiError::invalid_at(
                item_loc(n, "value"),
                format!("items[{n}].value must be text, a number, or true/false for a checkbox"),
            ));
        }
    };
    Ok(FormItem {
        selector,
        index: index.unwrap_or(0),
        value,
    })
}

/// Sets several fields in order: text fields are filled, `<select>`s get the option with that
/// value (or label), checkboxes and radio buttons are checked or unchecked. Stops at the first
/// field that fails, naming it (`items[2]`); the fields before it stay set.
#[utoipa::path(post, path = "/v1/browser/page/fill_form", tag = "browser-page",
    request_body = FillFormRequest,
    responses(
        (status = 200, body = Envelope<Object>),
        (status = 404, description = "an item's selector matches nothing", body = ErrorBody),
        (status = 409, description = "an item's element cannot take its value", body = ErrorBody),
        (status = 422, description = "an item is malformed", body = ErrorBody),
    ))]
pub async fn fill_form(
    State(state): State<AppState>,
    AioJson(request): AioJson<FillFormRequest>,
) -> Result<Json<Envelope<()>>, ApiError> {
    if request.items.is_empty() {
        return Err(ApiError::invalid(
            "items",
            "`items` must list at least one field",
        ));
    }
    if request.items.len() > MAX_FORM_ITEMS {
        return Err(ApiError::invalid(
            "items",
            format!(
                "`items` lists {} fields; at most {MAX_FORM_ITEMS} are accepted",
                request.items.len()
            ),
        ));
    }
    let items = request
        .items
        .iter()
        .enumerate()
        .map(|(n, item)| form_item(n, item))
        .collect::<Result<Vec<_>, _>>()?;
    match state.browser.fill_form(&items).await {
        Ok(count) => Ok(done(format!("set {count} fields"))),
        Err(failure) => {
            let n = failure.item;
            let mut error = ApiError::from(failure.error);
            if let Some(loc) = error.loc.as_mut() {
                *loc = item_loc(n, loc.last().map_or("value", String::as_str));
            }
            error.message = format!("items[{n}]: {}", error.message);
            Err(error)
        }
    }
}

/// Where a text occurs in the page (case-insensitively): each match with its context, element,
/// visibility and position (at most 100; `message` gives the total).
#[utoipa::path(post, path = "/v1/browser/page/find_text", tag = "browser-page",
    request_body = FindTextRequest,
    responses(
        (status = 200, body = Envelope<Vec<Object>>),
        (status = 422, description = "`keyword` is empty or too long", body = ErrorBody),
    ))]
pub async fn find_text(
    State(state): State<AppState>,
    AioJson(request): AioJson<FindTextRequest>,
) -> Result<Json<Envelope<Vec<Value>>>, ApiError> {
    validate::not_blank("keyword", &request.keyword)?;
    let keyword = validate::at_most_chars("keyword", &request.keyword, 1000)?;
    let found = state.browser.find_text(keyword).await?;
    let mut envelope = Envelope::ok(found.matches);
    envelope.message = format!("{} matches of {keyword:?}", found.total);
    Ok(Json(envelope))
}

/// Scrolls the first match of `selector` into the middle of the viewport.
#[utoipa::path(post, path = "/v1/browser/page/scroll_to_element", tag = "browser-page",
    request_body = SelectorRequest,
    responses(
        (status = 200, body = Envelope<ScrolledToElement>),
        (status = 404, description = "no element matches the selector", body = ErrorBody),
        (status = 422, description = "`selector` is missing or invalid", body = ErrorBody),
    ))]
pub async fn scroll_to_element(
    State(state): State<AppState>,
    AioJson(request): AioJson<SelectorRequest>,
) -> Result<Json<Envelope<ScrolledToElement>>, ApiError> {
    let selector = selector_field(&request.selector)?;
    let at = state.browser.scroll_to_element(selector).await?;
    Ok(Json(Envelope::ok(ScrolledToElement {
        element: at.element,
        x: at.x,
        y: at.y,
        visible: at.visible,
        scroll_x: at.scroll_x,
        scroll_y: at.scroll_y,
    })))
}

/// Gives a file input files from the sandbox (paths inside the allowed file roots); the page
/// gets `input` and `change` events, as when a person picks files.
#[utoipa::path(post, path = "/v1/browser/page/upload_file", tag = "browser-page",
    request_body = UploadFileRequest,
    responses(
        (status = 200, body = Envelope<Object>),
        (status = 403, description = "a path is outside the allowed file roots", body = ErrorBody),
        (status = 404, description = "no element matches the selector, or a file does not exist", body = ErrorBody),
        (status = 409, description = "the element is not an enabled file input", body = ErrorBody),
        (status = 422, description = "`files` is empty, or several files for a single-file input", body = ErrorBody),
    ))]
pub async fn upload_file(
    State(state): State<AppState>,
    AioJson(request): AioJson<UploadFileRequest>,
) -> Result<Json<Envelope<()>>, ApiError> {
    let selector = selector_field(&request.selector)?.to_string();
    if request.files.is_empty() {
        return Err(ApiError::invalid(
            "files",
            "`files` must list at least one path",
        ));
    }
    if request.files.len() > MAX_UPLOAD_FILES {
        return Err(ApiError::invalid(
            "files",
            format!(
                "`files` lists {} paths; at most {MAX_UPLOAD_FILES} are accepted",
                request.files.len()
            ),
        ));
    }
    let mut paths: Vec<PathBuf> = Vec::with_capacity(request.files.len());
    for (n, raw) in request.files.iter().enumerate() {
        let raw = raw.clone();
        let real = files::run(&state, move |files| {
            let resolved = files.confinement().resolve(OsStr::new(&raw))?;
            files.open_regular(&resolved)?;
            Ok(resolved.real)
        })
        .await
        .map_err(|mut e| {
            e.message = format!("files[{n}]: {}", e.message);
            if e.loc.is_some() {
                e.loc = Some(vec!["body".into(), "files".into(), n.to_string()]);
            }
            e
        })?;
        paths.push(real);
    }
    state.browser.upload_files(&selector, &paths).await?;
    Ok(done(format!("gave {selector} {} files", paths.len())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn form_items_are_read_and_bad_ones_named() {
        let item = form_item(0, &json!({"selector": " #a ", "value": "x"})).unwrap();
        assert_eq!(item.selector.as_deref(), Some("#a"));
        assert_eq!(item.value, FormValue::Text("x".into()));
        let item = form_item(0, &json!({"index": 3, "checked": true})).unwrap();
        assert_eq!((item.selector, item.index), (None, 3));
        assert_eq!(item.value, FormValue::Flag(true));
        let item = form_item(0, &json!({"selector": "#n", "text": 42})).unwrap();
        assert_eq!(item.value, FormValue::Text("42".into()));
        for (bad, field) in [
            (json!({"value": "x"}), "selector"),
            (json!({"selector": "#a"}), "value"),
            (json!({"selector": "#a", "value": [1]}), "value"),
            (json!({"selector": 5, "value": "x"}), "selector"),
            (json!({"index": -1, "value": "x"}), "index"),
        ] {
            let error = form_item(2, &bad).unwrap_err();
            assert_eq!(error.loc.unwrap(), item_loc(2, field), "{bad}");
            assert!(error.message.contains("items[2]"), "{}", error.message);
        }
        assert!(form_item(1, &json!("x")).is_err());
    }
}
