//! Code execution: `/v1/jupyter/*` (Python on real IPython kernels, [`crate::jupyter`]),
//! `/v1/nodejs/*` (JavaScript on Node, [`crate::nodejs`]) and `/v1/code/*`, which dispatches by
//! language to the other two. Field names and shapes are AIO's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::AioJson;
use super::types::{
    CodeExecuteRequest, CodeExecuteResponse, CodeInfoResponse, CodeLanguageInfo, CodeOutput,
    Envelope, ErrorBody, JupyterCreateSessionRequest, JupyterCreateSessionResponse,
    JupyterDeleteResult, JupyterExecuteRequest, JupyterExecuteResponse, JupyterInfoResponse,
    JupyterSessionInfo, JupyterSessionsResult, NodeJsCreateSessionRequest,
    NodeJsCreateSessionResponse, NodeJsDeleteSessionResponse, NodeJsExecuteRequest,
    NodeJsExecuteResponse, NodeJsPackageInfo, NodeJsRuntimeInfo, NodeJsSessionInfo,
    NodeJsSessionListResponse, NodeJsSessionResponse, NodeJsUpdateSessionRequest,
    NodeJsUpdateSessionResponse,
};
use super::validate::{self, SecondsRange};
use crate::jupyter::{ExecuteRequest, JupyterError, Output};
use crate::nodejs::{NodeError, RunRequest, RunResult, SessionInfo};

/// Longest code accepted (bytes).
const MAX_CODE_BYTES: usize = 1024 * 1024;
/// Default and longest run time.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_TIMEOUT_SECS: f64 = 600.0;
const TIMEOUT_RANGE: SecondsRange = SecondsRange::above(0.0, MAX_TIMEOUT_SECS);
/// Most files in one Node run, and their bytes together.
const MAX_FILES: usize = 64;
const MAX_FILES_BYTES: usize = 16 * 1024 * 1024;
/// Longest session id.
const MAX_SESSION_ID_CHARS: usize = 128;
/// A Node session's idle time: default and longest (milliseconds).
const MAX_IDLE_MS: i64 = 24 * 3600 * 1000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(jupyter_execute))
        .routes(routes!(jupyter_info))
        .routes(routes!(jupyter_sessions, jupyter_delete_sessions))
        .routes(routes!(jupyter_create_session))
        .routes(routes!(jupyter_delete_session))
        .routes(routes!(node_execute))
        .routes(routes!(node_info))
        .routes(routes!(node_sessions, node_create_session))
        .routes(routes!(
            node_session,
            node_update_session,
            node_delete_session
        ))
        .routes(routes!(code_execute))
        .routes(routes!(code_info))
}

