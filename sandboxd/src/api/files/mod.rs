//! `/v1/file/*`: AIO Sandbox's file API over [`crate::files`]: read, write, replace, search,
//! find, grep, glob, list, str_replace_editor, upload (multipart) and download (raw bytes).
//!
//! Every path goes through the confinement of [`crate::files::confine`]: a path outside the
//! allowed roots is a 403 naming the path and the reason, and nothing is touched. Content past a
//! size limit is a 413 naming the setting that sets it. File-system work runs on blocking
//! threads.

pub mod document_view;
pub mod watch;

use std::ffi::OsStr;
use std::path::Path;

use agentbox_http::timestamp::rfc3339;
use axum::Json;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use tokio::io::AsyncReadExt;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{AioJson, AioQuery, parse_json};
use super::types::{
    EditorCommandName, EditorMetadata, EditorReplaceMode, Envelope, ErrorBody, FileContentEncoding,
    FileDownloadQuery, FileFindRequest, FileFindResult, FileGlobRequest, FileGlobResult,
    FileGrepRequest, FileGrepResult, FileInfo, FileListRequest, FileListResult, FileReadEncoding,
    FileReadRequest, FileReadResult, FileReplaceRequest, FileReplaceResult, FileSearchRequest,
    FileSearchResult, FileUploadForm, FileUploadResult, FileWriteRequest, FileWriteResult,
    GlobFileInfo, GlobSortBy, GrepMatch, ListSortBy, StrReplaceEditorRequest,
    StrReplaceEditorResult,
};
use super::{AppState, DEFAULT_BODY_LIMIT};
use crate::files::content::{ReadEncoding, ReadRequest, WriteEncoding, WriteRequest};
use crate::files::editor::{EditorCommand, ReplaceMode};
use crate::files::grep::GrepRequest;
use crate::files::listing::{GlobRequest, GlobSort, ListRequest, ListSort};
use crate::files::transfer::Upload;
use crate::files::{ConfineError, FileError, Files, Kind, LimitKind, Limits};

/// AIO's defaults.
const DEFAULT_GREP_RESULTS: usize = 500;
const DEFAULT_GREP_FILE_SIZE: u64 = 1 << 20;
const DEFAULT_GLOB_RESULTS: usize = 5_000;
/// Upload chunks are gathered up to this size before each write to disk.
const UPLOAD_BATCH: usize = 1 << 20;
/// The longest `path` form field of an upload.
const MAX_UPLOAD_PATH_FIELD: usize = 16 * 1024;

/// The file service described by the settings.
pub fn routes() -> OpenApiRouter<AppState> {
    // Uploads are bounded by SANDBOXD_MAX_UPLOAD_BYTES as they stream, not by the JSON limit.
    let upload = OpenApiRouter::new()
        .routes(routes!(upload))
        .layer(DefaultBodyLimit::disable());
    OpenApiRouter::new()
        .routes(routes!(read))
        .routes(routes!(write))
        .routes(routes!(replace))
        .routes(routes!(search))
        .routes(routes!(find))
        .routes(routes!(grep))
        .routes(routes!(glob))
        .routes(routes!(list))
        .routes(routes!(str_replace_editor))
        .routes(routes!(download))
        .merge(upload)
        .merge(watch::routes())
}

/// Reads a file, whole or lines `start_line..end_line` (0-based, end exclusive; negative
/// numbers count from the end, as a Python slice), as UTF-8 text or (Agentbox extension,
/// `"encoding": "base64"`) base64. `sudo: true` is refused: sandboxd runs unprivileged.
#[utoipa::path(post, path = "/v1/file/read", tag = "file", request_body = FileReadRequest,
    responses(
        (status = 200, body = Envelope<FileReadResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such file", body = ErrorBody),
        (status = 413, description = "over SANDBOXD_MAX_READ_BYTES", body = ErrorBody),
        (status = 422, description = "bad field, or not UTF-8 text", body = ErrorBody),
    ))]
