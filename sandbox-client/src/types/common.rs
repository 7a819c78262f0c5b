//! The envelope every JSON answer is wrapped in, and the error body.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// AIO's response envelope. `success: false` with a 2xx status means the operation itself failed;
/// transport, validation and auth problems use 4xx/5xx statuses.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct Envelope<T> {
    pub success: bool,
    pub message: String,
    pub data: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl<T> Envelope<T> {
    pub fn ok(data: T) -> Self {
        Self {
            success: true,
            message: "Operation successful".into(),
            data: Some(data),
            hint: None,
        }
    }
}

/// The body of every error answer: AIO's envelope with `success: false`. Validation errors
/// (422) also carry FastAPI's `detail` list, which AIO's SDKs parse.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ErrorBody {
    pub success: bool,
    /// What was wrong, naming the field, path or program.
    pub message: String,
    #[schema(value_type = Option<Object>)]
    pub data: Option<()>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Vec<ValidationDetail>>,
}

/// One validation problem, in FastAPI's shape.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ValidationDetail {
    /// Where: `["body", "<field>", ...]` or `["query", "<name>"]`.
    pub loc: Vec<String>,
    pub msg: String,
    #[serde(rename = "type")]
    pub kind: String,
}