impl From<JupyterError> for ApiError {
    fn from(error: JupyterError) -> Self {
        let status = match &error {
            JupyterError::UnknownKernel { .. } => {
                return ApiError::invalid("kernel_name", format!("`kernel_name`: {error}"));
            }
            JupyterError::NoSession(_) => StatusCode::NOT_FOUND,
            JupyterError::SessionExists(_) => StatusCode::CONFLICT,
            JupyterError::TooManySessions(_) => StatusCode::TOO_MANY_REQUESTS,
            JupyterError::Spawn { .. }
            | JupyterError::StartTimeout(_)
            | JupyterError::Died
            | JupyterError::Stuck
            | JupyterError::Protocol(_)
            | JupyterError::Runtime(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.to_string())
    }
}

impl From<NodeError> for ApiError {
    fn from(error: NodeError) -> Self {
        let status = match &error {
            NodeError::NoSession(_) => StatusCode::NOT_FOUND,
            NodeError::SessionExists(_) => StatusCode::CONFLICT,
            NodeError::TooManySessions(_) => StatusCode::TOO_MANY_REQUESTS,
            NodeError::Spawn { .. } | NodeError::Runtime(_) | NodeError::SessionDied(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        ApiError::new(status, error.to_string())
    }
}

fn check_code(code: &str) -> Result<(), ApiError> {
    validate::at_most_bytes("code", code, MAX_CODE_BYTES)?;
    // A NUL in the source hung a Jupyter call for its whole timeout, after which the kernel was
    // killed and the session's state lost (issue 27): refused before it reaches a kernel.
    validate::no_nul("code", code)
}

fn timeout(value: Option<f64>) -> Result<Duration, ApiError> {
    Ok(validate::optional_seconds("timeout", value, TIMEOUT_RANGE)?.unwrap_or(DEFAULT_TIMEOUT))
}

fn session_id(field: &str, id: Option<String>) -> Result<Option<String>, ApiError> {
    id.map(|id| validate::identifier(field, id, MAX_SESSION_ID_CHARS))
        .transpose()
}

/// An optional absolute directory that exists.
fn directory(field: &str, path: Option<String>) -> Result<Option<PathBuf>, ApiError> {
    let Some(path) = path else { return Ok(None) };
    let path = validate::absolute_path(field, path)?;
    if !path.is_dir() {
        return Err(ApiError::invalid(
            field,
            format!(
                "`{field}` must be an existing directory: {}",
                path.display()
            ),
        ));
    }
    Ok(Some(path))
}

fn wire_output(output: Output) -> CodeOutput {
    let map = |v: Option<Value>| -> Option<BTreeMap<String, Value>> {
        match v {
            Some(Value::Object(m)) => Some(m.into_iter().collect()),
            _ => None,
        }
    };
    CodeOutput {
        output_type: output.output_type.to_string(),
        name: output.name,
        text: output.text,
        data: map(output.data),
        metadata: map(output.metadata),
        execution_count: output.execution_count.map(|c| c as u64),
        ename: output.ename,
        evalue: output.evalue,
        traceback: output.traceback,
    }
}

/// Runs Python on a Jupyter kernel. Without `session_id` the code runs in the shared session
/// `default`; an unknown `session_id` creates that session. Errors raised by the code are an
/// answer with status `error` and an `error` output (name, value, traceback), not an HTTP
/// error; so is a kernel that died (the next call starts a new one).
#[utoipa::path(post, path = "/v1/jupyter/execute", tag = "jupyter",
    request_body = JupyterExecuteRequest,
    responses(
        (status = 200, body = Envelope<JupyterExecuteResponse>),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 500, description = "the kernel could not be started", body = ErrorBody),
        (status = 429, description = "the session limit is reached: delete a session first", body = ErrorBody),
    ))]
pub async fn jupyter_execute(
    State(state): State<AppState>,
    AioJson(request): AioJson<JupyterExecuteRequest>,
) -> Result<Json<Envelope<JupyterExecuteResponse>>, ApiError> {
    check_code(&request.code)?;
    let timeout = timeout(request.timeout)?;
    let session_id = session_id("session_id", request.session_id)?;
    let cwd = directory("cwd", request.cwd)?;
    let outcome = state
        .jupyter
        .execute(ExecuteRequest {
            code: request.code.clone(),
            session_id,
            kernel_name: request.kernel_name,
            cwd,
            timeout,
        })
        .await?;
    let execution = outcome.execution;
    Ok(Json(Envelope::ok(JupyterExecuteResponse {
        kernel_name: outcome.kernel_name,
        session_id: Some(outcome.session_id),
        status: execution.status.as_str().to_string(),
        execution_count: execution.execution_count.map(|c| c as u64),
        outputs: execution.outputs.into_iter().map(wire_output).collect(),
        code: request.code,
        msg_id: Some(execution.msg_id).filter(|m| !m.is_empty()),
    })))
}

/// The kernels available and the session limits.
#[utoipa::path(get, path = "/v1/jupyter/info", tag = "jupyter",
    responses((status = 200, body = Envelope<JupyterInfoResponse>)))]
