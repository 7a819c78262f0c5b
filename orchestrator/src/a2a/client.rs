//! The A2A client: what a run drives a remote A2A agent through (`model: "a2a:<card URL>"`).
//!
//! One binding, stated: **A2A 1.0 over JSON-RPC** (`A2A-Version: 1.0`). [`RemoteAgent::discover`]
//! fetches the agent card (bounded in size and time) and checks that it offers that binding,
//! on the card's own origin (the stored credential is sent to that origin only, never to one a
//! card names elsewhere), and whether it streams. The calls (`SendMessage`,
//! `SendStreamingMessage`, `GetTask`, `CancelTask`, `SubscribeToTask`) answer the [`model`]
//! types; a stream is read event by event with the `agent` crate's SSE decoder.
//!
//! Errors say whether the request can have reached the remote ([`ClientError::reached`]): a
//! send that failed before it was written may be tried again, one that failed after may have
//! created a task, and is never sent a second time.
//!
//! **Invariant:** this module knows nothing of runs or of the HTTP server above it.

use std::time::Duration;

use agent::sse::{SseDecoder, SseEvent};
use reqwest::Url;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{Value, json};

use super::codec;
use super::model::{Message, Reply, StreamItem, Task};
use super::rpc::Version;

/// Largest agent card read.
const MAX_CARD_BYTES: usize = 256 * 1024;
/// Largest JSON-RPC answer (not streamed) read.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// How long fetching the card or one unary call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stream may stay silent before it is taken as dropped.
pub const STREAM_IDLE: Duration = Duration::from_secs(90);

/// Why a call to the remote agent failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The agent card is missing, malformed or offers nothing this client speaks.
    #[error("the agent card at {url}: {message}")]
    Card { url: String, message: String },
    /// The connection was never made: nothing reached the remote.
    #[error("could not reach the remote agent: {0}")]
    Unreachable(String),
    /// The address may not be reached ([`super::reach`]): nothing was sent, and trying again
    /// changes nothing.
    #[error("{0}")]
    Refused(String),
    /// The request may have reached the remote, but no answer came back.
    #[error("no answer from the remote agent: {0}")]
    Transport(String),
    /// The remote refused the credential (or there was none).
    #[error("the remote agent refused the credential (HTTP {0})")]
    Unauthorized(u16),
    /// A JSON-RPC error answer.
    #[error("the remote agent answered error {code}: {message}")]
    Rpc { code: i64, message: String },
    /// An answer this client cannot read.
    #[error("the remote agent's answer breaks the protocol: {0}")]
    Protocol(String),
}

impl ClientError {
    /// Whether the request can have reached the remote (and so may have had its effect).
    pub fn reached(&self) -> bool {
        !matches!(
            self,
            Self::Unreachable(_) | Self::Refused(_) | Self::Card { .. }
        )
    }

    /// The remote does not know the task.
    pub fn is_task_not_found(&self) -> bool {
        matches!(self, Self::Rpc { code: -32001, .. })
    }

    /// The remote refused to cancel the task.
    pub fn is_not_cancelable(&self) -> bool {
        matches!(self, Self::Rpc { code: -32002, .. })
    }

    fn from_reqwest(error: reqwest::Error) -> Self {
        if let Some(refused) = super::reach::refused_in(&error) {
            Self::Refused(refused)
        } else if error.is_connect() {
            Self::Unreachable(error.to_string())
        } else {
            Self::Transport(error.to_string())
        }
    }
}

/// A remote agent, as its card describes it.
#[derive(Debug, Clone)]
pub struct RemoteAgent {
    /// Where the card was read.
    pub card_url: Url,
    pub name: String,
    /// The JSON-RPC endpoint of its A2A 1.0 interface.
    pub endpoint: Url,
    /// Whether it streams (`capabilities.streaming`).
    pub streaming: bool,
}

/// The origin (`scheme://host:port`) of a URL: what a stored credential is bound to.
pub fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// Reads an `a2a:` model's card URL: absolute, `http` or `https`, no credentials in it.
pub fn card_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text.trim()).map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{text}`: the agent card must be at an http(s) URL"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{text}`: put no credential in the URL (store one with POST /v1/a2a/credentials)"
        ));
    }
    if url.host_str().is_none() {
        return Err(format!("`{text}` names no host"));
    }
    Ok(url)
}

