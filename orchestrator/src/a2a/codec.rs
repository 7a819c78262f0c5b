//! The two wire versions, read into and written from the one [`model`](super::model).
//!
//! | | 0.3 | 1.0 |
//! |---|---|---|
//! | methods | `message/send`, `tasks/get`, ... | `SendMessage`, `GetTask`, ... |
//! | objects | tagged with `kind` | untagged; a send's result and stream events wrapped (`{"task": ...}`) |
//! | states, roles | `input-required`, `user` | `TASK_STATE_INPUT_REQUIRED`, `ROLE_USER` |
//! | parts | `{kind:"text",text}`, `{kind:"file",file:{bytes\|uri,mimeType,name}}`, `{kind:"data",data}` | `{text}`, `{raw,mediaType,filename}`, `{url,...}`, `{data}` |
//! | blocking | `configuration.blocking` (default true) | `configuration.returnImmediately` (default false) |
//! | end of a stream | `final: true` on the status update | the stream closes |
//!
//! Every refusal of params is -32602 naming the field.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

use super::model::{
    Artifact, Call, GetRequest, ListRequest, Message, Part, PartBody, Reply, Role, SendRequest,
    StreamItem, Task, TaskPage, TaskState, TaskStatus, Update,
};
use super::rpc::{A2aError, Version};

/// Most parts a message may have.
const MAX_PARTS: usize = 64;

fn invalid(message: impl Into<String>) -> A2aError {
    A2aError::InvalidParams(message.into())
}

/// A field by its JSON name (`historyLength`) or, as protobuf's JSON mapping also accepts, by
/// its proto name (`history_length`).
fn field<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    map.get(name).or_else(|| {
        let mut snake = String::with_capacity(name.len() + 4);
        for c in name.chars() {
            if c.is_ascii_uppercase() {
                snake.push('_');
                snake.push(c.to_ascii_lowercase());
            } else {
                snake.push(c);
            }
        }
        map.get(&snake)
    })
}

/// Reads a call: the method (named as `version` names it) and its params.
pub fn call(version: Version, method: &str, params: &Value) -> Result<Call, A2aError> {
    let kind = match (version, method) {
        (Version::V03, "message/send") | (Version::V10, "SendMessage") => "send",
        (Version::V03, "message/stream") | (Version::V10, "SendStreamingMessage") => "stream",
        (Version::V03, "tasks/get") | (Version::V10, "GetTask") => "get",
        (Version::V10, "ListTasks") => "list",
        (Version::V03, "tasks/cancel") | (Version::V10, "CancelTask") => "cancel",
        (Version::V03, "tasks/resubscribe") | (Version::V10, "SubscribeToTask") => "subscribe",
        (Version::V03, m) if m.starts_with("tasks/pushNotificationConfig/") => "push",
        (
            Version::V10,
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig",
        ) => "push",
        (Version::V03, "agent/getAuthenticatedExtendedCard")
        | (Version::V10, "GetExtendedAgentCard") => "card",
        _ => {
            let hint = match version {
                Version::V03 => " (A2A 0.3: no A2A-Version header)",
                Version::V10 => " (A2A 1.0)",
            };
            return Err(A2aError::MethodNotFound(format!(
                "no method {method:?}{hint}"
            )));
        }
    };
    let params = params
        .as_object()
        .ok_or_else(|| invalid("`params` must be an object"))?;
    Ok(match kind {
        "send" => Call::Send(send(version, params)?),
        "stream" => Call::Stream(send(version, params)?),
        "get" => Call::Get(GetRequest {
            id: task_id(params)?,
            history_length: count(params, "historyLength")?,
        }),
        "list" => Call::List(list(params)?),
        "cancel" => Call::Cancel {
            id: task_id(params)?,
        },
        "subscribe" => Call::Subscribe {
            id: task_id(params)?,
        },
        "push" => Call::PushConfig,
        _ => Call::ExtendedCard,
    })
}

fn task_id(params: &Map<String, Value>) -> Result<String, A2aError> {
    match params.get("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= 200 => Ok(id.clone()),
        _ => Err(invalid("`id` must be a task id (a non-empty string)")),
    }
}