pub async fn jupyter_info(State(state): State<AppState>) -> Json<Envelope<JupyterInfoResponse>> {
    let config = state.jupyter.config();
    Json(Envelope::ok(JupyterInfoResponse {
        default_kernel: crate::jupyter::DEFAULT_KERNEL.to_string(),
        available_kernels: state.jupyter.kernel_names().to_vec(),
        active_sessions: state.jupyter.list().len() as u64,
        session_timeout_seconds: config.idle_expiry.as_secs(),
        max_sessions: config.max_sessions as u64,
        description: "Python on IPython kernels (ipykernel over ZeroMQ); one kernel per session"
            .to_string(),
        kernel_detection: "the installed python3 interpreter".to_string(),
    }))
}

/// The Jupyter sessions.
#[utoipa::path(get, path = "/v1/jupyter/sessions", tag = "jupyter",
    responses((status = 200, body = Envelope<JupyterSessionsResult>)))]
pub async fn jupyter_sessions(
    State(state): State<AppState>,
) -> Json<Envelope<JupyterSessionsResult>> {
    let sessions = state
        .jupyter
        .list()
        .into_iter()
        .map(|s| {
            (
                s.id,
                JupyterSessionInfo {
                    kernel_name: s.kernel_name,
                    last_used: s.last_used,
                    age_seconds: s.age.as_secs(),
                },
            )
        })
        .collect();
    Json(Envelope::ok(JupyterSessionsResult { sessions }))
}

/// Ends every Jupyter session and its kernel.
#[utoipa::path(delete, path = "/v1/jupyter/sessions", tag = "jupyter",
    responses((status = 200, body = Envelope<JupyterDeleteResult>)))]
pub async fn jupyter_delete_sessions(
    State(state): State<AppState>,
) -> Json<Envelope<JupyterDeleteResult>> {
    let deleted = state.jupyter.delete_all().await;
    Json(Envelope {
        message: format!("{deleted} sessions deleted"),
        ..Envelope::ok(JupyterDeleteResult {
            deleted: deleted as u64,
        })
    })
}

/// Creates a session and starts its kernel (409 if the id is taken).
#[utoipa::path(post, path = "/v1/jupyter/sessions/create", tag = "jupyter",
    request_body = JupyterCreateSessionRequest,
    responses(
        (status = 200, body = Envelope<JupyterCreateSessionResponse>),
        (status = 409, description = "a session with this id exists", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 500, description = "the kernel could not be started", body = ErrorBody),
        (status = 429, description = "the session limit is reached: delete a session first", body = ErrorBody),
    ))]
pub async fn jupyter_create_session(
    State(state): State<AppState>,
    AioJson(request): AioJson<JupyterCreateSessionRequest>,
) -> Result<Json<Envelope<JupyterCreateSessionResponse>>, ApiError> {
    let id = session_id("session_id", request.session_id)?;
    let cwd = directory("cwd", request.cwd)?;
    let (session_id, kernel_name) = state
        .jupyter
        .create(id, request.kernel_name.as_deref(), cwd)
        .await?;
    Ok(Json(Envelope::ok(JupyterCreateSessionResponse {
        message: format!("session {session_id} created; its kernel is running"),
        session_id,
        kernel_name,
    })))
}

