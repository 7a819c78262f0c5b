//! `/v1/file/*`: AIO Sandbox's file requests and results, field for field. Fields AIO does not
//! have are marked as Agentbox extensions; AIO's clients ignore them.

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Accepts a non-negative integer, also written as a float with no fraction (`3.0`), as AIO's
/// Python clients may send.
fn lenient_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    if let Some(value) = number.as_u64() {
        return Ok(Some(value));
    }
    match number.as_f64() {
        Some(value) if value >= 0.0 && value.fract() == 0.0 && value <= 9_007_199_254_740_992.0 => {
            Ok(Some(value as u64))
        }
        _ => Err(D::Error::custom(format!(
            "expected a non-negative integer, got {number}"
        ))),
    }
}

/// Accepts an integer, also written as a float with no fraction (`-3.0`).
fn lenient_i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    if let Some(value) = number.as_i64() {
        return Ok(Some(value));
    }
    match number.as_f64() {
        Some(value) if value.fract() == 0.0 && value.abs() <= 9_007_199_254_740_992.0 => {
            Ok(Some(value as i64))
        }
        _ => Err(D::Error::custom(format!(
            "expected an integer, got {number}"
        ))),
    }
}

/// `encoding` of a write (AIO's `FileContentEncoding`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    Deserialize,
    Serialize,
    ToSchema,
    schemars::JsonSchema,
    PartialEq,
    Eq,
)]
pub enum FileContentEncoding {
    #[default]
    #[serde(rename = "utf-8", alias = "utf8")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
    #[serde(rename = "raw")]
    Raw,
}

/// `encoding` of a read (Agentbox extension): `utf-8` (default) or `base64`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    Deserialize,
    Serialize,
    ToSchema,
    schemars::JsonSchema,
    PartialEq,
    Eq,
)]
pub enum FileReadEncoding {
    #[default]
    #[serde(rename = "utf-8", alias = "utf8")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
}

/// `POST /v1/file/read`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileReadRequest {
    /// The file: absolute, or relative to the workspace.
    pub file: String,
    /// First line to return, 0-based. Negative counts from the end, as a Python slice does
    /// (`-20`: the last twenty lines).
    #[serde(default, deserialize_with = "lenient_i64")]
    #[schema(value_type = Option<i64>)]
    pub start_line: Option<i64>,
    /// Line to stop before (exclusive). Negative counts from the end (`-1`: all but the last
    /// line). An end at or before the start selects nothing.
    #[serde(default, deserialize_with = "lenient_i64")]
    #[schema(value_type = Option<i64>)]
    pub end_line: Option<i64>,
    /// Not supported: sandboxd runs as the unprivileged agent user and nothing in the sandbox
    /// can gain root. `true` is refused (422 naming `sudo`).
    #[serde(default)]
    pub sudo: Option<bool>,
    /// Agentbox extension: `base64` returns the bytes base64-encoded (for binary files).
    #[serde(default)]
    pub encoding: Option<FileReadEncoding>,
}

/// Data of `POST /v1/file/read`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileReadResult {
    pub content: String,
    pub file: String,
    /// Agentbox extension: `utf-8` or `base64`.
    pub encoding: FileReadEncoding,
}

/// `POST /v1/file/write`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileWriteRequest {
    pub file: String,
    pub content: String,
    #[serde(default)]
    pub encoding: Option<FileContentEncoding>,
    #[serde(default)]
    pub append: Option<bool>,
    /// Text mode only.
    #[serde(default)]
    pub leading_newline: Option<bool>,
    /// Text mode only.
    #[serde(default)]
    pub trailing_newline: Option<bool>,
    #[serde(default)]
    pub sudo: Option<bool>,
}

/// Data of `POST /v1/file/write`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileWriteResult {
    pub file: String,
    pub bytes_written: u64,
}

/// `POST /v1/file/replace`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileReplaceRequest {
    pub file: String,
    pub old_str: String,
    pub new_str: String,
    #[serde(default)]
    pub sudo: Option<bool>,
}

/// Data of `POST /v1/file/replace`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileReplaceResult {
    pub file: String,
    pub replaced_count: u64,
}

/// `POST /v1/file/search`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileSearchRequest {
    pub file: String,
    /// A regular expression (Rust `regex` syntax), matched against each line.
    pub regex: String,
    #[serde(default)]
    pub sudo: Option<bool>,
}

/// Data of `POST /v1/file/search`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileSearchResult {
    pub file: String,
    pub matches: Vec<String>,
    /// 0-based, like `start_line` of a read.
    pub line_numbers: Vec<u64>,
    /// Agentbox extension: more lines matched than were returned.
    pub truncated: bool,
}

