//! `/v1/browser/page/dialog`: the JavaScript dialog open in the active tab, and answering it
//! (see [`crate::browser::dialog`] for how dialogs are seen and the default policy).

use axum::Json;
use axum::extract::State;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{DialogAnswerRequest, DialogInfo, Envelope, ErrorBody};
use crate::api::validate;
use crate::browser::OpenDialog;
use crate::browser::dialog::{DialogPolicy, GRACE};

/// Characters a prompt's answer may have.
const MAX_PROMPT_TEXT_CHARS: usize = 10_000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(open_dialog, answer_dialog))
}

/// The wire form of an open dialog.
pub(super) fn dialog_info(dialog: &OpenDialog) -> DialogInfo {
    DialogInfo {
        kind: dialog.kind.to_string(),
        message: dialog.message.clone(),
        default_prompt: dialog.default_prompt.clone(),
        url: dialog.url.clone(),
        opened_at_ms: dialog.opened_at_ms,
        default_action: if DialogPolicy::accepts(dialog.kind) {
            "accept"
        } else {
            "dismiss"
        }
        .to_string(),
        default_action_at_ms: dialog.opened_at_ms + GRACE.as_millis() as u64,
    }
}

/// The JavaScript dialog (`alert`, `confirm`, `prompt`, `beforeunload`) open in the active tab;
/// `data` is null when there is none. While one is open, page calls on the tab answer 409
/// naming it; nobody answering it for 3 s, the default policy does: an alert or a
/// `beforeunload` is accepted, a confirm or a prompt dismissed.
#[utoipa::path(get, path = "/v1/browser/page/dialog", tag = "browser-page",
    responses(
        (status = 200, description = "`data` is null when no dialog is open", body = Envelope<Option<DialogInfo>>),
        (status = 503, description = "the browser is not running", body = ErrorBody),
    ))]
pub async fn open_dialog(
    State(state): State<AppState>,
) -> Result<Json<Envelope<Option<DialogInfo>>>, ApiError> {
    let open = state.browser.open_dialog().await?;
    let mut envelope = Envelope::ok(open.as_ref().map(dialog_info));
    if open.is_none() {
        envelope.message = "no JavaScript dialog is open in the active tab".to_string();
    }
    Ok(Json(envelope))
}

/// Answers the active tab's JavaScript dialog: `accept` presses OK (with `prompt_text` as a
/// prompt's answer), `false` presses Cancel. Answers the dialog it closed.
#[utoipa::path(post, path = "/v1/browser/page/dialog", tag = "browser-page",
    request_body = DialogAnswerRequest,
    responses(
        (status = 200, body = Envelope<DialogInfo>),
        (status = 409, description = "no dialog is open in the active tab", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 503, description = "the browser is not running", body = ErrorBody),
    ))]
pub async fn answer_dialog(
    State(state): State<AppState>,
    AioJson(request): AioJson<DialogAnswerRequest>,
) -> Result<Json<Envelope<DialogInfo>>, ApiError> {
    let prompt_text = request
        .prompt_text
        .as_deref()
        .map(|text| validate::at_most_chars("prompt_text", text, MAX_PROMPT_TEXT_CHARS))
        .transpose()?;
    let answered = state
        .browser
        .answer_dialog(request.accept, prompt_text)
        .await?;
    let mut envelope = Envelope::ok(dialog_info(&answered));
    envelope.message = format!(
        "{} the {}",
        if request.accept {
            "accepted"
        } else {
            "dismissed"
        },
        answered.kind
    );
    Ok(Json(envelope))
}
