//! `/v1/shell/*`: AIO's shell API over [`crate::shell`] — commands in sessions (`exec`, `view`,
//! `wait`, `write`, `kill`), session management, and the interactive terminal WebSocket
//! (`terminal`).

pub mod bash;
pub mod terminal_page;

pub(super) mod terminal;

use std::sync::Arc;
use std::time::Duration;

use agentbox_http::timestamp::rfc3339;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::AioJson;
use super::types::{
    ActiveShellSessionsResult, BashCommandStatus, ConsoleRecord, Envelope, ErrorBody,
    ShellCleanupResult, ShellCommandResult, ShellCreateSessionRequest, ShellCreateSessionResponse,
    ShellExecRequest, ShellKillResult, ShellSessionInfo, ShellSessionRequest, ShellSessionSettings,
    ShellSessionStats, ShellSessionStatus, ShellUpdateSessionRequest, ShellViewResult,
    ShellWaitRequest, ShellWaitResult, ShellWriteRequest, ShellWriteResult,
};
use super::validate::{self, SecondsRange};
use crate::shell::{
    CommandRequest, CommandStatus, Job, NewSession, Session, ShellError, StopReason,
    TRUNCATE_CHARS, WaitEnd,
};

/// Longest accepted timeout, in seconds (a week).
pub(super) const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;
/// What a timeout accepts: a positive number of seconds, at most a week.
pub(super) const TIMEOUT_RANGE: SecondsRange = SecondsRange::above(0.0, MAX_SECONDS);
/// What a wait accepts: zero (look and answer) or more seconds, at most a week.
pub(super) const WAIT_RANGE: SecondsRange = SecondsRange::from_to(0.0, MAX_SECONDS);
/// Longest command line: what one exec argument may hold on Linux (MAX_ARG_STRLEN), less room.
pub(super) const MAX_COMMAND_BYTES: usize = 128 * 1024 - 1024;
/// Longest wait for the previous command of a session to finish saving the session's state.
pub(super) const SETTLE_LIMIT: Duration = Duration::from_secs(10);
/// Most input accepted by one `write`.
pub(super) const MAX_INPUT_BYTES: usize = 1024 * 1024;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(WildcardRoutes::openapi())
        .routes(routes!(exec))
        .routes(routes!(view))
        .routes(routes!(wait))
        .routes(routes!(write))
        .routes(routes!(kill))
        .routes(routes!(create_session))
        .routes(routes!(update_session))
        .routes(routes!(session_stats))
        .routes(routes!(list_sessions, cleanup_all_sessions))
        .routes(routes!(terminal_url))
        .routes(routes!(terminal::terminal_ws))
        // AIO's SDK puts session ids into the path without encoding them, so an id may hold
        // '/': a wildcard route, documented as `{id}` below.
        .route(
            "/v1/shell/sessions/{*id}",
            axum::routing::delete(cleanup_session),
        )
        .merge(bash::routes())
}

#[derive(OpenApi)]
#[openapi(paths(cleanup_session))]
struct WildcardRoutes;

impl From<ShellError> for ApiError {
    fn from(error: ShellError) -> Self {
        use crate::shell::InputError;
        let status = match &error {
            ShellError::UnknownSession(_) => StatusCode::NOT_FOUND,
            ShellError::Busy { .. }
            | ShellError::NotRunning(_)
            | ShellError::NoCommand(_)
            | ShellError::TerminalInUse(_)
            | ShellError::Input(InputError::Closed | InputError::Blocked(_)) => {
                StatusCode::CONFLICT
            }
            ShellError::TooManySessions(_) | ShellError::ShuttingDown => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ShellError::Identity { .. }
            | ShellError::StateDir { .. }
            | ShellError::Spawn(_)
            | ShellError::Pty(_)
            | ShellError::Input(InputError::Io(_)) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.to_string())
    }
}

/// Runs a command in a session (created when `id` is absent or unknown) and answers when it
/// ends, when `timeout` passes (`running`), when its output stops changing for
/// `no_change_timeout` (`no_change_timeout`), or at once with `async_mode` (`running`).
/// `hard_timeout` kills the command and everything it started (`hard_timeout`). A session runs
/// one command at a time: 409 while it is busy.
#[utoipa::path(post, path = "/v1/shell/exec", tag = "shell",
    request_body = ShellExecRequest,
    responses(
        (status = 200, body = Envelope<ShellCommandResult>),
        (status = 409, description = "the session is running another command", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
    ))]