pub async fn read(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileReadRequest>,
) -> Result<Json<Envelope<FileReadResult>>, ApiError> {
    refuse_sudo(request.sudo)?;
    let encoding = request.encoding.unwrap_or_default();
    let outcome = run(&state, move |files| {
        files.read(&ReadRequest {
            path: OsStr::new(&request.file),
            start_line: request.start_line,
            end_line: request.end_line,
            encoding: match encoding {
                FileReadEncoding::Utf8 => ReadEncoding::Utf8,
                FileReadEncoding::Base64 => ReadEncoding::Base64,
            },
        })
    })
    .await?;
    Ok(Json(Envelope::ok(FileReadResult {
        content: outcome.content,
        file: shown(&outcome.path),
        encoding,
    })))
}

/// Writes a file (text, base64 or raw; replace or append), creating missing parent
/// directories inside the allowed roots.
#[utoipa::path(post, path = "/v1/file/write", tag = "file", request_body = FileWriteRequest,
    responses(
        (status = 200, body = Envelope<FileWriteResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 413, description = "over SANDBOXD_MAX_WRITE_BYTES", body = ErrorBody),
        (status = 422, description = "bad field", body = ErrorBody),
    ))]
pub async fn write(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Envelope<FileWriteResult>>, ApiError> {
    let request: FileWriteRequest =
        read_json(request, write_body_limit(state.files.limits())).await?;
    write_file(&state, request).await
}

/// The body of `POST /v1/file/write` once parsed; shared with the MCP `file_write` tool.
pub async fn write_file(
    state: &AppState,
    request: FileWriteRequest,
) -> Result<Json<Envelope<FileWriteResult>>, ApiError> {
    refuse_sudo(request.sudo)?;
    let outcome = run(state, move |files| {
        files.write(&WriteRequest {
            path: OsStr::new(&request.file),
            content: &request.content,
            encoding: match request.encoding.unwrap_or_default() {
                FileContentEncoding::Utf8 => WriteEncoding::Utf8,
                FileContentEncoding::Base64 => WriteEncoding::Base64,
                FileContentEncoding::Raw => WriteEncoding::Raw,
            },
            append: request.append.unwrap_or(false),
            leading_newline: request.leading_newline.unwrap_or(false),
            trailing_newline: request.trailing_newline.unwrap_or(false),
        })
    })
    .await?;
    Ok(Json(Envelope::ok(FileWriteResult {
        file: shown(&outcome.path),
        bytes_written: outcome.bytes_written,
    })))
}

/// Replaces every occurrence of `old_str` with `new_str`; `replaced_count` 0 leaves the file
/// as it was.
#[utoipa::path(post, path = "/v1/file/replace", tag = "file", request_body = FileReplaceRequest,
    responses(
        (status = 200, body = Envelope<FileReplaceResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such file", body = ErrorBody),
        (status = 413, description = "over a size limit", body = ErrorBody),
        (status = 422, description = "bad field", body = ErrorBody),
    ))]
pub async fn replace(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileReplaceRequest>,
) -> Result<Json<Envelope<FileReplaceResult>>, ApiError> {
    refuse_sudo(request.sudo)?;
    let outcome = run(&state, move |files| {
        files.replace(
            OsStr::new(&request.file),
            &request.old_str,
            &request.new_str,
        )
    })
    .await?;
    Ok(Json(Envelope::ok(FileReplaceResult {
        file: shown(&outcome.path),
        replaced_count: outcome.replaced_count,
    })))
}

/// The lines of one file matching a regex; line numbers are 0-based.
#[utoipa::path(post, path = "/v1/file/search", tag = "file", request_body = FileSearchRequest,
    responses(
        (status = 200, body = Envelope<FileSearchResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such file", body = ErrorBody),
        (status = 413, description = "over SANDBOXD_MAX_READ_BYTES", body = ErrorBody),
        (status = 422, description = "bad field or regex", body = ErrorBody),
    ))]
pub async fn search(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileSearchRequest>,
) -> Result<Json<Envelope<FileSearchResult>>, ApiError> {
    refuse_sudo(request.sudo)?;
    let outcome = run(&state, move |files| {
        files.search(OsStr::new(&request.file), &request.regex)
    })
    .await?;
    Ok(Json(Envelope::ok(FileSearchResult {
        file: shown(&outcome.path),
        matches: outcome.matches,
        line_numbers: outcome.line_numbers,
        truncated: outcome.truncated,
    })))
}

