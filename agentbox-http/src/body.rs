//! Reading request bodies and query strings into typed values, with errors that name the field.
//!
//! Both servers parse the same way: an empty (or all-whitespace) body counts as `{}` (AIO's SDKs
//! send no body when every field is omitted); malformed JSON is a [`BodyError::Malformed`]; a
//! body that does not fit the type is a [`BodyError::Invalid`] whose `loc` is the path to the
//! field (`["body", "nested", "depth"]`, a missing field included); a body over the route's
//! limit is [`BodyError::TooLarge`]; a body labelled with a form's content type is
//! [`BodyError::FormContentType`] (a browser sends those across sites without asking first, so
//! accepting JSON under them would let any page forge a call). Each server renders these in its
//! own error shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

/// Why a request's body or query string could not become the handler's type.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BodyError {
    /// The body is larger than the route accepts (413).
    #[error("request body is larger than this route accepts")]
    TooLarge,
    /// The body could not be read (the client went away, a bad transfer encoding).
    #[error("cannot read the request body: {message}")]
    Unreadable { status: StatusCode, message: String },
    /// Not JSON at all, or trailing bytes after it (400).
    #[error("malformed JSON body: {0}")]
    Malformed(String),
    /// The body is labelled `text/plain`, `application/x-www-form-urlencoded` or
    /// `multipart/form-data`: what a cross-site form sends (415).
    #[error(
        "Content-Type {0} is not accepted for a JSON body (a form on any site can send it): send application/json"
    )]
    FormContentType(String),
    /// JSON (or a query string) that does not fit the type (422). `loc` starts with `body` or
    /// `query`, then names the field.
    #[error("{message}")]
    Invalid { loc: Vec<String>, message: String },
}

impl BodyError {
    /// The status code this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unreadable { status, .. } => *status,
            Self::Malformed(_) => StatusCode::BAD_REQUEST,
            Self::FormContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
}

/// The content types a browser's form sends across sites without a CORS preflight.
const FORM_CONTENT_TYPES: [&str; 3] = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
];

/// Refuses a JSON body whose `Content-Type` is a form's (see [`BodyError::FormContentType`]).
/// No `Content-Type` is accepted: clients that send no body often send no type either.
pub fn refuse_form_content_type(headers: &HeaderMap) -> Result<(), BodyError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text.split(';').next().unwrap_or_default().trim();
    if FORM_CONTENT_TYPES
        .iter()
        .any(|form| essence.eq_ignore_ascii_case(form))
    {
        return Err(BodyError::FormContentType(essence.to_ascii_lowercase()));
    }
    Ok(())
}

/// Reads the request's whole body (bounded by the route's `DefaultBodyLimit`) as JSON; a form's
/// content type is refused before anything is read.
pub async fn read_json<T, S>(request: Request, state: &S) -> Result<T, BodyError>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    refuse_form_content_type(request.headers())?;
    let bytes = Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            let status = rejection.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                BodyError::TooLarge
            } else {
                BodyError::Unreadable {
                    status,
                    message: rejection.body_text(),
                }
            }
        })?;
    parse_json(&bytes)
}

/// Parses a JSON body, treating an empty body as `{}`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let trimmed = bytes.trim_ascii();
    let body: &[u8] = if trimmed.is_empty() { b"{}" } else { trimmed };
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            BodyError::Malformed(inner.to_string())
        } else {
            invalid("body", &path, &inner.to_string())
        }
    })?;
    deserializer
        .end()
        .map_err(|e| BodyError::Malformed(e.to_string()))?;
    Ok(value)
}

/// Parses the request's query string (absent counts as empty).
pub fn read_query<T: DeserializeOwned>(parts: &Parts) -> Result<T, BodyError> {
    parse_query(parts.uri.query().unwrap_or(""))
}

/// Parses a query string (`a=1&b=two`).
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, BodyError> {
    let deserializer =
        serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let path = error.path().to_string();
        invalid("query", &path, &error.into_inner().to_string())
    })
}