impl RemoteAgent {
    /// Fetches and checks the card at `card_url`.
    pub async fn discover(
        http: &reqwest::Client,
        card_url: &Url,
        bearer: Option<&str>,
    ) -> Result<Self, ClientError> {
        let card_error = |message: String| ClientError::Card {
            url: card_url.to_string(),
            message,
        };
        let mut request = http
            .get(card_url.clone())
            .header(ACCEPT, "application/json")
            .timeout(CALL_TIMEOUT);
        if let Some(bearer) = bearer {
            request = request.header(AUTHORIZATION, format!("Bearer {bearer}"));
        }
        let response = request.send().await.map_err(ClientError::from_reqwest)?;
        if !response.status().is_success() {
            return Err(card_error(format!("HTTP {}", response.status().as_u16())));
        }
        let body = read_limited(response, MAX_CARD_BYTES).await?;
        let card: Value =
            serde_json::from_slice(&body).map_err(|e| card_error(format!("not JSON: {e}")))?;
        Self::from_card(card_url, &card).map_err(card_error)
    }

    /// Checks a card's JSON: an A2A 1.0 JSON-RPC interface on the card's origin.
    pub fn from_card(card_url: &Url, card: &Value) -> Result<Self, String> {
        let name = card
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or("it has no `name`")?
            .to_string();
        let interfaces = card
            .get("supportedInterfaces")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let jsonrpc_1 = interfaces.iter().find(|i| {
            i.get("protocolBinding").and_then(Value::as_str) == Some("JSONRPC")
                && i.get("protocolVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v == "1.0" || v.starts_with("1.0."))
        });
        let Some(interface) = jsonrpc_1 else {
            let spoken = card
                .get("protocolVersion")
                .and_then(Value::as_str)
                .map(|v| format!(" (it says protocolVersion {v})"))
                .unwrap_or_default();
            return Err(format!(
                "it offers no A2A 1.0 JSON-RPC interface in `supportedInterfaces`{spoken}; \
                 this client speaks A2A 1.0 over JSON-RPC only"
            ));
        };
        let endpoint = interface
            .get("url")
            .and_then(Value::as_str)
            .ok_or("its JSON-RPC interface has no `url`")?;
        let endpoint = card_url
            .join(endpoint)
            .map_err(|e| format!("its JSON-RPC `url` {endpoint:?}: {e}"))?;
        if origin(&endpoint) != origin(card_url) {
            return Err(format!(
                "its JSON-RPC endpoint {endpoint} is on another origin than the card; the \
                 credential for {} is not sent elsewhere",
                origin(card_url)
            ));
        }
        let streaming = card
            .pointer("/capabilities/streaming")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Self {
            card_url: card_url.clone(),
            name,
            endpoint,
            streaming,
        })
    }
}

/// Calls one remote agent with one credential.
#[derive(Debug, Clone)]
pub struct A2aClient {
    http: reqwest::Client,
    agent: RemoteAgent,
    bearer: Option<String>,
    /// Checks URLs that name a literal IP (names are checked by `http`'s resolver).
    reach: std::sync::Arc<super::reach::Reach>,
}

/// An open stream of events.
pub struct EventStream {
    response: reqwest::Response,
    decoder: SseDecoder,
    pending: std::collections::VecDeque<SseEvent>,
}

impl EventStream {
    /// The next event; `Ok(None)` when the stream ended (closed by the remote, or cut).
    pub async fn next(&mut self) -> Result<Option<StreamItem>, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if event.data.trim().is_empty() {
                    continue;
                }
                let value: Value = serde_json::from_str(&event.data)
                    .map_err(|e| ClientError::Protocol(format!("a stream event: {e}")))?;
                let result = rpc_result(value)?;
                return codec::read_stream_item(Version::V10, &result)
                    .map(Some)
                    .map_err(|e| ClientError::Protocol(e.to_string()));
            }
            let chunk = match tokio::time::timeout(STREAM_IDLE, self.response.chunk()).await {
                Err(_) => return Ok(None),
                // A stream cut mid-way reads as its end: the caller asks for the task.
                Ok(Err(_)) | Ok(Ok(None)) => return Ok(None),
                Ok(Ok(Some(chunk))) => chunk,
            };
            let mut out = Vec::new();
            self.decoder
                .push(&chunk, &mut out)
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            self.pending.extend(out);
        }
    }
}