/// A non-negative count, as a number or (proto's JSON for 64-bit integers) a string.
fn count(params: &Map<String, Value>, name: &str) -> Result<Option<usize>, A2aError> {
    let bad = || invalid(format!("`{name}` must be a non-negative integer"));
    match field(params, name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(bad),
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
}

fn flag(params: &Map<String, Value>, name: &str) -> Result<Option<bool>, A2aError> {
    match field(params, name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(format!("`{name}` must be true or false"))),
    }
}

fn optional_string(map: &Map<String, Value>, name: &str) -> Result<Option<String>, A2aError> {
    match field(map, name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= 1024 => Ok(Some(s.clone())),
        Some(_) => Err(invalid(format!("`{name}` must be a string"))),
    }
}

fn send(version: Version, params: &Map<String, Value>) -> Result<SendRequest, A2aError> {
    let message = params
        .get("message")
        .ok_or_else(|| invalid("`message` is missing"))?;
    let message = read_message(version, message)?;
    let configuration = match params.get("configuration") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return Err(invalid("`configuration` must be an object")),
    };
    let return_immediately = match version {
        Version::V03 => flag(&configuration, "blocking")?.is_some_and(|blocking| !blocking),
        Version::V10 => flag(&configuration, "returnImmediately")?.unwrap_or(false),
    };
    Ok(SendRequest {
        message,
        return_immediately,
        history_length: count(&configuration, "historyLength")?,
        idempotency_key: None,
    })
}

fn list(params: &Map<String, Value>) -> Result<ListRequest, A2aError> {
    let state = match params.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() || s == "TASK_STATE_UNSPECIFIED" => None,
        Some(Value::String(s)) => Some(
            state_from(Version::V10, s)
                .ok_or_else(|| invalid(format!("`status` {s:?} is not a task state")))?,
        ),
        Some(_) => return Err(invalid("`status` must be a task state")),
    };
    let page_size = count(params, "pageSize")?;
    if page_size.is_some_and(|n| !(1..=100).contains(&n)) {
        return Err(invalid("`pageSize` must be between 1 and 100"));
    }
    Ok(ListRequest {
        context_id: optional_string(params, "contextId")?,
        state,
        page_size,
        page_token: optional_string(params, "pageToken")?.filter(|t| !t.is_empty()),
        history_length: count(params, "historyLength")?,
        include_artifacts: flag(params, "includeArtifacts")?.unwrap_or(false),
        status_timestamp_after: match optional_string(params, "statusTimestampAfter")? {
            None => None,
            Some(text) => Some(
                agentbox_http::timestamp::unix_ms_from_rfc3339(&text).ok_or_else(|| {
                    invalid(format!(
                        "`statusTimestampAfter` {text:?} is not an RFC 3339 timestamp in UTC \
                         (`2026-12-06T20:00:00Z`)"
                    ))
                })?,
            ),
        },
    })
}

/// Reads a message a client sent.
fn read_message(version: Version, value: &Value) -> Result<Message, A2aError> {
    let map = value
        .as_object()
        .ok_or_else(|| invalid("`message` must be an object"))?;
    if version == Version::V03
        && let Some(kind) = map.get("kind")
        && kind != "message"
    {
        return Err(invalid("`message.kind` must be \"message\""));
    }
    let message_id = match field(map, "messageId") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= 200 => id.clone(),
        _ => return Err(invalid("`message.messageId` must be a non-empty string")),
    };
    let role = match (version, map.get("role").and_then(Value::as_str)) {
        (Version::V03, Some("user")) | (Version::V10, Some("ROLE_USER")) => Role::User,
        (Version::V03, Some("agent")) | (Version::V10, Some("ROLE_AGENT")) => Role::Agent,
        _ => {
            return Err(invalid(match version {
                Version::V03 => "`message.role` must be \"user\" or \"agent\"",
                Version::V10 => "`message.role` must be \"ROLE_USER\" or \"ROLE_AGENT\"",
            }));
        }
    };
    let parts = read_parts(version, map, "message", 1)?;
    let metadata = match map.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(_) => return Err(invalid("`message.metadata` must be an object")),
    };
    Ok(Message {
        message_id,
        role,
        parts,
        context_id: optional_string(map, "contextId")?.filter(|c| !c.is_empty()),
        task_id: optional_string(map, "taskId")?.filter(|t| !t.is_empty()),
        metadata,
    })
}