/// Ends a session and its kernel.
#[utoipa::path(delete, path = "/v1/jupyter/sessions/{session_id}", tag = "jupyter",
    params(("session_id" = String, Path)),
    responses(
        (status = 200, body = Envelope<JupyterDeleteResult>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn jupyter_delete_session(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
) -> Result<Json<Envelope<JupyterDeleteResult>>, ApiError> {
    state.jupyter.delete(&session_id).await?;
    Ok(Json(Envelope {
        message: format!("session {session_id} deleted"),
        ..Envelope::ok(JupyterDeleteResult { deleted: 1 })
    }))
}

fn node_files(
    files: Option<BTreeMap<String, Option<String>>>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let files = files.unwrap_or_default();
    if files.len() > MAX_FILES {
        return Err(ApiError::invalid(
            "files",
            format!(
                "`files` may hold at most {MAX_FILES} files, got {}",
                files.len()
            ),
        ));
    }
    let mut total = 0usize;
    let mut out = BTreeMap::new();
    for (name, contents) in files {
        let plain = !name.is_empty()
            && name.len() <= 255
            && name != "."
            && name != ".."
            && name != "main.js"
            && !name.contains(['/', '\0']);
        if !plain {
            return Err(ApiError::invalid_at(
                vec!["body".into(), "files".into(), name.clone()],
                format!(
                    "`files` names must be plain file names (no `/`, not `.`, `..` or `main.js`), got {name:?}"
                ),
            ));
        }
        let contents = contents.unwrap_or_default();
        total += contents.len();
        if total > MAX_FILES_BYTES {
            return Err(ApiError::too_large(format!(
                "`files` may hold at most {MAX_FILES_BYTES} bytes together"
            )));
        }
        out.insert(name, contents);
    }
    Ok(out)
}

/// The installed Node's major version (`18` of `v18.19.0`).
async fn node_major(state: &AppState) -> Option<String> {
    let (node, _) = crate::nodejs::versions(&state.node.config().node).await;
    node.and_then(|v| {
        v.trim_start_matches('v')
            .split('.')
            .next()
            .map(str::to_string)
    })
}

async fn check_node_version(state: &AppState, version: Option<&str>) -> Result<(), ApiError> {
    let Some(version) = version else {
        return Ok(());
    };
    let installed = node_major(state).await.unwrap_or_default();
    let installed = installed.as_str();
    let wanted = version.trim_start_matches("node").trim_start_matches('v');
    if installed.is_empty() || wanted != installed {
        return Err(ApiError::invalid(
            "version",
            format!(
                "`version`: only the installed Node is available (node{installed}), got {version:?}"
            ),
        ));
    }
    Ok(())
}

fn node_answer(
    code: String,
    result: RunResult,
    session_id: Option<String>,
) -> NodeJsExecuteResponse {
    NodeJsExecuteResponse {
        language: "javascript".to_string(),
        status: result.status.to_string(),
        execution_count: result.execution_count,
        outputs: result.outputs.into_iter().map(wire_output).collect(),
        code,
        stdout: result.stdout,
        stderr: result.stderr,
        exit_code: result.exit_code,
        session_id,
    }
}

/// Runs JavaScript on Node. Stateless by default: a fresh `node` in its own directory (with
/// `files` written there first, `stdin` fed to it), killed with every process it started when
/// `timeout` passes. With `stateful` or a `session_id`, in a persistent session whose globals
/// carry over (see `/v1/nodejs/sessions`).
#[utoipa::path(post, path = "/v1/nodejs/execute", tag = "nodejs",
    request_body = NodeJsExecuteRequest,
    responses(
        (status = 200, body = Envelope<NodeJsExecuteResponse>),
        (status = 413, description = "`files` are too large together", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 500, description = "node could not be started", body = ErrorBody),
        (status = 429, description = "the session limit is reached: delete a session first", body = ErrorBody),
    ))]
pub async fn node_execute(
    State(state): State<AppState>,
    AioJson(request): AioJson<NodeJsExecuteRequest>,
) -> Result<Json<Envelope<NodeJsExecuteResponse>>, ApiError> {
    check_code(&request.code)?;
    let timeout = timeout(request.timeout)?;
    check_node_version(&state, request.version.as_deref()).await?;
    let cwd = directory("cwd", request.cwd)?;
    let session = session_id("session_id", request.session_id)?;
    let stateful = request.stateful.unwrap_or(false) || session.is_some();
    if stateful {
        if request.stdin.is_some() || request.files.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err(ApiError::invalid(
                "stateful",
                "`stdin` and `files` apply to stateless runs only; leave them out with `stateful`",
            ));
        }
        let id = session.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let result = state.node.execute(&id, &request.code, cwd, timeout).await?;
        return Ok(Json(Envelope::ok(node_answer(
            request.code,
            result,
            Some(id),
        ))));
    }
    let stdin = request
        .stdin
        .map(|s| validate::at_most_bytes("stdin", &s, MAX_FILES_BYTES).map(str::to_string))
        .transpose()?;
    let files = node_files(request.files)?;
    let result = crate::nodejs::run(
        state.node.config(),
        RunRequest {
            code: request.code.clone(),
            stdin,
            files,
            cwd,
            timeout,
        },
    )
    .await?;
    Ok(Json(Envelope::ok(node_answer(request.code, result, None))))
}