/// An [`BodyError::Invalid`] at `path` (serde_path_to_error's `a.b[0]` notation; `.` for the
/// root). serde reports a missing field at its parent, so its name is taken from the message.
fn invalid(root: &str, path: &str, message: &str) -> BodyError {
    let mut loc = vec![root.to_string()];
    loc.extend(
        path.split(['.', '[', ']'])
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    );
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let message = match (missing, path) {
        (Some(field), ".") => format!("missing field `{field}`"),
        (Some(field), path) => format!("missing field `{path}.{field}`"),
        (None, ".") => format!("invalid {root}: {message}"),
        (None, path) => format!("invalid field `{path}`: {message}"),
    };
    if let Some(field) = missing {
        loc.push(field.to_string());
    }
    BodyError::Invalid { loc, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Exec {
        command: String,
        timeout: Option<f64>,
        #[serde(default)]
        nested: Option<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        depth: u32,
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    struct AllOptional {
        id: Option<String>,
    }

    fn loc(error: BodyError) -> Vec<String> {
        match error {
            BodyError::Invalid { loc, .. } => loc,
            other => panic!("not a 422: {other:?}"),
        }
    }

    #[test]
    fn a_forms_content_type_is_refused_and_json_or_none_is_not() {
        let headers = |value: Option<&str>| {
            let mut map = HeaderMap::new();
            if let Some(value) = value {
                map.insert(header::CONTENT_TYPE, value.parse().expect("a header value"));
            }
            map
        };
        for refused in [
            "text/plain",
            "Text/Plain; charset=utf-8",
            "application/x-www-form-urlencoded",
            " multipart/form-data; boundary=----x",
        ] {
            let error = refuse_form_content_type(&headers(Some(refused))).unwrap_err();
            assert_eq!(
                error.status(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{refused}"
            );
            assert!(error.to_string().contains("application/json"), "{error}");
        }
        for accepted in [
            None,
            Some("application/json"),
            Some("application/json; charset=utf-8"),
            Some("application/vnd.api+json"),
        ] {
            assert_eq!(
                refuse_form_content_type(&headers(accepted)),
                Ok(()),
                "{accepted:?}"
            );
        }
    }

    #[test]
    fn empty_bodies_are_empty_objects() {
        assert_eq!(
            parse_json::<AllOptional>(b"").unwrap(),
            AllOptional::default()
        );
        assert_eq!(
            parse_json::<AllOptional>(b"  \n").unwrap(),
            AllOptional::default()
        );
    }

    #[test]
    fn nulls_and_unknown_fields_are_accepted() {
        let exec: Exec = parse_json(br#"{"command":"ls","timeout":null,"extra":1}"#).unwrap();
        assert_eq!(exec.command, "ls");
        assert_eq!(exec.timeout, None);
    }

    #[test]
    fn errors_name_the_field() {
        let err = parse_json::<Exec>(br#"{"command":"ls","timeout":"soon"}"#).unwrap_err();
        assert_eq!(err.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err.to_string().contains("`timeout`"), "{err}");
        assert_eq!(loc(err), ["body", "timeout"]);
        let err = parse_json::<Exec>(br#"{"command":"ls","nested":{"depth":-1}}"#).unwrap_err();
        assert!(err.to_string().contains("`nested.depth`"), "{err}");
        assert_eq!(loc(err), ["body", "nested", "depth"]);
        let err = parse_json::<Exec>(br#"{}"#).unwrap_err();
        assert_eq!(err.to_string(), "missing field `command`");
        assert_eq!(loc(err), ["body", "command"]);
        let err = parse_json::<Exec>(br#"{"command":"ls","nested":{}}"#).unwrap_err();
        assert_eq!(err.to_string(), "missing field `nested.depth`");
        assert_eq!(loc(err), ["body", "nested", "depth"]);
    }

    #[test]
    fn malformed_json_is_a_bad_request() {
        let err = parse_json::<Exec>(br#"{"command": "#).unwrap_err();
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
        let err = parse_json::<Exec>(br#"{"command":"ls"} trailing"#).unwrap_err();
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Page {
        limit: Option<u32>,
        name: String,
    }

    #[test]
    fn query_strings_name_the_parameter() {
        let page: Page = parse_query("name=a%20b&limit=3").unwrap();
        assert_eq!(
            page,
            Page {
                limit: Some(3),
                name: "a b".into()
            }
        );
        let err = parse_query::<Page>("name=x&limit=many").unwrap_err();
        assert!(err.to_string().contains("`limit`"), "{err}");
        assert_eq!(loc(err), ["query", "limit"]);
        let err = parse_query::<Page>("").unwrap_err();
        assert_eq!(loc(err), ["query", "name"]);
    }
}