/// The `parts` of a message or an artifact (`owner` names it): `fewest` to [`MAX_PARTS`].
fn read_parts(
    version: Version,
    map: &Map<String, Value>,
    owner: &str,
    fewest: usize,
) -> Result<Vec<Part>, A2aError> {
    match map.get("parts") {
        Some(Value::Array(parts)) if (fewest..=MAX_PARTS).contains(&parts.len()) => parts
            .iter()
            .enumerate()
            .map(|(i, part)| read_part(version, part, i))
            .collect(),
        _ if fewest == 0 => Err(invalid(format!(
            "`{owner}.parts` must be a list of at most {MAX_PARTS} parts"
        ))),
        _ => Err(invalid(format!(
            "`{owner}.parts` must be a list of {fewest} to {MAX_PARTS} parts"
        ))),
    }
}

fn read_part(version: Version, value: &Value, index: usize) -> Result<Part, A2aError> {
    let at = format!("message.parts[{index}]");
    let map = value
        .as_object()
        .ok_or_else(|| invalid(format!("`{at}` must be an object")))?;
    let bad = |what: &str| invalid(format!("`{at}`: {what}"));
    let text_of = |map: &Map<String, Value>, key: &str| -> Result<Option<String>, A2aError> {
        match field(map, key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(&format!("`{key}` must be a string"))),
        }
    };
    match version {
        Version::V03 => {
            let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
            match kind {
                "text" => Ok(Part::text(
                    text_of(map, "text")?.ok_or_else(|| bad("a text part needs `text`"))?,
                )),
                "data" => Ok(Part {
                    body: PartBody::Data(
                        map.get("data")
                            .cloned()
                            .ok_or_else(|| bad("a data part needs `data`"))?,
                    ),
                    media_type: None,
                    filename: None,
                }),
                "file" => {
                    let file = map
                        .get("file")
                        .and_then(Value::as_object)
                        .ok_or_else(|| bad("a file part needs a `file` object"))?;
                    let body = match (text_of(file, "bytes")?, text_of(file, "uri")?) {
                        (Some(bytes), None) => PartBody::Bytes(
                            BASE64
                                .decode(bytes.as_bytes())
                                .map_err(|_| bad("`file.bytes` must be base64"))?,
                        ),
                        (None, Some(uri)) => PartBody::Url(uri),
                        _ => return Err(bad("a file has either `bytes` or `uri`")),
                    };
                    Ok(Part {
                        body,
                        media_type: text_of(file, "mimeType")?,
                        filename: text_of(file, "name")?,
                    })
                }
                _ => Err(bad("`kind` must be \"text\", \"file\" or \"data\"")),
            }
        }
        Version::V10 => {
            let body = match (
                text_of(map, "text")?,
                text_of(map, "raw")?,
                text_of(map, "url")?,
                map.get("data"),
            ) {
                (Some(text), None, None, None) => PartBody::Text(text),
                (None, Some(raw), None, None) => PartBody::Bytes(
                    BASE64
                        .decode(raw.as_bytes())
                        .map_err(|_| bad("`raw` must be base64"))?,
                ),
                (None, None, Some(url), None) => PartBody::Url(url),
                (None, None, None, Some(data)) => PartBody::Data(data.clone()),
                _ => {
                    return Err(bad(
                        "a part has exactly one of `text`, `raw`, `url`, `data`",
                    ));
                }
            };
            Ok(Part {
                body,
                media_type: text_of(map, "mediaType")?,
                filename: text_of(map, "filename")?,
            })
        }
    }
}

fn state_from(version: Version, text: &str) -> Option<TaskState> {
    TaskState::ALL
        .into_iter()
        .find(|state| state_name(version, *state) == text)
}