/// `POST /v1/file/find`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileFindRequest {
    /// The directory to search.
    pub path: String,
    /// A glob matched against file names (or, if it holds a `/`, against paths relative to
    /// `path`).
    pub glob: String,
}

/// Data of `POST /v1/file/find`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileFindResult {
    pub path: String,
    pub files: Vec<String>,
    /// Agentbox extension.
    pub truncated: bool,
}

/// `POST /v1/file/grep`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileGrepRequest {
    /// A file or directory.
    pub path: String,
    pub pattern: String,
    #[serde(default)]
    pub include: Option<Vec<String>>,
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    #[serde(default)]
    pub fixed_strings: Option<bool>,
    /// At most 20.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schema(value_type = Option<u64>)]
    pub context_before: Option<u64>,
    /// At most 20.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schema(value_type = Option<u64>)]
    pub context_after: Option<u64>,
    /// Default 500, at most 10000.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schema(value_type = Option<u64>)]
    pub max_results: Option<u64>,
    /// Skip files larger than this (`1M`, `500K`, bytes). Default `1M`.
    #[serde(default)]
    pub max_file_size: Option<String>,
    #[serde(default)]
    pub multiline: Option<bool>,
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schema(value_type = Option<u64>)]
    pub offset: Option<u64>,
    /// A ripgrep type name: py, js, ts, rust, go, ...
    #[serde(default, rename = "type")]
    pub file_type: Option<String>,
    /// Default true.
    #[serde(default)]
    pub recursive: Option<bool>,
}

/// One grep hit.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct GrepMatch {
    pub file: String,
    /// 1-based.
    pub line_number: u64,
    pub line_content: String,
    pub context_before: Vec<String>,
    pub context_after: Vec<String>,
}

/// Data of `POST /v1/file/grep`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileGrepResult {
    pub path: String,
    pub pattern: String,
    pub matches: Vec<GrepMatch>,
    /// Matches returned.
    pub match_count: u64,
    pub files_searched: u64,
    pub files_matched: u64,
    pub truncated: bool,
}

/// `sort_by` of a glob.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GlobSortBy {
    #[default]
    Path,
    Name,
    Size,
    Modified,
}

/// `POST /v1/file/glob`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileGlobRequest {
    /// The base directory.
    pub path: String,
    /// Relative to `path`: `*` and `?` stay within a component, `**` crosses components.
    pub pattern: String,
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
    /// Default false.
    #[serde(default)]
    pub include_hidden: Option<bool>,
    /// Default true.
    #[serde(default)]
    pub files_only: Option<bool>,
    /// Default true.
    #[serde(default)]
    pub include_metadata: Option<bool>,
    /// Default 5000.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schema(value_type = Option<u64>)]
    pub max_results: Option<u64>,
    #[serde(default)]
    pub sort_by: Option<GlobSortBy>,
    #[serde(default)]
    pub sort_desc: Option<bool>,
}

/// One glob hit.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct GlobFileInfo {
    pub path: String,
    pub name: String,
    pub is_directory: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
}

/// Data of `POST /v1/file/glob`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileGlobResult {
    pub path: String,
    pub pattern: String,
    pub files: Vec<GlobFileInfo>,
    /// Matches found before `max_results` applied.
    pub total_count: u64,
    pub truncated: bool,
}

/// `sort_by` of a listing.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ListSortBy {
    #[default]
    Name,
    Size,
    Modified,
    Type,
}

/// `POST /v1/file/list`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct FileListRequest {
    pub path: String,
    /// Default false.
    #[serde(default)]
    pub recursive: Option<bool>,
    /// Default true.
    #[serde(default)]
    pub show_hidden: Option<bool>,
    /// Extensions such as `.py`: other files are left out (directories stay).
    #[serde(default)]
    pub file_types: Option<Vec<String>>,
    /// For recursive listings; 1 = the directory's own entries.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schema(value_type = Option<u64>)]
    pub max_depth: Option<u64>,
    /// Default true.
    #[serde(default)]
    pub include_size: Option<bool>,
    /// Default false.
    #[serde(default)]
    pub include_permissions: Option<bool>,
    #[serde(default)]
    pub sort_by: Option<ListSortBy>,
    #[serde(default)]
    pub sort_desc: Option<bool>,
}

/// One listed entry. Symlinks are listed as themselves and never followed.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileInfo {
    pub name: String,
    pub path: String,
    pub is_directory: bool,
    /// Agentbox extension.
    pub is_symlink: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// RFC 3339.
    pub modified_time: Option<String>,
    /// `ls -l` style, e.g. `-rw-r--r--`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// `.py`; absent for directories and names without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extension: Option<String>,
}

