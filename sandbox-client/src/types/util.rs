//! Utilities (`/v1/util/*`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/util/convert_to_markdown`.
#[derive(Debug, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
pub struct ConvertToMarkdownRequest {
    /// What to convert: an `http(s)` URL (opened by the browser in a tab of its own, under the
    /// browser's URL policy), a `data:` URI (`data:text/html,...`, base64 or percent-encoded),
    /// or a file (`file:///path` or a path; confined like the file API). HTML is converted;
    /// text and Markdown are returned as they are. At most 4 MiB.
    pub uri: String,
}