impl TaskState {
    const ALL: [TaskState; 8] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::AuthRequired,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::Rejected,
    ];
}

/// A state's name on `version`'s wire.
pub fn state_wire_name(version: Version, state: TaskState) -> &'static str {
    state_name(version, state)
}

fn state_name(version: Version, state: TaskState) -> &'static str {
    match (version, state) {
        (Version::V03, TaskState::Submitted) => "submitted",
        (Version::V03, TaskState::Working) => "working",
        (Version::V03, TaskState::InputRequired) => "input-required",
        (Version::V03, TaskState::AuthRequired) => "auth-required",
        (Version::V03, TaskState::Completed) => "completed",
        (Version::V03, TaskState::Failed) => "failed",
        (Version::V03, TaskState::Canceled) => "canceled",
        (Version::V03, TaskState::Rejected) => "rejected",
        (Version::V10, TaskState::Submitted) => "TASK_STATE_SUBMITTED",
        (Version::V10, TaskState::Working) => "TASK_STATE_WORKING",
        (Version::V10, TaskState::InputRequired) => "TASK_STATE_INPUT_REQUIRED",
        (Version::V10, TaskState::AuthRequired) => "TASK_STATE_AUTH_REQUIRED",
        (Version::V10, TaskState::Completed) => "TASK_STATE_COMPLETED",
        (Version::V10, TaskState::Failed) => "TASK_STATE_FAILED",
        (Version::V10, TaskState::Canceled) => "TASK_STATE_CANCELED",
        (Version::V10, TaskState::Rejected) => "TASK_STATE_REJECTED",
    }
}

/// Adds `key: value` when there is a value.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        map.insert(key.to_string(), value);
    }
}

fn part_json(version: Version, part: &Part) -> Value {
    let mut map = Map::new();
    match version {
        Version::V03 => match &part.body {
            PartBody::Text(text) => {
                map.insert("kind".into(), "text".into());
                map.insert("text".into(), text.clone().into());
            }
            PartBody::Data(data) => {
                map.insert("kind".into(), "data".into());
                map.insert("data".into(), data.clone());
            }
            PartBody::Bytes(_) | PartBody::Url(_) => {
                let mut file = Map::new();
                match &part.body {
                    PartBody::Bytes(bytes) => {
                        file.insert("bytes".into(), BASE64.encode(bytes).into());
                    }
                    PartBody::Url(url) => {
                        file.insert("uri".into(), url.clone().into());
                    }
                    _ => {}
                }
                put(
                    &mut file,
                    "mimeType",
                    part.media_type.clone().map(Value::from),
                );
                put(&mut file, "name", part.filename.clone().map(Value::from));
                map.insert("kind".into(), "file".into());
                map.insert("file".into(), Value::Object(file));
            }
        },
        Version::V10 => {
            match &part.body {
                PartBody::Text(text) => map.insert("text".into(), text.clone().into()),
                PartBody::Bytes(bytes) => map.insert("raw".into(), BASE64.encode(bytes).into()),
                PartBody::Url(url) => map.insert("url".into(), url.clone().into()),
                PartBody::Data(data) => map.insert("data".into(), data.clone()),
            };
            put(
                &mut map,
                "mediaType",
                part.media_type.clone().map(Value::from),
            );
            put(&mut map, "filename", part.filename.clone().map(Value::from));
        }
    }
    Value::Object(map)
}

/// A message as `version` writes it.
pub fn message(version: Version, message: &Message) -> Value {
    let mut map = Map::new();
    if version == Version::V03 {
        map.insert("kind".into(), "message".into());
    }
    map.insert("messageId".into(), message.message_id.clone().into());
    let role = match (version, message.role) {
        (Version::V03, Role::User) => "user",
        (Version::V03, Role::Agent) => "agent",
        (Version::V10, Role::User) => "ROLE_USER",
        (Version::V10, Role::Agent) => "ROLE_AGENT",
    };
    map.insert("role".into(), role.into());
    map.insert(
        "parts".into(),
        message
            .parts
            .iter()
            .map(|p| part_json(version, p))
            .collect(),
    );
    put(
        &mut map,
        "contextId",
        message.context_id.clone().map(Value::from),
    );
    put(&mut map, "taskId", message.task_id.clone().map(Value::from));
    put(
        &mut map,
        "metadata",
        message.metadata.clone().map(Value::Object),
    );
    Value::Object(map)
}

