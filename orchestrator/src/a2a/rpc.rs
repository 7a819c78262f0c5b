//! JSON-RPC 2.0 as A2A uses it: the envelope of a request (read before the version's own
//! params), the protocol version a request speaks (`A2A-Version`), the error codes of JSON-RPC
//! and of A2A, and the bodies of answers. Errors are written per version: 1.0 adds a
//! `google.rpc.ErrorInfo` in `data`.

use serde_json::{Value, json};

/// The protocol version of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// No `A2A-Version` header (or `0.3`): method names like `message/send`, `kind` tags.
    V03,
    /// `A2A-Version: 1.0`: method names like `SendMessage`, `TASK_STATE_*` enums.
    V10,
}

impl Version {
    /// The version an `A2A-Version` header asks for (`None`: the header is absent).
    pub fn from_header(header: Option<&str>) -> Result<Self, A2aError> {
        match header.map(str::trim) {
            None | Some("") => Ok(Self::V03),
            Some("0.3" | "0.3.0") => Ok(Self::V03),
            Some("1.0" | "1" | "1.0.0") => Ok(Self::V10),
            Some(other) => Err(A2aError::VersionNotSupported(format!(
                "A2A-Version {other:?} is not spoken here; use 1.0, or 0.3 (no header)"
            ))),
        }
    }
}

/// A JSON-RPC or A2A error: the code, a message naming what was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum A2aError {
    #[error("{0}")]
    Parse(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    MethodNotFound(String),
    #[error("{0}")]
    InvalidParams(String),
    #[error("{0}")]
    Internal(String),
    #[error("{0}")]
    TaskNotFound(String),
    #[error("{0}")]
    TaskNotCancelable(String),
    #[error("push notifications are not supported")]
    PushNotSupported,
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    ContentType(String),
    #[error("no authenticated extended agent card is configured")]
    ExtendedCardNotConfigured,
    #[error("{0}")]
    VersionNotSupported(String),
}

impl A2aError {
    pub fn code(&self) -> i64 {
        match self {
            Self::Parse(_) => -32700,
            Self::InvalidRequest(_) => -32600,
            Self::MethodNotFound(_) => -32601,
            Self::InvalidParams(_) => -32602,
            Self::Internal(_) => -32603,
            Self::TaskNotFound(_) => -32001,
            Self::TaskNotCancelable(_) => -32002,
            Self::PushNotSupported => -32003,
            Self::Unsupported(_) => -32004,
            Self::ContentType(_) => -32005,
            Self::ExtendedCardNotConfigured => -32007,
            Self::VersionNotSupported(_) => -32009,
        }
    }

    /// The `ErrorInfo` reason of 1.0.
    fn reason(&self) -> &'static str {
        match self {
            Self::Parse(_) => "PARSE_ERROR",
            Self::InvalidRequest(_) => "INVALID_REQUEST",
            Self::MethodNotFound(_) => "METHOD_NOT_FOUND",
            Self::InvalidParams(_) => "INVALID_PARAMS",
            Self::Internal(_) => "INTERNAL_ERROR",
            Self::TaskNotFound(_) => "TASK_NOT_FOUND",
            Self::TaskNotCancelable(_) => "TASK_NOT_CANCELABLE",
            Self::PushNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            Self::Unsupported(_) => "UNSUPPORTED_OPERATION",
            Self::ContentType(_) => "CONTENT_TYPE_NOT_SUPPORTED",
            Self::ExtendedCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            Self::VersionNotSupported(_) => "VERSION_NOT_SUPPORTED",
        }
    }

    /// The `error` object of a response.
    pub fn to_json(&self, version: Version) -> Value {
        let mut error = json!({"code": self.code(), "message": self.to_string()});
        if version == Version::V10 {
            error["data"] = json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.reason(),
                "domain": "a2a-protocol.org",
            }]);
        }
        error
    }
}

/// A request's id: a string, a number or null (unreadable or absent).
pub type RequestId = Value;

/// A request whose envelope is sound: its id, method and params (not yet read).
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub id: RequestId,
    pub method: String,
    pub params: Value,
}

/// Reads the envelope of a body: -32700 when it is not JSON, -32600 when it is not a JSON-RPC
/// 2.0 request (the id is then echoed when it could be read).
pub fn envelope(body: &[u8]) -> Result<Envelope, (RequestId, A2aError)> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        (
            Value::Null,
            A2aError::Parse(format!("the body is not JSON: {e}")),
        )
    })?;
    let Value::Object(mut object) = value else {
        return Err((
            Value::Null,
            A2aError::InvalidRequest("a request is a JSON object (batches are not taken)".into()),
        ));
    };
    let id = match object.remove("id") {
        None | Some(Value::Null) => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        Some(_) => {
            return Err((
                Value::Null,
                A2aError::InvalidRequest("`id` must be a string, a number or null".into()),
            ));
        }
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((
            id,
            A2aError::InvalidRequest("`jsonrpc` must be \"2.0\"".into()),
        ));
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) if !method.is_empty() => method,
        _ => {
            return Err((
                id,
                A2aError::InvalidRequest("`method` must be a non-empty string".into()),
            ));
        }
    };
    let params = match object.remove("params") {
        None => Value::Object(Default::default()),
        Some(params @ (Value::Object(_) | Value::Array(_))) => params,
        Some(_) => {
            return Err((
                id,
                A2aError::InvalidRequest("`params` must be an object".into()),
            ));
        }
    };
    Ok(Envelope { id, method, params })
}

/// A success response.
pub fn result(id: &RequestId, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response.
pub fn error(id: &RequestId, error: &A2aError, version: Version) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json(version)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> (Value, i64) {
        let (id, error) = envelope(body.as_bytes()).unwrap_err();
        (id, error.code())
    }

    #[test]
    fn envelope_errors_have_the_codes_the_spec_assigns() {
        assert_eq!(code("{not json"), (Value::Null, -32700));
        assert_eq!(code("[]"), (Value::Null, -32600));
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#),
            (json!(1), -32600)
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":"a"}"#), (json!("a"), -32600));
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"m"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#),
            (Value::Null, -32600)
        );
        let ok =
            envelope(br#"{"jsonrpc":"2.0","id":"7","method":"tasks/get","params":{"id":"x"}}"#)
                .unwrap();
        assert_eq!(ok.method, "tasks/get");
        assert_eq!(ok.id, json!("7"));
    }

    #[test]
    fn versions_come_from_the_header() {
        assert_eq!(Version::from_header(None), Ok(Version::V03));
        assert_eq!(Version::from_header(Some("")), Ok(Version::V03));
        assert_eq!(Version::from_header(Some("1.0")), Ok(Version::V10));
        assert_eq!(
            Version::from_header(Some("99.0")).unwrap_err().code(),
            -32009
        );
    }

    #[test]
    fn errors_of_1_0_carry_error_info() {
        let error = A2aError::TaskNotFound("no task t".into());
        let v10 = error.to_json(Version::V10);
        assert_eq!(v10["code"], -32001);
        assert_eq!(v10["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(v10["data"][0]["domain"], "a2a-protocol.org");
        assert!(error.to_json(Version::V03).get("data").is_none());
    }
}