/// Files below `path` whose name matches `glob`.
#[utoipa::path(post, path = "/v1/file/find", tag = "file", request_body = FileFindRequest,
    responses(
        (status = 200, body = Envelope<FileFindResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such directory", body = ErrorBody),
        (status = 422, description = "bad field or glob", body = ErrorBody),
    ))]
pub async fn find(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileFindRequest>,
) -> Result<Json<Envelope<FileFindResult>>, ApiError> {
    let outcome = run(&state, move |files| {
        files.find(OsStr::new(&request.path), &request.glob)
    })
    .await?;
    Ok(Json(Envelope::ok(FileFindResult {
        path: shown(&outcome.path),
        files: outcome.files.iter().map(|p| shown(p)).collect(),
        truncated: outcome.truncated,
    })))
}

/// Regex or fixed-string search across files, ripgrep style: hidden and binary files skipped,
/// symlinks not followed, 1-based line numbers, optional context lines.
#[utoipa::path(post, path = "/v1/file/grep", tag = "file", request_body = FileGrepRequest,
    responses(
        (status = 200, body = Envelope<FileGrepResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such path", body = ErrorBody),
        (status = 422, description = "bad field or pattern", body = ErrorBody),
    ))]
pub async fn grep(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileGrepRequest>,
) -> Result<Json<Envelope<FileGrepResult>>, ApiError> {
    let max_file_size = match request.max_file_size.as_deref() {
        None => DEFAULT_GREP_FILE_SIZE,
        Some(text) => crate::files::size::parse_byte_size(text).ok_or_else(|| {
            ApiError::invalid(
                "max_file_size",
                format!("max_file_size {text:?} is not a size such as 1M, 500K or 1048576"),
            )
        })?,
    };
    let outcome = run(&state, move |files| {
        files.grep(&GrepRequest {
            path: OsStr::new(&request.path),
            pattern: &request.pattern,
            include: request.include.clone().unwrap_or_default(),
            exclude: request.exclude.clone().unwrap_or_default(),
            case_insensitive: request.case_insensitive.unwrap_or(false),
            fixed_strings: request.fixed_strings.unwrap_or(false),
            context_before: to_usize(request.context_before.unwrap_or(0)),
            context_after: to_usize(request.context_after.unwrap_or(0)),
            max_results: request.max_results.map_or(DEFAULT_GREP_RESULTS, to_usize),
            max_file_size,
            multiline: request.multiline.unwrap_or(false),
            offset: to_usize(request.offset.unwrap_or(0)),
            file_type: request.file_type.as_deref(),
            recursive: request.recursive.unwrap_or(true),
        })
    })
    .await?;
    Ok(Json(Envelope::ok(FileGrepResult {
        path: shown(&outcome.path),
        pattern: outcome.pattern,
        match_count: outcome.matches.len() as u64,
        matches: outcome
            .matches
            .into_iter()
            .map(|m| GrepMatch {
                file: shown(&m.file),
                line_number: m.line_number,
                line_content: m.line_content,
                context_before: m.context_before,
                context_after: m.context_after,
            })
            .collect(),
        files_searched: outcome.files_searched as u64,
        files_matched: outcome.files_matched as u64,
        truncated: outcome.truncated,
    })))
}

/// Paths below `path` matching a glob, with size and modification time.
#[utoipa::path(post, path = "/v1/file/glob", tag = "file", request_body = FileGlobRequest,
    responses(
        (status = 200, body = Envelope<FileGlobResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such directory", body = ErrorBody),
        (status = 422, description = "bad field or glob", body = ErrorBody),
    ))]
