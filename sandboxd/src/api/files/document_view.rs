//! The editor's `view` of documents (`str_replace_editor` with `page_range`, `sheet_name`,
//! `row_range` or `slide_range`, or on a .pdf, spreadsheet or .pptx file): the request checked,
//! the file opened through the confinement, its text from [`crate::files::document`].

use std::path::Path;

use axum::Json;
use axum::http::StatusCode;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::types::{
    EditorCommandName, Envelope, StrReplaceEditorRequest, StrReplaceEditorResult,
};
use crate::files::document::{self, DocumentError, DocumentKind, MAX_DOCUMENT_BYTES, Span};

/// The document fields of the request, with the kind of file each applies to.
fn document_fields(request: &StrReplaceEditorRequest) -> Vec<(&'static str, DocumentKind)> {
    [
        (
            "page_range",
            request.page_range.is_some(),
            DocumentKind::Pdf,
        ),
        (
            "sheet_name",
            request.sheet_name.is_some(),
            DocumentKind::Spreadsheet,
        ),
        (
            "row_range",
            request.row_range.is_some(),
            DocumentKind::Spreadsheet,
        ),
        (
            "slide_range",
            request.slide_range.is_some(),
            DocumentKind::Presentation,
        ),
    ]
    .into_iter()
    .filter(|(_, present, _)| *present)
    .map(|(field, _, kind)| (field, kind))
    .collect()
}

fn kind_name(kind: DocumentKind) -> &'static str {
    match kind {
        DocumentKind::Pdf => "PDF files (.pdf)",
        DocumentKind::Spreadsheet => "spreadsheets (.xlsx, .xlsm, .xlsb, .xls, .ods)",
        DocumentKind::Presentation => "presentations (.pptx)",
    }
}

fn document_error(error: DocumentError) -> ApiError {
    let message = error.to_string();
    match error {
        DocumentError::Invalid { field, .. } => ApiError::invalid(field, message),
        DocumentError::TooLarge(_) => ApiError::too_large(message),
        DocumentError::Unreadable(_) => ApiError::invalid("path", message),
        DocumentError::Timeout => ApiError::new(StatusCode::GATEWAY_TIMEOUT, message),
        DocumentError::Tool(_) => ApiError::internal(message),
    }
}

/// The answer to a `view` of a document, or `None` when the request is not one (a text file
/// without document fields goes to the text editor).
pub(super) async fn view(
    state: &AppState,
    request: &StrReplaceEditorRequest,
) -> Option<Result<Json<Envelope<StrReplaceEditorResult>>, ApiError>> {
    let fields = document_fields(request);
    let kind = DocumentKind::of(Path::new(&request.path));
    if request.command != EditorCommandName::View {
        return fields.first().map(|(field, _)| {
            Err(ApiError::invalid(
                field,
                format!("`{field}` applies to the `view` command only"),
            ))
        });
    }
    if kind.is_none() && fields.is_empty() {
        return None;
    }
    Some(view_document(state, request, kind, &fields).await)
}

async fn view_document(
    state: &AppState,
    request: &StrReplaceEditorRequest,
    kind: Option<DocumentKind>,
    fields: &[(&'static str, DocumentKind)],
) -> Result<Json<Envelope<StrReplaceEditorResult>>, ApiError> {
    for (field, wanted) in fields {
        if kind != Some(*wanted) {
            return Err(ApiError::invalid(
                field,
                format!(
                    "`{field}` applies to {}; {} is not one",
                    kind_name(*wanted),
                    request.path
                ),
            ));
        }
    }
    let Some(kind) = kind else {
        // Not reached: `view` calls this with a document kind or a field, and a field without
        // its kind was refused above.
        return Err(ApiError::invalid("path", "not a document"));
    };
    if request.view_range.is_some() {
        return Err(ApiError::invalid(
            "view_range",
            "`view_range` applies to text files; give `page_range`, `row_range` or \
             `slide_range` for a document",
        ));
    }
    let pages = Span::parse("page_range", request.page_range.as_deref()).map_err(document_error)?;
    let rows = Span::parse("row_range", request.row_range.as_deref()).map_err(document_error)?;
    let slides =
        Span::parse("slide_range", request.slide_range.as_deref()).map_err(document_error)?;
    let files = state.files.clone();
    let path = request.path.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let download = files
            .open_download(path.as_ref())
            .map_err(crate::api::files::file_error)?;
        if download.size > MAX_DOCUMENT_BYTES {
            return Err(ApiError::too_large(format!(
                "{} is {} bytes; documents of at most {MAX_DOCUMENT_BYTES} bytes are viewed",
                download.path.display(),
                download.size
            )));
        }
        Ok(download)
    })
    .await
    .map_err(|e| ApiError::internal(format!("opening the document: {e}")))??;
    let shown = opened.path.to_string_lossy().into_owned();
    let output = match kind {
        DocumentKind::Pdf => {
            let identity = state
                .shell
                .agent_identity()
                .map_err(|e| ApiError::internal(e.to_string()))?;
            document::pdf_pages(opened.file, pages, identity.as_ref())
                .await
                .map_err(document_error)?
        }
        DocumentKind::Spreadsheet | DocumentKind::Presentation => {
            let sheet = request.sheet_name.clone();
            tokio::task::spawn_blocking(move || {
                use std::io::Read;
                let mut bytes = Vec::new();
                opened
                    .file
                    .take(MAX_DOCUMENT_BYTES)
                    .read_to_end(&mut bytes)
                    .map_err(|e| DocumentError::Unreadable(format!("reading the file: {e}")))?;
                if kind == DocumentKind::Spreadsheet {
                    document::spreadsheet_rows(bytes, sheet.as_deref(), rows)
                } else {
                    document::presentation_slides(bytes, slides)
                }
            })
            .await
            .map_err(|e| ApiError::internal(format!("reading the document: {e}")))?
            .map_err(document_error)?
        }
    };
    Ok(Json(Envelope::ok(StrReplaceEditorResult {
        output,
        path: shown,
        prev_exist: true,
        error: None,
        old_content: None,
        new_content: None,
        metadata: None,
    })))
}