pub async fn exec(
    State(state): State<AppState>,
    AioJson(request): AioJson<ShellExecRequest>,
) -> Result<Json<Envelope<ShellCommandResult>>, ApiError> {
    run_exec(&state, request).await.map(Json)
}

/// Runs one `exec` request (shared by the REST route and the `shell_exec` MCP tool).
pub async fn run_exec(
    state: &AppState,
    request: ShellExecRequest,
) -> Result<Envelope<ShellCommandResult>, ApiError> {
    let command = validate_command(request.command)?;
    let timeout = validate::optional_seconds("timeout", request.timeout, TIMEOUT_RANGE)?;
    let hard_timeout =
        validate::optional_seconds("hard_timeout", request.hard_timeout, TIMEOUT_RANGE)?;
    let no_change = validate::optional_seconds(
        "no_change_timeout",
        request.no_change_timeout,
        TIMEOUT_RANGE,
    )?;
    let id = request.id.map(|id| session_id("id", id)).transpose()?;
    let mut hint = None;
    let exec_dir = match request.exec_dir {
        None => None,
        Some(dir) => {
            let dir = validate::absolute_path("exec_dir", dir)?;
            if dir.is_dir() {
                Some(dir)
            } else if request.strict == Some(true) {
                return Err(ApiError::invalid(
                    "exec_dir",
                    format!("exec_dir {} is not an existing directory", dir.display()),
                ));
            } else {
                hint = Some(format!(
                    "exec_dir {} is not an existing directory; the command ran in the session's working directory",
                    dir.display()
                ));
                None
            }
        }
    };
    let (session, job) = start_in_session(
        &state.shell,
        id,
        CommandRequest {
            command,
            exec_dir,
            hard_timeout,
            preserve_symlinks: request.preserve_symlinks,
            ..CommandRequest::default()
        },
    )
    .await?;
    let waited = if request.async_mode == Some(true) {
        BashCommandStatus::Running
    } else {
        let no_change = no_change.unwrap_or_else(|| session.no_change_timeout());
        wait_status(job.wait(timeout, Some(no_change)).await)
    };
    let mut answer = Envelope::ok(command_result(
        &session,
        &job,
        waited,
        request.truncate != Some(false),
    ));
    answer.hint = hint;
    Ok(answer)
}