pub async fn glob(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileGlobRequest>,
) -> Result<Json<Envelope<FileGlobResult>>, ApiError> {
    let with_metadata = request.include_metadata.unwrap_or(true);
    let outcome = run(&state, move |files| {
        files.glob(&GlobRequest {
            path: OsStr::new(&request.path),
            pattern: &request.pattern,
            exclude: request.exclude.clone().unwrap_or_default(),
            include_hidden: request.include_hidden.unwrap_or(false),
            files_only: request.files_only.unwrap_or(true),
            max_results: request.max_results.map_or(DEFAULT_GLOB_RESULTS, to_usize),
            sort_by: match request.sort_by.unwrap_or_default() {
                GlobSortBy::Path => GlobSort::Path,
                GlobSortBy::Name => GlobSort::Name,
                GlobSortBy::Size => GlobSort::Size,
                GlobSortBy::Modified => GlobSort::Modified,
            },
            sort_desc: request.sort_desc.unwrap_or(false),
        })
    })
    .await?;
    Ok(Json(Envelope::ok(FileGlobResult {
        path: shown(&outcome.path),
        pattern: outcome.pattern,
        files: outcome
            .entries
            .into_iter()
            .map(|e| GlobFileInfo {
                path: shown(&e.path),
                name: e.name,
                is_directory: e.meta.kind == Kind::Directory,
                size: with_metadata.then_some(e.meta.size),
                modified_time: with_metadata
                    .then(|| e.meta.modified.map(rfc3339))
                    .flatten(),
            })
            .collect(),
        total_count: outcome.total_count as u64,
        truncated: outcome.truncated,
    })))
}

/// A directory's entries, optionally recursive. Symlinks are listed, never followed.
#[utoipa::path(post, path = "/v1/file/list", tag = "file", request_body = FileListRequest,
    responses(
        (status = 200, body = Envelope<FileListResult>),
        (status = 400, description = "not a directory", body = ErrorBody),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such directory", body = ErrorBody),
        (status = 422, description = "bad field", body = ErrorBody),
    ))]
pub async fn list(
    State(state): State<AppState>,
    AioJson(request): AioJson<FileListRequest>,
) -> Result<Json<Envelope<FileListResult>>, ApiError> {
    let include_size = request.include_size.unwrap_or(true);
    let include_permissions = request.include_permissions.unwrap_or(false);
    let outcome = run(&state, move |files| {
        files.list(&ListRequest {
            path: OsStr::new(&request.path),
            recursive: request.recursive.unwrap_or(false),
            show_hidden: request.show_hidden.unwrap_or(true),
            file_types: request.file_types.clone(),
            max_depth: request.max_depth.map(to_usize),
            sort_by: match request.sort_by.unwrap_or_default() {
                ListSortBy::Name => ListSort::Name,
                ListSortBy::Size => ListSort::Size,
                ListSortBy::Modified => ListSort::Modified,
                ListSortBy::Type => ListSort::Type,
            },
            sort_desc: request.sort_desc.unwrap_or(false),
        })
    })
    .await?;
    Ok(Json(Envelope::ok(FileListResult {
        path: shown(&outcome.path),
        total_count: outcome.entries.len() as u64,
        directory_count: outcome.directory_count as u64,
        file_count: outcome.file_count as u64,
        files: outcome
            .entries
            .into_iter()
            .map(|e| FileInfo {
                is_directory: e.meta.kind == Kind::Directory,
                is_symlink: e.meta.kind == Kind::Symlink,
                size: (include_size && e.meta.kind != Kind::Directory).then_some(e.meta.size),
                modified_time: e.meta.modified.map(rfc3339),
                permissions: include_permissions.then(|| e.meta.permissions_text()),
                extension: e.extension,
                name: e.name,
                path: shown(&e.path),
            })
            .collect(),
        truncated: outcome.truncated,
    })))
}

/// Anthropic's text editor tool: `view`, `create`, `str_replace`, `insert`, `undo_edit`.
/// Tool errors (old_str missing or not unique, file exists, no history) are 4xx answers whose
/// message is written for the model. `view` also reads documents as text: a PDF's pages
/// (`page_range`), a spreadsheet's rows (`sheet_name`, `row_range`: .xlsx, .xlsm, .xlsb, .xls,
/// .ods) and a presentation's slides (`slide_range`: .pptx).
#[utoipa::path(post, path = "/v1/file/str_replace_editor", tag = "file",
    request_body = StrReplaceEditorRequest,
    responses(
        (status = 200, body = Envelope<StrReplaceEditorResult>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such file", body = ErrorBody),
        (status = 409, description = "create over an existing file, or nothing to undo", body = ErrorBody),
        (status = 413, description = "over a size limit", body = ErrorBody),
        (status = 422, description = "bad or missing field, a document field on a file of another kind, or a document that cannot be read", body = ErrorBody),
        (status = 504, description = "reading the document took too long", body = ErrorBody),
    ))]