fn status(version: Version, status: &TaskStatus) -> Value {
    let mut map = Map::new();
    map.insert("state".into(), state_name(version, status.state).into());
    put(
        &mut map,
        "message",
        status.message.as_ref().map(|m| message(version, m)),
    );
    map.insert("timestamp".into(), status.timestamp.clone().into());
    Value::Object(map)
}

fn artifact(version: Version, artifact: &Artifact) -> Value {
    let mut map = Map::new();
    map.insert("artifactId".into(), artifact.artifact_id.clone().into());
    put(&mut map, "name", artifact.name.clone().map(Value::from));
    map.insert(
        "parts".into(),
        artifact
            .parts
            .iter()
            .map(|p| part_json(version, p))
            .collect(),
    );
    Value::Object(map)
}

/// A task as `version` writes it.
pub fn task(version: Version, task: &Task) -> Value {
    let mut map = Map::new();
    if version == Version::V03 {
        map.insert("kind".into(), "task".into());
    }
    map.insert("id".into(), task.id.clone().into());
    map.insert("contextId".into(), task.context_id.clone().into());
    map.insert("status".into(), status(version, &task.status));
    map.insert(
        "history".into(),
        task.history.iter().map(|m| message(version, m)).collect(),
    );
    map.insert(
        "artifacts".into(),
        task.artifacts
            .iter()
            .map(|a| artifact(version, a))
            .collect(),
    );
    put(
        &mut map,
        "metadata",
        task.metadata.clone().map(Value::Object),
    );
    Value::Object(map)
}

/// A send's result: 1.0 wraps it (`{"task": ...}` or `{"message": ...}`), 0.3 tags it.
pub fn reply(version: Version, reply: &Reply) -> Value {
    match (version, reply) {
        (Version::V03, Reply::Task(t)) => task(version, t),
        (Version::V03, Reply::Message(m)) => message(version, m),
        (Version::V10, Reply::Task(t)) => json!({"task": task(version, t)}),
        (Version::V10, Reply::Message(m)) => json!({"message": message(version, m)}),
    }
}

/// One stream event's result.
pub fn stream_item(version: Version, item: &StreamItem) -> Value {
    match item {
        StreamItem::Task(t) => reply(version, &Reply::Task(t.clone())),
        StreamItem::Message(m) => reply(version, &Reply::Message(m.clone())),
        StreamItem::Update(update) => {
            let final_ = update.is_final();
            let (name, mut map) = match update {
                Update::Status {
                    task_id,
                    context_id,
                    status: s,
                } => {
                    let mut map = ids(task_id, context_id);
                    map.insert("status".into(), status(version, s));
                    ("statusUpdate", map)
                }
                Update::Artifact {
                    task_id,
                    context_id,
                    artifact: a,
                } => {
                    let mut map = ids(task_id, context_id);
                    map.insert("artifact".into(), artifact(version, a));
                    ("artifactUpdate", map)
                }
            };
            match version {
                Version::V10 => json!({ name: Value::Object(map) }),
                Version::V03 => {
                    if name == "statusUpdate" {
                        map.insert("kind".into(), "status-update".into());
                        map.insert("final".into(), final_.into());
                    } else {
                        map.insert("kind".into(), "artifact-update".into());
                    }
                    Value::Object(map)
                }
            }
        }
    }
}

fn ids(task_id: &str, context_id: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("taskId".into(), task_id.into());
    map.insert("contextId".into(), context_id.into());
    map
}