/// The installed Node and npm.
#[utoipa::path(get, path = "/v1/nodejs/info", tag = "nodejs",
    responses((status = 200, body = Envelope<NodeJsRuntimeInfo>)))]
pub async fn node_info(State(state): State<AppState>) -> Json<Envelope<NodeJsRuntimeInfo>> {
    let (node, npm) = crate::nodejs::versions(&state.node.config().node).await;
    let major = node.as_deref().and_then(|v| {
        v.trim_start_matches('v')
            .split('.')
            .next()
            .map(str::to_string)
    });
    let error = match (&node, &npm) {
        (None, _) => Some("node is not installed".to_string()),
        (_, None) => Some("npm is not installed (Debian's nodejs package alone)".to_string()),
        _ => None,
    };
    Json(Envelope::ok(NodeJsRuntimeInfo {
        node_version: node.unwrap_or_default(),
        npm_version: npm.unwrap_or_default(),
        supported_languages: vec!["javascript".to_string()],
        description: "JavaScript on Debian's Node.js: stateless runs and stateful sessions"
            .to_string(),
        runtime_directory: Some(state.node.config().runtime_dir.display().to_string()),
        global_npm_directory: None,
        runtime_packages: Vec::<NodeJsPackageInfo>::new(),
        global_packages: Vec::new(),
        available_versions: major.iter().map(|m| format!("node{m}")).collect(),
        current_version: major.map(|m| format!("node{m}")),
        error,
    }))
}

fn wire_session(info: SessionInfo) -> NodeJsSessionInfo {
    let ms = |t: std::time::SystemTime| {
        t.duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    NodeJsSessionInfo {
        session_id: info.id,
        cwd: info.cwd.display().to_string(),
        created_at: ms(info.created_at),
        last_used: ms(info.last_used),
        max_idle_time: i64::try_from(info.max_idle.as_millis()).unwrap_or(i64::MAX),
        age_seconds: info.idle_for.as_secs(),
        state: if info.executing { "EXECUTING" } else { "IDLE" }.to_string(),
    }
}

fn idle_time(value: Option<i64>) -> Result<Option<Duration>, ApiError> {
    match value {
        None => Ok(None),
        Some(ms) if (1000..=MAX_IDLE_MS).contains(&ms) => {
            Ok(Some(Duration::from_millis(ms.unsigned_abs())))
        }
        Some(ms) => Err(ApiError::invalid(
            "max_idle_time",
            format!(
                "`max_idle_time` is in milliseconds and must be from 1000 to {MAX_IDLE_MS}, got {ms}"
            ),
        )),
    }
}

/// The Node sessions.
#[utoipa::path(get, path = "/v1/nodejs/sessions", tag = "nodejs",
    responses((status = 200, body = Envelope<NodeJsSessionListResponse>)))]
pub async fn node_sessions(
    State(state): State<AppState>,
) -> Json<Envelope<NodeJsSessionListResponse>> {
    let sessions = state
        .node
        .list()
        .into_iter()
        .map(|s| (s.id.clone(), wire_session(s)))
        .collect();
    Json(Envelope::ok(NodeJsSessionListResponse { sessions }))
}

/// Creates a Node session (its process starts now); an existing id is answered with
/// `created: false`.
#[utoipa::path(post, path = "/v1/nodejs/sessions", tag = "nodejs",
    request_body = NodeJsCreateSessionRequest,
    responses(
        (status = 200, body = Envelope<NodeJsCreateSessionResponse>),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 500, description = "node could not be started", body = ErrorBody),
        (status = 429, description = "the session limit is reached: delete a session first", body = ErrorBody),
    ))]