pub async fn str_replace_editor(
    State(state): State<AppState>,
    AioJson(request): AioJson<StrReplaceEditorRequest>,
) -> Result<Json<Envelope<StrReplaceEditorResult>>, ApiError> {
    if let Some(answer) = document_view::view(&state, &request).await {
        return answer;
    }
    let required = |value: Option<String>, field: &str, command: &str| {
        value.ok_or_else(|| ApiError::invalid(field, format!("{field} is required by `{command}`")))
    };
    let command = match request.command {
        EditorCommandName::View => EditorCommand::View {
            view_range: request.view_range,
        },
        EditorCommandName::Create => EditorCommand::Create {
            file_text: required(request.file_text, "file_text", "create")?,
        },
        EditorCommandName::StrReplace => EditorCommand::StrReplace {
            old_str: required(request.old_str, "old_str", "str_replace")?,
            new_str: request.new_str.unwrap_or_default(),
            mode: request.replace_mode.map(|mode| match mode {
                EditorReplaceMode::All => ReplaceMode::All,
                EditorReplaceMode::First => ReplaceMode::First,
                EditorReplaceMode::Last => ReplaceMode::Last,
            }),
        },
        EditorCommandName::Insert => EditorCommand::Insert {
            insert_line: request.insert_line.ok_or_else(|| {
                ApiError::invalid("insert_line", "insert_line is required by `insert`")
            })?,
            new_str: required(request.new_str, "new_str", "insert")?,
        },
        EditorCommandName::UndoEdit => EditorCommand::UndoEdit,
    };
    let with_metadata = request.enable_metadata.unwrap_or(false);
    let path = request.path;
    let outcome = run(&state, move |files| {
        files.editor(OsStr::new(&path), command, with_metadata)
    })
    .await?;
    Ok(Json(Envelope::ok(StrReplaceEditorResult {
        output: outcome.output,
        path: shown(&outcome.path),
        prev_exist: outcome.prev_exist,
        error: None,
        old_content: outcome.old_content,
        new_content: outcome.new_content,
        metadata: outcome.metadata.map(|m| EditorMetadata {
            is_directory: m.is_directory,
            size: m.size,
            lines: m.lines,
        }),
    })))
}

/// Uploads one file (multipart/form-data: optional text field `path` first, then the part
/// `file`). It streams to a temporary file next to the destination and is moved into place
/// when complete; past SANDBOXD_MAX_UPLOAD_BYTES nothing is kept.
#[utoipa::path(post, path = "/v1/file/upload", tag = "file",
    request_body(content = FileUploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 200, body = Envelope<FileUploadResult>),
        (status = 400, description = "not a usable multipart body", body = ErrorBody),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 413, description = "over SANDBOXD_MAX_UPLOAD_BYTES", body = ErrorBody),
        (status = 422, description = "no `file` part", body = ErrorBody),
    ))]