/// What a remote agent answers, read back into the model (the client's side): a task, a
/// send's reply, a stream event. Refusals are -32602 naming the field, as for a request.
fn read_status(version: Version, value: &Value) -> Result<TaskStatus, A2aError> {
    let map = value
        .as_object()
        .ok_or_else(|| invalid("`status` must be an object"))?;
    let state = map
        .get("state")
        .and_then(Value::as_str)
        .and_then(|name| state_from(version, name))
        .ok_or_else(|| {
            invalid(format!(
                "`status.state` is not a state: {:?}",
                map.get("state")
            ))
        })?;
    let message = match map.get("message") {
        None | Some(Value::Null) => None,
        Some(message) => Some(read_message(version, message)?),
    };
    Ok(TaskStatus {
        state,
        message,
        timestamp: optional_string(map, "timestamp")?.unwrap_or_default(),
    })
}

fn read_artifact(version: Version, value: &Value) -> Result<Artifact, A2aError> {
    let map = value
        .as_object()
        .ok_or_else(|| invalid("`artifact` must be an object"))?;
    let artifact_id = optional_string(map, "artifactId")?
        .filter(|id| !id.is_empty())
        .ok_or_else(|| invalid("`artifact.artifactId` must be a non-empty string"))?;
    let parts = read_parts(version, map, "artifact", 0)?;
    Ok(Artifact {
        artifact_id,
        name: optional_string(map, "name")?,
        parts,
    })
}

/// A task, as either version writes it.
pub fn read_task(version: Version, value: &Value) -> Result<Task, A2aError> {
    let map = value
        .as_object()
        .ok_or_else(|| invalid("`task` must be an object"))?;
    let id = optional_string(map, "id")?
        .filter(|id| !id.is_empty())
        .ok_or_else(|| invalid("`task.id` must be a non-empty string"))?;
    let list = |name: &str| match map.get(name) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(_) => Err(invalid(format!("`task.{name}` must be a list"))),
    };
    Ok(Task {
        id,
        context_id: optional_string(map, "contextId")?.unwrap_or_default(),
        status: read_status(
            version,
            map.get("status")
                .ok_or_else(|| invalid("`task.status` is missing"))?,
        )?,
        history: list("history")?
            .iter()
            .map(|m| read_message(version, m))
            .collect::<Result<_, _>>()?,
        artifacts: list("artifacts")?
            .iter()
            .map(|a| read_artifact(version, a))
            .collect::<Result<_, _>>()?,
        metadata: map.get("metadata").and_then(Value::as_object).cloned(),
    })
}

/// One stream event's result (or a send's: a task or a message), as either version writes it.
pub fn read_stream_item(version: Version, value: &Value) -> Result<StreamItem, A2aError> {
    let map = value
        .as_object()
        .ok_or_else(|| invalid("a result must be an object"))?;
    let (kind, body) = match version {
        Version::V10 => {
            let mut wrapped = map.iter().filter(|(k, _)| {
                matches!(
                    k.as_str(),
                    "task" | "message" | "statusUpdate" | "artifactUpdate"
                )
            });
            match (wrapped.next(), wrapped.next()) {
                (Some((kind, body)), None) => (kind.as_str(), body),
                _ => {
                    return Err(invalid(
                        "a result holds exactly one of `task`, `message`, `statusUpdate`, \
                         `artifactUpdate`",
                    ));
                }
            }
        }
        Version::V03 => {
            let kind = match map.get("kind").and_then(Value::as_str) {
                Some("task") => "task",
                Some("message") => "message",
                Some("status-update") => "statusUpdate",
                Some("artifact-update") => "artifactUpdate",
                _ => {
                    return Err(invalid(
                        "a result's `kind` is not a task, message or update",
                    ));
                }
            };
            (kind, value)
        }
    };
    let ids = |body: &Value| -> Result<(String, String), A2aError> {
        let map = body
            .as_object()
            .ok_or_else(|| invalid(format!("`{kind}` must be an object")))?;
        let task_id = optional_string(map, "taskId")?
            .filter(|id| !id.is_empty())
            .ok_or_else(|| invalid(format!("`{kind}.taskId` must be a non-empty string")))?;
        Ok((
            task_id,
            optional_string(map, "contextId")?.unwrap_or_default(),
        ))
    };
    Ok(match kind {
        "task" => StreamItem::Task(read_task(version, body)?),
        "message" => StreamItem::Message(read_message(version, body)?),
        "statusUpdate" => {
            let (task_id, context_id) = ids(body)?;
            StreamItem::Update(Update::Status {
                task_id,
                context_id,
                status: read_status(
                    version,
                    body.get("status")
                        .ok_or_else(|| invalid("`statusUpdate.status` is missing"))?,
                )?,
            })
        }
        _ => {
            let (task_id, context_id) = ids(body)?;
            StreamItem::Update(Update::Artifact {
                task_id,
                context_id,
                artifact: read_artifact(
                    version,
                    body.get("artifact")
                        .ok_or_else(|| invalid("`artifactUpdate.artifact` is missing"))?,
                )?,
            })
        }
    })
}

