//! Running JavaScript in a tab: sandboxd's own scripts (files in `js/`, each one function
//! expression, called with JSON arguments) and the caller's expressions (`evaluate`).

use std::time::Duration;

use chromiumoxide::Page;
use chromiumoxide::cdp::js_protocol::runtime::{
    CallFunctionOnParams, EvaluateParams, ExceptionDetails, ReleaseObjectGroupParams, RemoteObject,
    RemoteObjectType, TerminateExecutionParams,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::BrowserError;

/// Longest exception message passed on.
const MAX_EXCEPTION_CHARS: usize = 4000;
/// The object group of remote objects `evaluate` creates (released after each call).
const OBJECT_GROUP: &str = "sandboxd-evaluate";

/// Calls one of sandboxd's scripts (`script` is a function expression) with `args`, returning
/// its result by value.
pub async fn call<T: DeserializeOwned>(
    page: &Page,
    script: &str,
    args: &[Value],
) -> Result<T, BrowserError> {
    let args = serde_json::to_string(args).map_err(|e| BrowserError::Protocol(e.to_string()))?;
    let expression = format!("({script}).apply(null, {args})");
    let params = EvaluateParams::builder()
        .expression(expression)
        .return_by_value(true)
        .await_promise(true)
        .build()
        .map_err(BrowserError::Protocol)?;
    let response = page.execute(params).await?.result;
    if let Some(details) = response.exception_details {
        return Err(BrowserError::Script(exception_message(&details)));
    }
    let value = response.result.value.unwrap_or(Value::Null);
    serde_json::from_value(value)
        .map_err(|e| BrowserError::Protocol(format!("unexpected result from a page script: {e}")))
}

/// What a caller's expression came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Evaluation {
    /// The value, as JSON (`undefined` is `null`; `NaN`, `Infinity`, `-0` and bigints are
    /// strings).
    Value(Value),
    /// The expression threw (or its promise rejected); the message.
    Exception(String),
}

/// Evaluates a caller's expression in the tab's main world. When the expression evaluates to a
/// function (`() => document.title`), the function is called, as Playwright does. Promises are
/// awaited. Runs at most `limit`; a script still running then is terminated.
pub async fn evaluate(
    page: &Page,
    expression: &str,
    limit: Duration,
) -> Result<Evaluation, BrowserError> {
    let outcome = tokio::time::timeout(limit, evaluate_unbounded(page, expression)).await;
    let _ = page
        .execute(ReleaseObjectGroupParams::new(OBJECT_GROUP))
        .await;
    match outcome {
        Ok(result) => result,
        Err(_) => {
            // The page may be stuck in a loop; stop the script so the tab answers again.
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                page.execute(TerminateExecutionParams::default()),
            )
            .await;
            Err(BrowserError::timeout("evaluating the expression", limit))
        }
    }
}

async fn evaluate_unbounded(page: &Page, expression: &str) -> Result<Evaluation, BrowserError> {
    let params = EvaluateParams::builder()
        .expression(expression)
        .object_group(OBJECT_GROUP)
        .return_by_value(false)
        .await_promise(true)
        .user_gesture(true)
        .build()
        .map_err(BrowserError::Protocol)?;
    let response = page.execute(params).await?.result;
    if let Some(details) = response.exception_details {
        return Ok(Evaluation::Exception(exception_message(&details)));
    }
    let object = response.result;
    let Some(object_id) = object.object_id.clone() else {
        return Ok(Evaluation::Value(primitive(&object)));
    };
    let declaration = if object.r#type == RemoteObjectType::Function {
        "async function() { return await this(); }"
    } else {
        "function() { return this; }"
    };
    let call = CallFunctionOnParams::builder()
        .function_declaration(declaration)
        .object_id(object_id)
        .object_group(OBJECT_GROUP)
        .return_by_value(true)
        .await_promise(true)
        .user_gesture(true)
        .build()
        .map_err(BrowserError::Protocol)?;
    match page.execute(call).await {
        Ok(response) => {
            let response = response.result;
            if let Some(details) = response.exception_details {
                return Ok(Evaluation::Exception(exception_message(&details)));
            }
            Ok(Evaluation::Value(primitive(&response.result)))
        }
        Err(chromiumoxide::error::CdpError::Chrome(error)) => {
            let what = object
                .description
                .or(object.class_name)
                .unwrap_or_else(|| "the result".into());
            Ok(Evaluation::Exception(format!(
                "the result ({what}) cannot be returned as JSON: {}",
                error.message
            )))
        }
        Err(other) => Err(other.into()),
    }
}

/// A by-value result as JSON.
fn primitive(object: &RemoteObject) -> Value {
    if let Some(value) = &object.value {
        return value.clone();
    }
    if let Some(unserializable) = &object.unserializable_value {
        return Value::String(unserializable.as_ref().to_string());
    }
    Value::Null
}

/// The most useful message of an exception: its description (`Error: boom\n    at ...`), else
/// the text (`Uncaught`).
pub fn exception_message(details: &ExceptionDetails) -> String {
    let message = details
        .exception
        .as_ref()
        .and_then(|e| {
            e.description
                .clone()
                .or_else(|| e.value.as_ref().map(|v| v.to_string()))
        })
        .unwrap_or_else(|| details.text.clone());
    if message.chars().count() > MAX_EXCEPTION_CHARS {
        let cut: String = message.chars().take(MAX_EXCEPTION_CHARS).collect();
        format!("{cut}…")
    } else {
        message
    }
}