pub async fn upload(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Envelope<FileUploadResult>>, ApiError> {
    let mut multipart = Multipart::from_request(request, &state)
        .await
        .map_err(|rejection| {
            ApiError::new(
                rejection.status(),
                format!(
                    "expected a multipart/form-data body: {}",
                    rejection.body_text()
                ),
            )
        })?;
    let mut path: Option<String> = None;
    let mut result: Option<FileUploadResult> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        match field.name() {
            Some("path") => {
                if result.is_some() {
                    return Err(ApiError::bad_request(
                        "the `path` field must come before the `file` part",
                    ));
                }
                let mut text = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                    text.extend_from_slice(&chunk);
                    if text.len() > MAX_UPLOAD_PATH_FIELD {
                        return Err(ApiError::invalid(
                            "path",
                            format!("path is longer than {MAX_UPLOAD_PATH_FIELD} bytes"),
                        ));
                    }
                }
                let text = String::from_utf8(text)
                    .map_err(|_| ApiError::invalid("path", "path is not UTF-8"))?;
                path = (!text.is_empty()).then_some(text);
            }
            Some("file") => {
                if result.is_some() {
                    return Err(ApiError::invalid("file", "send one `file` part per upload"));
                }
                let filename = field.file_name().map(str::to_owned);
                let destination = path.clone();
                let mut upload = run(&state, move |files| {
                    files.begin_upload(destination.as_deref().map(OsStr::new), filename.as_deref())
                })
                .await?;
                let mut batch: Vec<u8> = Vec::with_capacity(UPLOAD_BATCH);
                while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
                    batch.extend_from_slice(&chunk);
                    if batch.len() >= UPLOAD_BATCH {
                        upload = write_batch(&state, upload, std::mem::take(&mut batch)).await?;
                    }
                }
                upload = write_batch(&state, upload, batch).await?;
                let outcome = run(&state, move |_| upload.finish()).await?;
                result = Some(FileUploadResult {
                    file_path: shown(&outcome.path),
                    file_size: outcome.size,
                    success: true,
                });
            }
            // Other fields are ignored, as AIO's clients may add some.
            _ => {}
        }
    }
    let result =
        result.ok_or_else(|| ApiError::invalid("file", "the multipart body has no `file` part"))?;
    Ok(Json(Envelope::ok(result)))
}

/// Streams a file's bytes with a content type guessed from its extension.
#[utoipa::path(get, path = "/v1/file/download", tag = "file",
    params(FileDownloadQuery),
    responses(
        (status = 200, description = "the file's bytes, typed by their extension (application/octet-stream when unknown)", content_type = "*/*", body = Vec<u8>),
        (status = 403, description = "path refused", body = ErrorBody),
        (status = 404, description = "no such file", body = ErrorBody),
        (status = 422, description = "no `path`", body = ErrorBody),
    ))]
pub async fn download(
    State(state): State<AppState>,
    AioQuery(query): AioQuery<FileDownloadQuery>,
) -> Result<Response, ApiError> {
    let download = run(&state, move |files| {
        files.open_download(OsStr::new(&query.path))
    })
    .await?;
    let mime = mime_guess::from_path(&download.path).first_or_octet_stream();
    let name = download
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "download".into());
    // The file may grow while it streams; never send more than the length announced.
    let file = tokio::fs::File::from_std(download.file).take(download.size);
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(file, 64 * 1024));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(mime.essence_str()) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(download.size));
    if let Ok(value) = HeaderValue::from_str(&content_disposition(&name)) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// Runs a file operation on a blocking thread and turns its error into an answer.
pub(super) async fn run<T, F>(state: &AppState, operation: F) -> Result<T, ApiError>
where
    F: FnOnce(&Files) -> Result<T, FileError> + Send + 'static,
    T: Send + 'static,
{
    let files = state.files.clone();
    match tokio::task::spawn_blocking(move || operation(&files)).await {
        Ok(result) => result.map_err(file_error),
        Err(error) => Err(ApiError::internal(format!(
            "the file operation failed unexpectedly: {error}"
        ))),
    }
}

async fn write_batch(
    state: &AppState,
    mut upload: Upload,
    batch: Vec<u8>,
) -> Result<Upload, ApiError> {
    if batch.is_empty() {
        return Ok(upload);
    }
    run(state, move |_| {
        upload.write_chunk(&batch)?;
        Ok(upload)
    })
    .await
}

fn multipart_error(error: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::new(
        error.status(),
        format!("cannot read the multipart body: {}", error.body_text()),
    )
}

/// The body limit of a write: room for the largest content base64-encoded or JSON-escaped.
pub(crate) fn write_body_limit(limits: Limits) -> usize {
    let limit = limits
        .max_write_bytes
        .saturating_mul(2)
        .saturating_add(64 * 1024);
    usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .max(DEFAULT_BODY_LIMIT)
}