/// The session's latest command: its output so far and its status.
#[utoipa::path(post, path = "/v1/shell/view", tag = "shell",
    request_body = ShellSessionRequest,
    responses(
        (status = 200, body = Envelope<ShellViewResult>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn view(
    State(state): State<AppState>,
    AioJson(request): AioJson<ShellSessionRequest>,
) -> Result<Json<Envelope<ShellViewResult>>, ApiError> {
    let session = state.shell.session(&request.id)?;
    let Some(job) = session.current_job() else {
        return Ok(Json(Envelope::ok(ShellViewResult {
            output: String::new(),
            session_id: session.id.clone(),
            status: BashCommandStatus::Completed,
            console: Vec::new(),
            command: None,
            exit_code: None,
            truncated: false,
        })));
    };
    let result = command_result(&session, &job, BashCommandStatus::Running, true);
    Ok(Json(Envelope::ok(ShellViewResult {
        output: result.output,
        session_id: result.session_id,
        status: result.status,
        console: result.console,
        command: Some(result.command),
        exit_code: result.exit_code,
        truncated: result.truncated,
    })))
}

/// Waits for the session's command to end, at most `seconds` (or `max_wait_seconds`, the
/// smaller). With neither, until its output stops changing for the session's no-change timeout.
#[utoipa::path(post, path = "/v1/shell/wait", tag = "shell",
    request_body = ShellWaitRequest,
    responses(
        (status = 200, body = Envelope<ShellWaitResult>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn wait(
    State(state): State<AppState>,
    AioJson(request): AioJson<ShellWaitRequest>,
) -> Result<Json<Envelope<ShellWaitResult>>, ApiError> {
    let seconds_limit = validate::optional_seconds("seconds", request.seconds, WAIT_RANGE)?;
    let max_limit =
        validate::optional_seconds("max_wait_seconds", request.max_wait_seconds, WAIT_RANGE)?;
    let session = state.shell.session(&request.id)?;
    let Some(job) = session.current_job() else {
        return Ok(Json(Envelope::ok(ShellWaitResult {
            status: BashCommandStatus::Completed,
            exit_code: None,
        })));
    };
    let limit = match (seconds_limit, max_limit) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let no_change = limit.is_none().then(|| session.no_change_timeout());
    let waited = wait_status(job.wait(limit, no_change).await);
    let outcome = job.outcome();
    Ok(Json(Envelope::ok(ShellWaitResult {
        status: outcome
            .as_ref()
            .map(|o| wire_status(o.status))
            .unwrap_or(waited),
        exit_code: outcome.map(|o| o.exit_code),
    })))
}

/// Writes `input` (plus a newline with `press_enter`) to the running command's standard input.
#[utoipa::path(post, path = "/v1/shell/write", tag = "shell",
    request_body = ShellWriteRequest,
    responses(
        (status = 200, body = Envelope<ShellWriteResult>),
        (status = 404, description = "no such session", body = ErrorBody),
        (status = 409, description = "no command is running, or it does not read its input", body = ErrorBody),
    ))]
pub async fn write(
    State(state): State<AppState>,
    AioJson(request): AioJson<ShellWriteRequest>,
) -> Result<Json<Envelope<ShellWriteResult>>, ApiError> {
    validate::at_most_bytes("input", &request.input, MAX_INPUT_BYTES)?;
    let session = state.shell.session(&request.id)?;
    let job = session
        .current_job()
        .filter(|job| job.is_running())
        .ok_or_else(|| ShellError::NotRunning(session.id.clone()))?;
    let mut input = request.input.into_bytes();
    if request.press_enter {
        input.push(b'\n');
    }
    job.write_input(&input).await.map_err(ShellError::from)?;
    Ok(Json(Envelope::ok(ShellWriteResult {
        status: wire_status(job.status()),
    })))
}

/// Ends the session's running command and every process the session's commands started,
/// including what finished commands left running in the background (SIGTERM, then SIGKILL).
/// A finished command's status is returned as it was.
#[utoipa::path(post, path = "/v1/shell/kill", tag = "shell",
    request_body = ShellSessionRequest,
    responses(
        (status = 200, body = Envelope<ShellKillResult>),
        (status = 404, description = "no such session", body = ErrorBody),
        (status = 409, description = "the session has run no command", body = ErrorBody),
    ))]
pub async fn kill(
    State(state): State<AppState>,
    AioJson(request): AioJson<ShellSessionRequest>,
) -> Result<Json<Envelope<ShellKillResult>>, ApiError> {
    let session = state.shell.session(&request.id)?;
    let job = session
        .current_job()
        .ok_or_else(|| ShellError::NoCommand(session.id.clone()))?;
    job.stop(StopReason::Killed).await;
    // A command that has ended may have left processes behind (`&`, `setsid`, `nohup`): a kill
    // ends everything the session started, as removing the session does.
    state.shell.end_leftovers(&session).await;
    let outcome = job.outcome();
    let exit_code = outcome.as_ref().map(|o| o.exit_code);
    Ok(Json(Envelope::ok(ShellKillResult {
        status: outcome
            .map(|o| wire_status(o.status))
            .unwrap_or(BashCommandStatus::Running),
        exit_code,
        returncode: exit_code,
    })))
}

/// Creates a session (or returns the existing one with that id, unchanged). The body may be
/// empty.
#[utoipa::path(post, path = "/v1/shell/sessions/create", tag = "shell",
    request_body = ShellCreateSessionRequest,
    responses(
        (status = 200, body = Envelope<ShellCreateSessionResponse>),
        (status = 422, description = "a field is invalid", body = ErrorBody),
    ))]