pub async fn node_create_session(
    State(state): State<AppState>,
    AioJson(request): AioJson<NodeJsCreateSessionRequest>,
) -> Result<Json<Envelope<NodeJsCreateSessionResponse>>, ApiError> {
    let id = session_id("session_id", request.session_id)?
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let cwd = directory("cwd", request.cwd)?;
    let idle = idle_time(request.max_idle_time)?;
    let (created, info) = state.node.create(id.clone(), cwd, idle).await?;
    Ok(Json(Envelope::ok(NodeJsCreateSessionResponse {
        session_id: id,
        created,
        message: (!created).then(|| "the session exists already".to_string()),
        session: Some(wire_session(info)),
    })))
}

/// One Node session.
#[utoipa::path(get, path = "/v1/nodejs/sessions/{session_id}", tag = "nodejs",
    params(("session_id" = String, Path)),
    responses(
        (status = 200, body = Envelope<NodeJsSessionResponse>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn node_session(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
) -> Result<Json<Envelope<NodeJsSessionResponse>>, ApiError> {
    let info = state
        .node
        .get(&session_id)
        .ok_or_else(|| ApiError::from(NodeError::NoSession(session_id)))?;
    Ok(Json(Envelope::ok(NodeJsSessionResponse {
        session: wire_session(info),
    })))
}

/// Changes a Node session's idle time or working directory.
#[utoipa::path(patch, path = "/v1/nodejs/sessions/{session_id}", tag = "nodejs",
    params(("session_id" = String, Path)),
    request_body = NodeJsUpdateSessionRequest,
    responses(
        (status = 200, body = Envelope<NodeJsUpdateSessionResponse>),
        (status = 404, description = "no such session", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
    ))]
pub async fn node_update_session(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
    AioJson(request): AioJson<NodeJsUpdateSessionRequest>,
) -> Result<Json<Envelope<NodeJsUpdateSessionResponse>>, ApiError> {
    let idle = idle_time(request.max_idle_time)?;
    let cwd = directory("cwd", request.cwd)?;
    let info = state.node.update(&session_id, idle, cwd)?;
    Ok(Json(Envelope::ok(NodeJsUpdateSessionResponse {
        updated: true,
        session: wire_session(info),
    })))
}

/// Ends a Node session and its process group.
#[utoipa::path(delete, path = "/v1/nodejs/sessions/{session_id}", tag = "nodejs",
    params(("session_id" = String, Path)),
    responses(
        (status = 200, body = Envelope<NodeJsDeleteSessionResponse>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn node_delete_session(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
) -> Result<Json<Envelope<NodeJsDeleteSessionResponse>>, ApiError> {
    state.node.delete(&session_id).await?;
    Ok(Json(Envelope::ok(NodeJsDeleteSessionResponse {
        deleted: true,
    })))
}

/// Runs code by language: `python` on a Jupyter kernel (stateful sessions are Jupyter
/// sessions; stateless calls get a fresh session that is removed afterwards), `javascript` on
/// Node (as `/v1/nodejs/execute`).
#[utoipa::path(post, path = "/v1/code/execute", tag = "code",
    request_body = CodeExecuteRequest,
    responses(
        (status = 200, body = Envelope<CodeExecuteResponse>),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 500, description = "the runtime could not be started", body = ErrorBody),
        (status = 429, description = "the session limit is reached: delete a session first", body = ErrorBody),
    ))]