/// Reads a JSON body of at most `limit` bytes the way [`AioJson`] does.
async fn read_json<T: DeserializeOwned>(request: Request, limit: usize) -> Result<T, ApiError> {
    agentbox_http::body::refuse_form_content_type(request.headers())?;
    let bytes = http_body_util::Limited::new(request.into_body(), limit)
        .collect()
        .await
        .map_err(|error| {
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                ApiError::too_large(format!(
                    "request body is larger than {limit} bytes, the most this route accepts \
                     (twice SANDBOXD_MAX_WRITE_BYTES)"
                ))
            } else {
                ApiError::bad_request(format!("cannot read the request body: {error}"))
            }
        })?
        .to_bytes();
    parse_json(&bytes)
}

fn refuse_sudo(sudo: Option<bool>) -> Result<(), ApiError> {
    if sudo == Some(true) {
        return Err(ApiError::invalid(
            "sudo",
            "sudo is not available: sandboxd runs as the unprivileged agent user and nothing \
             in the sandbox can gain root (by design: the agent must not be able to change the \
             sandbox's own setup); leave sudo out or false and use paths under the allowed roots",
        ));
    }
    Ok(())
}

/// The answer for a failed file operation.
pub(crate) fn file_error(error: FileError) -> ApiError {
    match error {
        FileError::Path(ConfineError::Refused { message, .. }) => ApiError::forbidden(message),
        FileError::Path(error @ ConfineError::NotFound { .. }) => {
            ApiError::not_found(error.to_string())
        }
        FileError::Path(
            error @ (ConfineError::NotADirectory { .. } | ConfineError::IsADirectory { .. }),
        ) => ApiError::bad_request(error.to_string()),
        FileError::Path(ConfineError::Io { op, path, source })
        | FileError::Io { op, path, source } => io_error(op, &path, &source),
        FileError::TooLarge {
            kind,
            path,
            size,
            limit,
        } => ApiError::too_large(too_large_message(kind, &path, size, limit)),
        FileError::Invalid { field, message } => ApiError::invalid(field, message),
        error @ FileError::NotAFile { .. } => ApiError::bad_request(error.to_string()),
        FileError::Conflict { message } => ApiError::conflict(message),
    }
}

fn io_error(op: &str, path: &Path, source: &std::io::Error) -> ApiError {
    use std::io::ErrorKind;
    let message = format!("{op} {}: {source}", path.display());
    match source.kind() {
        ErrorKind::NotFound => ApiError::not_found(message),
        ErrorKind::PermissionDenied => ApiError::forbidden(message),
        ErrorKind::InvalidFilename | ErrorKind::InvalidInput => ApiError::bad_request(message),
        ErrorKind::AlreadyExists | ErrorKind::DirectoryNotEmpty => ApiError::conflict(message),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge => {
            ApiError::new(StatusCode::INSUFFICIENT_STORAGE, message)
        }
        _ => ApiError::internal(message),
    }
}

fn too_large_message(kind: LimitKind, path: &Path, size: Option<u64>, limit: u64) -> String {
    let path = path.display();
    let size = match size {
        Some(size) => format!("{size} bytes"),
        None => format!("more than {limit} bytes"),
    };
    match kind {
        LimitKind::Read => format!(
            "{path} is {size}, over the read limit of {limit} bytes (SANDBOXD_MAX_READ_BYTES); \
             read a line range with start_line/end_line, or download it with \
             GET /v1/file/download"
        ),
        LimitKind::Write => format!(
            "the content for {path} is {size}, over the write limit of {limit} bytes \
             (SANDBOXD_MAX_WRITE_BYTES); nothing was written"
        ),
        LimitKind::Upload => format!(
            "the upload to {path} is {size}, over the upload limit of {limit} bytes \
             (SANDBOXD_MAX_UPLOAD_BYTES); nothing was kept"
        ),
    }
}

/// `attachment; filename="a.txt"; filename*=UTF-8''a.txt` (RFC 6266 / 5987).
fn content_disposition(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

fn shown(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::content_disposition;

    #[test]
    fn content_disposition_escapes_names() {
        assert_eq!(
            content_disposition("a b.txt"),
            "attachment; filename=\"a b.txt\"; filename*=UTF-8''a%20b.txt"
        );
        assert_eq!(
            content_disposition("é\"x"),
            "attachment; filename=\"__x\"; filename*=UTF-8''%C3%A9%22x"
        );
    }
}