/// A page of `ListTasks` (1.0 only).
pub fn task_page(page: &TaskPage) -> Value {
    json!({
        "tasks": page.tasks.iter().map(|t| task(Version::V10, t)).collect::<Vec<_>>(),
        "nextPageToken": page.next_page_token,
        "pageSize": page.page_size,
        "totalSize": page.total_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_server_writes_the_client_reads_back_in_both_versions() {
        let sample = Task {
            id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: Some(Message::agent_text(
                    "m2".into(),
                    "Which colour?",
                    Some("t1".into()),
                    Some("c1".into()),
                )),
                timestamp: "2026-12-06T20:00:00.000Z".into(),
            },
            history: vec![],
            artifacts: vec![Artifact {
                artifact_id: "a1".into(),
                name: Some("report.txt".into()),
                parts: vec![Part {
                    body: PartBody::Bytes(b"bytes".to_vec()),
                    media_type: Some("text/plain".into()),
                    filename: Some("report.txt".into()),
                }],
            }],
            metadata: None,
        };
        for version in [Version::V03, Version::V10] {
            let written = task(version, &sample);
            assert_eq!(read_task(version, &written).unwrap(), sample, "{version:?}");
            for item in [
                StreamItem::Task(sample.clone()),
                StreamItem::Update(Update::Status {
                    task_id: "t1".into(),
                    context_id: "c1".into(),
                    status: sample.status.clone(),
                }),
                StreamItem::Update(Update::Artifact {
                    task_id: "t1".into(),
                    context_id: "c1".into(),
                    artifact: sample.artifacts[0].clone(),
                }),
            ] {
                let written = stream_item(version, &item);
                assert_eq!(
                    read_stream_item(version, &written).unwrap(),
                    item,
                    "{version:?}"
                );
            }
        }
        // A 1.0 result wraps exactly one thing; a state must be one.
        assert!(read_stream_item(Version::V10, &json!({"task": {}, "message": {}})).is_err());
        let mut bad = task(Version::V10, &sample);
        bad["status"]["state"] = json!("TASK_STATE_SLEEPING");
        assert!(read_task(Version::V10, &bad).is_err());
    }

    #[test]
    fn a_0_3_send_is_read_and_its_mistakes_are_invalid_params() {
        let params = json!({"message": {"kind": "message", "messageId": "m1", "role": "user",
            "parts": [{"kind": "text", "text": "hi"}, {"kind": "data", "data": {"a": 1}}]},
            "configuration": {"blocking": false, "historyLength": 2}});
        let Call::Send(send) = call(Version::V03, "message/send", &params).unwrap() else {
            panic!("not a send");
        };
        assert!(send.return_immediately);
        assert_eq!(send.history_length, Some(2));
        assert_eq!(send.message.text(), "hi");
        for bad in [
            json!({}),
            json!({"message": {"messageId": "m", "role": "user", "parts": "x"}}),
            json!({"message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]}}),
            json!({"message": {"messageId": "m", "parts": [{"kind": "text", "text": "x"}]}}),
            json!({"message": {"messageId": "m", "role": "user", "parts": [{"kind": "nope"}]}}),
        ] {
            assert_eq!(
                call(Version::V03, "message/send", &bad).unwrap_err().code(),
                -32602,
                "{bad}"
            );
        }
        assert_eq!(
            call(Version::V03, "SendMessage", &params)
                .unwrap_err()
                .code(),
            -32601
        );
    }

    #[test]
    fn a_1_0_send_is_read_with_its_enums_and_string_integers() {
        let params = json!({"message": {"messageId": "m1", "role": "ROLE_USER",
            "parts": [{"text": "hi"}, {"raw": "dGNr", "mediaType": "text/plain", "filename": "a.txt"}]},
            "configuration": {"returnImmediately": true, "historyLength": "3"}});
        let Call::Send(send) = call(Version::V10, "SendMessage", &params).unwrap() else {
            panic!("not a send");
        };
        assert!(send.return_immediately);
        assert_eq!(send.history_length, Some(3));
        assert_eq!(send.message.parts[1].body, PartBody::Bytes(b"tck".to_vec()));
        let two_bodies = json!({"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"text": "a", "url": "http://x"}]}});
        assert_eq!(
            call(Version::V10, "SendMessage", &two_bodies)
                .unwrap_err()
                .code(),
            -32602
        );
        let list = call(
            Version::V10,
            "ListTasks",
            &json!({"pageSize": 5, "status": "TASK_STATE_WORKING"}),
        )
        .unwrap();
        assert_eq!(
            list,
            Call::List(ListRequest {
                page_size: Some(5),
                state: Some(TaskState::Working),
                ..ListRequest::default()
            })
        );
        assert_eq!(
            call(Version::V10, "ListTasks", &json!({"pageSize": 0}))
                .unwrap_err()
                .code(),
            -32602
        );
    }

    #[test]
    fn proto_field_names_are_read_as_json_names() {
        let get = call(
            Version::V10,
            "GetTask",
            &json!({"id": "t", "history_length": 1}),
        )
        .unwrap();
        assert_eq!(
            get,
            Call::Get(GetRequest {
                id: "t".into(),
                history_length: Some(1)
            })
        );
        let params = json!({"message": {"message_id": "m", "role": "ROLE_USER",
            "context_id": "c", "parts": [{"text": "x"}]}});
        let Call::Send(send) = call(Version::V10, "SendMessage", &params).unwrap() else {
            panic!("not a send");
        };
        assert_eq!(send.message.context_id.as_deref(), Some("c"));
    }

    #[test]
    fn a_task_and_its_updates_are_written_in_each_version() {
        let t = Task {
            id: "run_1".into(),
            context_id: "ctx".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: Some(Message::agent_text("q".into(), "which?", None, None)),
                timestamp: "2026-01-01T00:00:00Z".into(),
            },
            history: vec![],
            artifacts: vec![Artifact {
                artifact_id: "outputs/a.txt".into(),
                name: Some("a.txt".into()),
                parts: vec![Part {
                    body: PartBody::Url("http://h/a".into()),
                    media_type: Some("text/plain".into()),
                    filename: Some("a.txt".into()),
                }],
            }],
            metadata: None,
        };
        let v03 = reply(Version::V03, &Reply::Task(t.clone()));
        assert_eq!(v03["kind"], "task");
        assert_eq!(v03["status"]["state"], "input-required");
        assert_eq!(v03["status"]["message"]["role"], "agent");
        assert_eq!(v03["artifacts"][0]["parts"][0]["file"]["uri"], "http://h/a");
        let v10 = reply(Version::V10, &Reply::Task(t.clone()));
        assert_eq!(v10["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(v10["task"]["artifacts"][0]["parts"][0]["url"], "http://h/a");
        let update = StreamItem::Update(Update::Status {
            task_id: t.id.clone(),
            context_id: t.context_id.clone(),
            status: t.status.clone(),
        });
        let v03 = stream_item(Version::V03, &update);
        assert_eq!(v03["kind"], "status-update");
        assert_eq!(v03["final"], true);
        let v10 = stream_item(Version::V10, &update);
        assert_eq!(v10["statusUpdate"]["taskId"], "run_1");
        assert!(v10["statusUpdate"].get("final").is_none());
    }
}