pub async fn code_execute(
    State(state): State<AppState>,
    AioJson(request): AioJson<CodeExecuteRequest>,
) -> Result<Json<Envelope<CodeExecuteResponse>>, ApiError> {
    check_code(&request.code)?;
    let timeout = timeout(request.timeout)?;
    let cwd = directory("cwd", request.cwd)?;
    let session = session_id("session_id", request.session_id)?;
    let stateful = request.stateful.unwrap_or(false) || session.is_some();
    match request.language.as_str() {
        "python" => {
            let (id, temporary) = match session {
                Some(id) => (id, false),
                None if stateful => (uuid::Uuid::new_v4().to_string(), false),
                None => (format!("code-{}", uuid::Uuid::new_v4().simple()), true),
            };
            let outcome = state
                .jupyter
                .execute(ExecuteRequest {
                    code: request.code.clone(),
                    session_id: Some(id.clone()),
                    kernel_name: None,
                    cwd,
                    timeout,
                })
                .await;
            if temporary {
                // A stateless call's kernel goes with it (whatever the outcome).
                let _ = state.jupyter.delete(&id).await;
            }
            let execution = outcome?.execution;
            let stream = |name: &str| -> String {
                execution
                    .outputs
                    .iter()
                    .filter(|o| o.output_type == "stream" && o.name.as_deref() == Some(name))
                    .filter_map(|o| o.text.as_deref())
                    .collect()
            };
            let traceback = execution
                .outputs
                .iter()
                .find(|o| o.output_type == "error")
                .and_then(|o| o.traceback.clone());
            Ok(Json(Envelope::ok(CodeExecuteResponse {
                language: "python".to_string(),
                status: execution.status.as_str().to_string(),
                stdout: stream("stdout"),
                stderr: stream("stderr"),
                exit_code: Some(i64::from(
                    execution.status != crate::jupyter::ExecutionStatus::Ok,
                )),
                traceback,
                outputs: execution.outputs.into_iter().map(wire_output).collect(),
                code: request.code,
                session_id: (!temporary).then_some(id),
            })))
        }
        "javascript" => {
            let (result, id) = if stateful {
                let id = session.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
                (
                    state.node.execute(&id, &request.code, cwd, timeout).await?,
                    Some(id),
                )
            } else {
                let run = RunRequest {
                    code: request.code.clone(),
                    stdin: None,
                    files: BTreeMap::new(),
                    cwd,
                    timeout,
                };
                (crate::nodejs::run(state.node.config(), run).await?, None)
            };
            let traceback = result
                .outputs
                .iter()
                .find(|o| o.output_type == "error")
                .and_then(|o| o.traceback.clone());
            Ok(Json(Envelope::ok(CodeExecuteResponse {
                language: "javascript".to_string(),
                status: result.status.to_string(),
                outputs: result.outputs.into_iter().map(wire_output).collect(),
                code: request.code,
                stdout: result.stdout,
                stderr: result.stderr,
                exit_code: Some(result.exit_code),
                traceback,
                session_id: id,
            })))
        }
        other => Err(ApiError::invalid(
            "language",
            format!("`language` must be `python` or `javascript`, got {other:?}"),
        )),
    }
}

/// The languages `/v1/code/execute` runs.
#[utoipa::path(get, path = "/v1/code/info", tag = "code",
    responses((status = 200, body = Envelope<CodeInfoResponse>)))]
pub async fn code_info(State(state): State<AppState>) -> Json<Envelope<CodeInfoResponse>> {
    let (node, _) = crate::nodejs::versions(&state.node.config().node).await;
    let python = state.jupyter.kernel_names().last().cloned();
    let max = MAX_TIMEOUT_SECS as u64;
    let default = DEFAULT_TIMEOUT.as_secs();
    Json(Envelope::ok(CodeInfoResponse {
        languages: vec![
            CodeLanguageInfo {
                language: "python".to_string(),
                description: "Python on an IPython kernel (stateful with a session)".to_string(),
                runtime_version: python,
                default_timeout: default,
                max_timeout: max,
                details: BTreeMap::from([(
                    "kernels".to_string(),
                    Value::from(state.jupyter.kernel_names().to_vec()),
                )]),
            },
            CodeLanguageInfo {
                language: "javascript".to_string(),
                description: "JavaScript on Node.js (stateful with a session)".to_string(),
                runtime_version: node,
                default_timeout: default,
                max_timeout: max,
                details: BTreeMap::new(),
            },
        ],
    }))
}