/// A JSON-RPC answer's `result`, or its error.
fn rpc_result(mut answer: Value) -> Result<Value, ClientError> {
    if let Some(error) = answer.get("error") {
        return Err(ClientError::Rpc {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_string(),
        });
    }
    answer
        .get_mut("result")
        .map(Value::take)
        .ok_or_else(|| ClientError::Protocol("an answer with neither result nor error".into()))
}

async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ClientError::from_reqwest)? {
        if body.len() + chunk.len() > limit {
            return Err(ClientError::Protocol(format!(
                "an answer larger than {limit} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

impl A2aClient {
    /// `http` must be `reach`'s client ([`Reach::client`](super::reach::Reach::client)).
    pub fn new(
        http: reqwest::Client,
        agent: RemoteAgent,
        bearer: Option<String>,
        reach: std::sync::Arc<super::reach::Reach>,
    ) -> Self {
        Self {
            http,
            agent,
            bearer,
            reach,
        }
    }

    pub fn agent(&self) -> &RemoteAgent {
        &self.agent
    }

    /// The stored credential goes with a request to `url` only on the agent's own origin.
    pub fn bearer_for(&self, url: &Url) -> Option<&str> {
        (origin(url) == origin(&self.agent.card_url))
            .then_some(self.bearer.as_deref())
            .flatten()
    }

    fn post(&self, method: &str, params: Value, stream: bool) -> reqwest::RequestBuilder {
        let body = json!({
            "jsonrpc": "2.0",
            "id": crate::secret::new_id("rpc"),
            "method": method,
            "params": params,
        });
        let mut request = self
            .http
            .post(self.agent.endpoint.clone())
            .header("A2A-Version", "1.0")
            .header(CONTENT_TYPE, "application/json")
            .header(
                ACCEPT,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .json(&body);
        if !stream {
            request = request.timeout(CALL_TIMEOUT);
        }
        if let Some(bearer) = &self.bearer {
            request = request.header(AUTHORIZATION, format!("Bearer {bearer}"));
        }
        request
    }

    async fn unary(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let response = self
            .post(method, params, false)
            .send()
            .await
            .map_err(ClientError::from_reqwest)?;
        check_status(response.status().as_u16())?;
        let body = read_limited(response, MAX_ANSWER_BYTES).await?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|e| ClientError::Protocol(format!("not JSON: {e}")))?;
        rpc_result(answer)
    }

    async fn open_stream(&self, method: &str, params: Value) -> Result<EventStream, ClientError> {
        let response = self
            .post(method, params, true)
            .send()
            .await
            .map_err(ClientError::from_reqwest)?;
        check_status(response.status().as_u16())?;
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            // A JSON-RPC error answered as a plain JSON body.
            let body = read_limited(response, MAX_ANSWER_BYTES).await?;
            let answer: Value = serde_json::from_slice(&body)
                .map_err(|e| ClientError::Protocol(format!("not an event stream: {e}")))?;
            rpc_result(answer)?;
            return Err(ClientError::Protocol(
                "a stream was asked for and a single answer came".into(),
            ));
        }
        Ok(EventStream {
            response,
            decoder: SseDecoder::new(),
            pending: Default::default(),
        })
    }

    fn send_params(message: &Message, return_immediately: bool) -> Value {
        json!({
            "message": codec::message(Version::V10, message),
            "configuration": {"returnImmediately": return_immediately},
        })
    }

    /// `SendMessage`, answering at once (`returnImmediately`): the task as it is, or a direct
    /// message.
    pub async fn send(&self, message: &Message) -> Result<Reply, ClientError> {
        let result = self
            .unary("SendMessage", Self::send_params(message, true))
            .await?;
        match codec::read_stream_item(Version::V10, &result)
            .map_err(|e| ClientError::Protocol(e.to_string()))?
        {
            StreamItem::Task(task) => Ok(Reply::Task(task)),
            StreamItem::Message(message) => Ok(Reply::Message(message)),
            StreamItem::Update(_) => Err(ClientError::Protocol(
                "SendMessage answered with an update".into(),
            )),
        }
    }

    /// `SendStreamingMessage`.
    pub async fn send_streaming(&self, message: &Message) -> Result<EventStream, ClientError> {
        self.open_stream("SendStreamingMessage", Self::send_params(message, false))
            .await
    }

    /// `GetTask`.
    pub async fn get(&self, task_id: &str) -> Result<Task, ClientError> {
        let result = self.unary("GetTask", json!({"id": task_id})).await?;
        codec::read_task(Version::V10, &result).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// `CancelTask`: the task as the remote has it after the request.
    pub async fn cancel(&self, task_id: &str) -> Result<Task, ClientError> {
        let result = self.unary("CancelTask", json!({"id": task_id})).await?;
        codec::read_task(Version::V10, &result).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// `SubscribeToTask`.
    pub async fn subscribe(&self, task_id: &str) -> Result<EventStream, ClientError> {
        self.open_stream("SubscribeToTask", json!({"id": task_id}))
            .await
    }

    /// Downloads a file part's URL: at most `limit` bytes within `timeout`; the credential
    /// goes along only to the agent's own origin.
    pub async fn download(
        &self,
        url: &str,
        limit: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, String> {
        let url = Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("`{url}` is not an http(s) URL"));
        }
        self.reach.check_url(&url)?;
        let mut request = self.http.get(url.clone()).timeout(timeout);
        if let Some(bearer) = self.bearer_for(&url) {
            request = request.header(AUTHORIZATION, format!("Bearer {bearer}"));
        }
        let response = request
            .send()
            .await
            .map_err(|e| ClientError::from_reqwest(e).to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status().as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|length| length > limit as u64)
        {
            return Err(format!("larger than {limit} bytes"));
        }
        read_limited(response, limit)
            .await
            .map_err(|e| e.to_string())
    }
}

/// An answer's HTTP status: 401/403 refuse the credential; JSON-RPC errors come with 200 (and
/// some servers use other 4xx for them: the body says); 5xx is no answer.
fn check_status(status: u16) -> Result<(), ClientError> {
    match status {
        401 | 403 => Err(ClientError::Unauthorized(status)),
        200..=299 | 400..=499 => Ok(()),
        _ => Err(ClientError::Transport(format!("HTTP {status}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn a_card_must_offer_a_1_0_jsonrpc_interface_on_its_own_origin() {
        let at = url("http://127.0.0.1:9000/.well-known/agent-card.json");
        let good = json!({"name": "remote", "capabilities": {"streaming": true},
            "supportedInterfaces": [
                {"url": "http://127.0.0.1:9000/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        let agent = RemoteAgent::from_card(&at, &good).unwrap();
        assert_eq!(agent.endpoint.as_str(), "http://127.0.0.1:9000/a2a");
        assert!(agent.streaming);

        let only_0_3 =
            json!({"name": "old", "url": "http://127.0.0.1:9000/", "protocolVersion": "0.3.0"});
        let refused = RemoteAgent::from_card(&at, &only_0_3).unwrap_err();
        assert!(
            refused.contains("A2A 1.0") && refused.contains("0.3.0"),
            "{refused}"
        );

        let elsewhere = json!({"name": "x", "supportedInterfaces": [
            {"url": "http://attacker.test/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
        let refused = RemoteAgent::from_card(&at, &elsewhere).unwrap_err();
        assert!(refused.contains("another origin"), "{refused}");

        assert!(RemoteAgent::from_card(&at, &json!({"supportedInterfaces": []})).is_err());
    }

    #[test]
    fn card_urls_are_absolute_http_without_credentials() {
        assert!(card_url("http://127.0.0.1:1/.well-known/agent-card.json").is_ok());
        for bad in [
            "file:///etc/passwd",
            "not a url",
            "http://user:pw@host/card",
            "ftp://host/card",
        ] {
            assert!(card_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rpc_errors_are_read_with_their_codes() {
        let error = rpc_result(
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "no"}}),
        )
        .unwrap_err();
        assert!(error.is_not_cancelable() && error.reached());
        assert!(!ClientError::Unreachable("refused".into()).reached());
    }
}