pub async fn create_session(
    State(state): State<AppState>,
    AioJson(request): AioJson<ShellCreateSessionRequest>,
) -> Result<Json<Envelope<ShellCreateSessionResponse>>, ApiError> {
    let id = request.id.map(|id| session_id("id", id)).transpose()?;
    let no_change_timeout = validate::optional_seconds(
        "no_change_timeout",
        request.no_change_timeout,
        TIMEOUT_RANGE,
    )?;
    let working_dir = match request.exec_dir {
        None => None,
        Some(dir) => {
            let dir = validate::absolute_path("exec_dir", dir)?;
            if !dir.is_dir() {
                return Err(ApiError::invalid(
                    "exec_dir",
                    format!("exec_dir {} is not an existing directory", dir.display()),
                ));
            }
            Some(dir)
        }
    };
    let (session, _) = state.shell.create_session(NewSession {
        id,
        working_dir,
        no_change_timeout,
        preserve_symlinks: request.preserve_symlinks,
    })?;
    Ok(Json(Envelope::ok(ShellCreateSessionResponse {
        session_id: session.id.clone(),
        working_dir: session.working_dir().display().to_string(),
    })))
}

/// Changes a session's no-change timeout.
#[utoipa::path(post, path = "/v1/shell/sessions/update", tag = "shell",
    request_body = ShellUpdateSessionRequest,
    responses(
        (status = 200, body = Envelope<ShellSessionSettings>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn update_session(
    State(state): State<AppState>,
    AioJson(request): AioJson<ShellUpdateSessionRequest>,
) -> Result<Json<Envelope<ShellSessionSettings>>, ApiError> {
    let timeout = validate::optional_seconds(
        "no_change_timeout",
        request.no_change_timeout,
        TIMEOUT_RANGE,
    )?;
    let session = state.shell.session(&request.id)?;
    if let Some(timeout) = timeout {
        session.set_no_change_timeout(timeout);
    }
    Ok(Json(Envelope::ok(ShellSessionSettings {
        session_id: session.id.clone(),
        no_change_timeout: session.no_change_timeout().as_secs(),
    })))
}

/// Counts of sessions and the limits.
#[utoipa::path(get, path = "/v1/shell/sessions/stats", tag = "shell",
    responses((status = 200, body = Envelope<ShellSessionStats>)))]
pub async fn session_stats(State(state): State<AppState>) -> Json<Envelope<ShellSessionStats>> {
    let stats = state.shell.stats();
    Json(Envelope::ok(ShellSessionStats {
        total_sessions: stats.total,
        active_sessions: stats.running,
        idle_sessions: stats.total - stats.running,
        max_sessions: stats.max,
        session_timeout: stats.idle_expiry.as_secs(),
        usage_ratio: if stats.max == 0 {
            0.0
        } else {
            stats.total as f64 / stats.max as f64
        },
    }))
}

/// Every session, by id.
#[utoipa::path(get, path = "/v1/shell/sessions", tag = "shell",
    responses((status = 200, body = Envelope<ActiveShellSessionsResult>)))]
pub async fn list_sessions(
    State(state): State<AppState>,
) -> Json<Envelope<ActiveShellSessionsResult>> {
    let sessions = state
        .shell
        .sessions()
        .into_iter()
        .map(|info| {
            (
                info.id,
                ShellSessionInfo {
                    working_dir: info.working_dir.display().to_string(),
                    created_at: rfc3339(info.created_at),
                    last_used_at: rfc3339(info.last_used_at),
                    age_seconds: info.age.as_secs(),
                    status: if info.running {
                        ShellSessionStatus::Running
                    } else {
                        ShellSessionStatus::Idle
                    },
                    current_command: info.current_command,
                },
            )
        })
        .collect();
    Json(Envelope::ok(ActiveShellSessionsResult { sessions }))
}

/// Removes every session, ending their commands and background processes.
#[utoipa::path(delete, path = "/v1/shell/sessions", tag = "shell",
    responses((status = 200, body = Envelope<ShellCleanupResult>)))]
pub async fn cleanup_all_sessions(
    State(state): State<AppState>,
) -> Json<Envelope<ShellCleanupResult>> {
    let removed = state.shell.remove_all_sessions().await;
    Json(Envelope::ok(ShellCleanupResult { removed }))
}