/// Data of `POST /v1/file/list`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileListResult {
    pub path: String,
    pub files: Vec<FileInfo>,
    pub total_count: u64,
    pub directory_count: u64,
    pub file_count: u64,
    /// Agentbox extension: the listing stopped at its entry limit.
    pub truncated: bool,
}

/// `command` of `str_replace_editor`.
#[derive(
    Debug, Clone, Copy, Deserialize, Serialize, ToSchema, schemars::JsonSchema, PartialEq, Eq,
)]
#[serde(rename_all = "snake_case")]
pub enum EditorCommandName {
    View,
    Create,
    StrReplace,
    Insert,
    UndoEdit,
}

/// `replace_mode` of `str_replace_editor`.
#[derive(
    Debug, Clone, Copy, Deserialize, Serialize, ToSchema, schemars::JsonSchema, PartialEq, Eq,
)]
pub enum EditorReplaceMode {
    #[serde(rename = "ALL", alias = "all")]
    All,
    #[serde(rename = "FIRST", alias = "first")]
    First,
    #[serde(rename = "LAST", alias = "last")]
    Last,
}

/// `POST /v1/file/str_replace_editor`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct StrReplaceEditorRequest {
    pub command: EditorCommandName,
    pub path: String,
    /// Required by `create`.
    #[serde(default)]
    pub file_text: Option<String>,
    /// Required by `str_replace`.
    #[serde(default)]
    pub old_str: Option<String>,
    /// Optional for `str_replace` (default empty), required by `insert`.
    #[serde(default)]
    pub new_str: Option<String>,
    /// Required by `insert`: `new_str` goes after this line (0 = at the top).
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schema(value_type = Option<u64>)]
    pub insert_line: Option<u64>,
    /// `view` of a file: `[start, end]`, 1-based, inclusive; `end` -1 for the end.
    #[serde(default)]
    pub view_range: Option<Vec<i64>>,
    /// Without it, `old_str` must be unique.
    #[serde(default)]
    pub replace_mode: Option<EditorReplaceMode>,
    /// `view` of a PDF: `[first, last]` pages, 1-based, inclusive; `last` -1 for the end (all
    /// pages when absent).
    #[serde(default)]
    pub page_range: Option<Vec<i64>>,
    /// `view` of a spreadsheet (.xlsx, .xlsm, .xlsb, .xls, .ods): the sheet (the first when
    /// absent).
    #[serde(default)]
    pub sheet_name: Option<String>,
    /// `view` of a spreadsheet: `[first, last]` rows, 1-based, inclusive; `last` -1 for the end.
    #[serde(default)]
    pub row_range: Option<Vec<i64>>,
    /// `view` of a presentation (.pptx): `[first, last]` slides, 1-based, inclusive; `last` -1
    /// for the end.
    #[serde(default)]
    pub slide_range: Option<Vec<i64>>,
    /// Adds `metadata` (size, lines, is_directory) to the result.
    #[serde(default)]
    pub enable_metadata: Option<bool>,
}

impl StrReplaceEditorRequest {
    /// `command` on `path`, every other field absent.
    pub fn new(command: EditorCommandName, path: impl Into<String>) -> Self {
        Self {
            command,
            path: path.into(),
            file_text: None,
            old_str: None,
            new_str: None,
            insert_line: None,
            view_range: None,
            replace_mode: None,
            page_range: None,
            sheet_name: None,
            row_range: None,
            slide_range: None,
            enable_metadata: None,
        }
    }
}

/// `metadata` of a `str_replace_editor` result.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct EditorMetadata {
    pub is_directory: bool,
    pub size: u64,
    pub lines: u64,
}

/// Data of `POST /v1/file/str_replace_editor`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct StrReplaceEditorResult {
    pub output: String,
    pub path: String,
    pub prev_exist: bool,
    pub error: Option<String>,
    pub old_content: Option<String>,
    pub new_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EditorMetadata>,
}

/// `POST /v1/file/upload` (multipart/form-data).
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // Documents the form; the handler reads the parts as a stream.
pub struct FileUploadForm {
    /// The file content. Its file name is used when `path` is absent or names a directory.
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
    /// Destination file (or directory). Default: the workspace directory plus the file name.
    /// Must come before the `file` part.
    pub path: Option<String>,
}

/// Data of `POST /v1/file/upload`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FileUploadResult {
    pub file_path: String,
    pub file_size: u64,
    pub success: bool,
}

/// `GET /v1/file/download`.
#[derive(Debug, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FileDownloadQuery {
    /// The file: absolute, or relative to the workspace.
    pub path: String,
}