/// Removes one session, ending its command and background processes. The id may contain '/'.
#[utoipa::path(delete, path = "/v1/shell/sessions/{id}", tag = "shell",
    params(("id" = String, Path, description = "session id (may contain '/')")),
    responses(
        (status = 200, body = Envelope<ShellCleanupResult>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn cleanup_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Envelope<ShellCleanupResult>>, ApiError> {
    state.shell.remove_session(&id).await?;
    Ok(Json(Envelope::ok(ShellCleanupResult { removed: vec![id] })))
}

/// A link that opens the terminal page in a browser once: `/terminal` with a fresh terminal
/// ticket (valid for a minute, used up on first load), at the host and port the request
/// reached. The page's WebSocket is `/v1/shell/ws`'s protocol, at `/terminal/ws`.
#[utoipa::path(get, path = "/v1/shell/terminal-url", tag = "shell",
    responses((status = 200, body = Envelope<String>)))]
pub async fn terminal_url(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Json<Envelope<String>>, ApiError> {
    let (ticket, _) = state
        .tickets
        .issue(crate::tickets::Scope::Terminal)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let host = super::extract::request_host(&headers);
    Ok(Json(Envelope::ok(format!(
        "http://{host}{}?ticket={ticket}",
        terminal_page::PAGE
    ))))
}

fn command_result(
    session: &Arc<Session>,
    job: &Arc<Job>,
    waited: BashCommandStatus,
    truncate: bool,
) -> ShellCommandResult {
    // The outcome first: once it is published, the output is complete.
    let outcome = job.outcome();
    let output = job.output(truncate.then_some(TRUNCATE_CHARS));
    let status = outcome
        .as_ref()
        .map(|o| wire_status(o.status))
        .unwrap_or(waited);
    ShellCommandResult {
        session_id: session.id.clone(),
        command: job.command().to_string(),
        status,
        console: vec![ConsoleRecord {
            ps1: job.ps1().to_string(),
            command: job.command().to_string(),
            output: output.text.clone(),
        }],
        output: output.text,
        exit_code: outcome.map(|o| o.exit_code),
        truncated: output.truncated,
    }
}

fn wait_status(end: WaitEnd) -> BashCommandStatus {
    match end {
        WaitEnd::Finished(outcome) => wire_status(outcome.status),
        WaitEnd::TimedOut => BashCommandStatus::Running,
        WaitEnd::NoChange => BashCommandStatus::NoChangeTimeout,
    }
}

fn wire_status(status: CommandStatus) -> BashCommandStatus {
    match status {
        CommandStatus::Running => BashCommandStatus::Running,
        CommandStatus::Completed => BashCommandStatus::Completed,
        CommandStatus::NoChangeTimeout => BashCommandStatus::NoChangeTimeout,
        CommandStatus::HardTimeout => BashCommandStatus::HardTimeout,
        CommandStatus::Terminated => BashCommandStatus::Terminated,
    }
}

pub(super) fn validate_command(command: String) -> Result<String, ApiError> {
    if command.trim().is_empty() {
        return Err(ApiError::invalid("command", "command must not be empty"));
    }
    if command.contains('\0') {
        return Err(ApiError::invalid(
            "command",
            "command must not contain NUL characters",
        ));
    }
    if command.len() > MAX_COMMAND_BYTES {
        return Err(ApiError::invalid(
            "command",
            format!(
                "command is {} bytes; the limit is {MAX_COMMAND_BYTES} (write long scripts to a file and run that)",
                command.len()
            ),
        ));
    }
    Ok(command)
}

/// A session or terminal id: 1 to 128 characters, no control characters.
pub(super) fn session_id(field: &str, id: String) -> Result<String, ApiError> {
    validate::identifier(field, id, crate::shell::MAX_ID_LEN)
}

/// Opens session `id` (a new one if None or unknown) and starts `request` in it, once the
/// session's previous command has saved its state: that command answered before it did, and
/// this one starts from that state.
pub(super) async fn start_in_session(
    shell: &Arc<crate::shell::Shell>,
    id: Option<String>,
    request: CommandRequest,
) -> Result<(Arc<Session>, Arc<Job>), ApiError> {
    let (session, _) = shell.create_session(NewSession {
        id,
        ..NewSession::default()
    })?;
    if let Some(previous) = session.current_job()
        && !previous.is_running()
    {
        previous.settled(SETTLE_LIMIT).await;
    }
    let job = shell.start(&session, request).await?;
    Ok((session, job))
}
