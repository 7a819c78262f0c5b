//! `/v1/bash/*`: AIO's bash pipe API over the same [`crate::shell`] sessions as `/v1/shell/*`.
//! A command's stdout and stderr are captured apart (each bounded to the most recent 1 MiB) and
//! read incrementally by byte offsets; `env` sets variables for one command only; hard timeouts
//! and kills end every process the command started, as `/v1/shell/*` does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agentbox_http::timestamp::rfc3339;
use axum::Json;
use axum::extract::{Path, State};
use nix::sys::signal::Signal;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::shell::{
    MAX_COMMAND_BYTES, MAX_INPUT_BYTES, SETTLE_LIMIT, TIMEOUT_RANGE, WAIT_RANGE, session_id,
    start_in_session, validate_command,
};
use crate::api::types::{
    BashCloseResult, BashCommandInfo, BashCreateSessionRequest, BashExecRequest, BashExecResult,
    BashKillRequest, BashKillResult, BashOutputRequest, BashOutputResult, BashPipeStatus,
    BashSessionInfo, BashSessionStatus, BashWriteRequest, BashWriteResult, Envelope, ErrorBody,
};
use crate::api::validate;
use crate::shell::{
    Chunk, CommandRequest, CommandStatus, Job, NewSession, Session, ShellError, StopReason, Stream,
    TRUNCATE_CHARS,
};

/// How long `output` with `wait` waits when no `wait_timeout` is given.
const DEFAULT_OUTPUT_WAIT: Duration = Duration::from_secs(30);
/// How long a session's snapshot script may take to be sourced.
const SNAPSHOT_LIMIT: Duration = Duration::from_secs(30);
/// How long `kill` with SIGINT waits to report the command's end.
const INTERRUPT_WAIT: Duration = Duration::from_secs(1);
/// Most variables in one `env`.
const MAX_ENV_VARS: usize = 256;
/// Most bytes of all of one `env`'s names and values.
const MAX_ENV_BYTES: usize = 256 * 1024;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(exec))
        .routes(routes!(output))
        .routes(routes!(write))
        .routes(routes!(kill))
        .routes(routes!(list_sessions))
        .routes(routes!(create_session))
        .routes(routes!(close_session))
}

/// Runs a command in a session (created when `session_id` is absent or unknown) with stdout
/// and stderr captured apart. Answers when it ends, when `timeout` passes (`running`), or at
/// once with `async_mode` (`running`); `offset` and `stderr_offset` say where `output` goes on.
/// `hard_timeout` ends the command and every process it started (`timed_out`). A session runs
/// one command at a time: 409 while it is busy.
#[utoipa::path(post, path = "/v1/bash/exec", tag = "bash",
    request_body = BashExecRequest,
    responses(
        (status = 200, body = Envelope<BashExecResult>),
        (status = 409, description = "the session is running another command", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
        (status = 503, description = "every session is running a command", body = ErrorBody),
    ))]
pub async fn exec(
    State(state): State<AppState>,
    AioJson(request): AioJson<BashExecRequest>,
) -> Result<Json<Envelope<BashExecResult>>, ApiError> {
    let command = validate_command(request.command)?;
    let timeout = validate::optional_seconds("timeout", request.timeout, TIMEOUT_RANGE)?;
    let hard_timeout =
        validate::optional_seconds("hard_timeout", request.hard_timeout, TIMEOUT_RANGE)?;
    let max_output = validate::whole_number(
        "max_output_length",
        request.max_output_length,
        TRUNCATE_CHARS as i64,
        0..=i64::from(u32::MAX),
    )?;
    let env = validate_env(request.env)?;
    let id = request
        .session_id
        .map(|id| session_id("session_id", id))
        .transpose()?;
    let exec_dir = request
        .exec_dir
        .map(|dir| existing_dir("exec_dir", dir))
        .transpose()?;
    let (session, job) = start_in_session(
        &state.shell,
        id,
        CommandRequest {
            command,
            exec_dir,
            hard_timeout,
            separate_stderr: true,
            env,
            ..CommandRequest::default()
        },
    )
    .await?;
    let waited = request.async_mode != Some(true);
    if waited {
        job.wait(timeout, None).await;
    }
    // The outcome first: once it is published, the output is complete.
    let info = command_info(&job);
    let (stdout, stderr) = (
        read(&job, Stream::Stdout, 0)?,
        read(&job, Stream::Stderr, 0)?,
    );
    let limit = (waited && max_output > 0).then_some(max_output as usize);
    let (stdout_text, stdout_cut) = middle_truncate(stdout.text, limit);
    let (stderr_text, stderr_cut) = middle_truncate(stderr.text, limit);
    Ok(Json(Envelope::ok(BashExecResult {
        session_id: session.id.clone(),
        command_id: info.command_id,
        command: info.command,
        status: info.status,
        stdout: stdout_text,
        stderr: stderr_text,
        exit_code: info.exit_code,
        offset: stdout.next_offset,
        stderr_offset: stderr.next_offset,
        truncated: stdout_cut || stderr_cut || stdout.skipped > 0 || stderr.skipped > 0,
    })))
}

/// What a command of the session wrote past `offset` (stdout) and `stderr_offset` (stderr),
/// with the command's status. With `wait`, waits first (at most `wait_timeout`, default 30 s)
/// until there is something new or the command ends. An offset below what is still kept (the
/// most recent 1 MiB per stream) reads from the oldest byte kept; one past the end is a 422.
#[utoipa::path(post, path = "/v1/bash/output", tag = "bash",
    request_body = BashOutputRequest,
    responses(
        (status = 200, body = Envelope<BashOutputResult>),
        (status = 404, description = "no such session, or `command_id` is not its latest command", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid (an offset past the end)", body = ErrorBody),
    ))]
pub async fn output(
    State(state): State<AppState>,
    AioJson(request): AioJson<BashOutputRequest>,
) -> Result<Json<Envelope<BashOutputResult>>, ApiError> {
    let offset = offset_field("offset", request.offset)?;
    let stderr_offset = offset_field("stderr_offset", request.stderr_offset)?;
    let wait_limit = validate::optional_seconds("wait_timeout", request.wait_timeout, WAIT_RANGE)?
        .unwrap_or(DEFAULT_OUTPUT_WAIT);
    let session = state.shell.session(&request.session_id)?;
    let Some(job) = command_of(&session, request.command_id.as_deref())? else {
        for (field, value) in [("offset", offset), ("stderr_offset", stderr_offset)] {
            if value > 0 {
                return Err(past_end(field, value, 0));
            }
        }
        return Ok(Json(Envelope::ok(BashOutputResult {
            session_id: session.id.clone(),
            stdout: String::new(),
            stderr: String::new(),
            offset: 0,
            stderr_offset: 0,
            command: None,
        })));
    };
    if request.wait == Some(true) {
        job.wait_for_output(offset, stderr_offset, wait_limit).await;
    }
    let info = command_info(&job);
    let stdout = read(&job, Stream::Stdout, offset)?;
    let stderr = read(&job, Stream::Stderr, stderr_offset)?;
    Ok(Json(Envelope::ok(BashOutputResult {
        session_id: session.id.clone(),
        stdout: stdout.text,
        stderr: stderr.text,
        offset: stdout.next_offset,
        stderr_offset: stderr.next_offset,
        command: Some(info),
    })))
}

/// Writes `input` as given (no newline added) to the running command's stdin.
#[utoipa::path(post, path = "/v1/bash/write", tag = "bash",
    request_body = BashWriteRequest,
    responses(
        (status = 200, body = Envelope<BashWriteResult>),
        (status = 404, description = "no such session, or `command_id` is not its latest command", body = ErrorBody),
        (status = 409, description = "no command is running, or it does not read its input", body = ErrorBody),
        (status = 422, description = "a field is missing or invalid", body = ErrorBody),
    ))]
pub async fn write(
    State(state): State<AppState>,
    AioJson(request): AioJson<BashWriteRequest>,
) -> Result<Json<Envelope<BashWriteResult>>, ApiError> {
    validate::at_most_bytes("input", &request.input, MAX_INPUT_BYTES)?;
    let session = state.shell.session(&request.session_id)?;
    let job = command_of(&session, request.command_id.as_deref())?
        .filter(|job| job.is_running())
        .ok_or_else(|| ShellError::NotRunning(session.id.clone()))?;
    job.write_input(request.input.as_bytes())
        .await
        .map_err(ShellError::from)?;
    Ok(Json(Envelope::ok(BashWriteResult {
        command_id: job.id().to_string(),
        bytes_written: request.input.len(),
    })))
}

/// Signals the session's latest command. `SIGTERM` (the default) and `SIGKILL` end it and every
/// process it started (SIGTERM, a grace period, then SIGKILL); `SIGINT` interrupts its
/// foreground programs as Ctrl-C would. A finished command is left as it is.
#[utoipa::path(post, path = "/v1/bash/kill", tag = "bash",
    request_body = BashKillRequest,
    responses(
        (status = 200, body = Envelope<BashKillResult>),
        (status = 404, description = "no such session", body = ErrorBody),
        (status = 409, description = "the session has run no command", body = ErrorBody),
        (status = 422, description = "`signal` is not SIGTERM, SIGKILL or SIGINT", body = ErrorBody),
    ))]
pub async fn kill(
    State(state): State<AppState>,
    AioJson(request): AioJson<BashKillRequest>,
) -> Result<Json<Envelope<BashKillResult>>, ApiError> {
    let signal = parse_signal(request.signal.as_deref())?;
    let session = state.shell.session(&request.session_id)?;
    let job = session
        .current_job()
        .ok_or_else(|| ShellError::NoCommand(session.id.clone()))?;
    match signal {
        Signal::SIGINT => {
            job.interrupt(INTERRUPT_WAIT)
                .await
                .map_err(|error| ApiError::internal(format!("sending SIGINT: {error}")))?;
        }
        _ => job.stop(StopReason::Killed).await,
    }
    let info = command_info(&job);
    Ok(Json(Envelope::ok(BashKillResult {
        command_id: info.command_id,
        signal: signal.as_str().to_string(),
        status: info.status,
        exit_code: info.exit_code,
    })))
}

/// Every session (the same sessions as `/v1/shell/sessions`), oldest first.
#[utoipa::path(get, path = "/v1/bash/sessions", tag = "bash",
    responses((status = 200, body = Envelope<Vec<BashSessionInfo>>)))]
pub async fn list_sessions(State(state): State<AppState>) -> Json<Envelope<Vec<BashSessionInfo>>> {
    let sessions = state
        .shell
        .sessions()
        .into_iter()
        .map(|info| BashSessionInfo {
            session_id: info.id,
            status: BashSessionStatus::Ready,
            working_dir: info.working_dir.display().to_string(),
            created_at: rfc3339(info.created_at),
            last_used_at: rfc3339(info.last_used_at),
            current_command: info.current_command.filter(|_| info.running),
            command_count: info.command_count,
        })
        .collect();
    Json(Envelope::ok(sessions))
}

/// Creates a session (an existing id is returned unchanged). A new session starts in
/// `exec_dir` and first sources `snapshot_path`, whose variables, functions and directory carry
/// over; a snapshot that fails (non-zero status) or takes over 30 s is a 422 and the session is
/// not kept.
#[utoipa::path(post, path = "/v1/bash/sessions/create", tag = "bash",
    request_body = BashCreateSessionRequest,
    responses(
        (status = 200, body = Envelope<BashSessionInfo>),
        (status = 422, description = "a field is invalid, or the snapshot failed", body = ErrorBody),
        (status = 503, description = "every session is running a command", body = ErrorBody),
    ))]
pub async fn create_session(
    State(state): State<AppState>,
    AioJson(request): AioJson<BashCreateSessionRequest>,
) -> Result<Json<Envelope<BashSessionInfo>>, ApiError> {
    let id = request
        .session_id
        .map(|id| session_id("session_id", id))
        .transpose()?;
    let working_dir = request
        .exec_dir
        .map(|dir| existing_dir("exec_dir", dir))
        .transpose()?;
    let snapshot = match request.snapshot_path {
        None => None,
        Some(path) => {
            let path = validate::absolute_path("snapshot_path", path)?;
            if !path.is_file() {
                return Err(ApiError::invalid(
                    "snapshot_path",
                    format!("snapshot_path {} is not an existing file", path.display()),
                ));
            }
            Some(path)
        }
    };
    let shell = &state.shell;
    let (session, created) = shell.create_session(NewSession {
        id,
        working_dir,
        ..NewSession::default()
    })?;
    if created
        && let Some(path) = snapshot
        && let Err(error) = source_snapshot(&state, &session, &path).await
    {
        // Not kept: a session half set up would surprise the next command.
        let _ = shell.remove_session(&session.id).await;
        return Err(error);
    }
    let info = session.info();
    Ok(Json(Envelope::ok(BashSessionInfo {
        session_id: info.id,
        status: BashSessionStatus::Ready,
        working_dir: info.working_dir.display().to_string(),
        created_at: rfc3339(info.created_at),
        last_used_at: rfc3339(info.last_used_at),
        current_command: info.current_command.filter(|_| info.running),
        command_count: info.command_count,
    })))
}

/// Closes a session: ends its command and every process it started, and forgets it.
#[utoipa::path(post, path = "/v1/bash/sessions/{session_id}/close", tag = "bash",
    params(("session_id" = String, Path, description = "session id")),
    responses(
        (status = 200, body = Envelope<BashCloseResult>),
        (status = 404, description = "no such session", body = ErrorBody),
    ))]
pub async fn close_session(
    State(state): State<AppState>,
    Path(session_id): Path<String>,
) -> Result<Json<Envelope<BashCloseResult>>, ApiError> {
    state.shell.remove_session(&session_id).await?;
    Ok(Json(Envelope::ok(BashCloseResult { session_id })))
}

/// Sources `path` as the session's first command and checks that it succeeded.
async fn source_snapshot(
    state: &AppState,
    session: &Arc<Session>,
    path: &std::path::Path,
) -> Result<(), ApiError> {
    let quoted = path.display().to_string().replace('\'', r"'\''");
    let job = state
        .shell
        .start(
            session,
            CommandRequest {
                command: format!("builtin . '{quoted}'"),
                separate_stderr: true,
                ..CommandRequest::default()
            },
        )
        .await?;
    job.wait(Some(SNAPSHOT_LIMIT), None).await;
    let Some(outcome) = job.outcome() else {
        job.stop(StopReason::Killed).await;
        return Err(ApiError::invalid(
            "snapshot_path",
            format!(
                "sourcing {} took longer than {} s",
                path.display(),
                SNAPSHOT_LIMIT.as_secs()
            ),
        ));
    };
    if outcome.exit_code != 0 {
        let stderr = read(&job, Stream::Stderr, 0)
            .map(|chunk| chunk.text)
            .unwrap_or_default();
        let (stderr, _) = middle_truncate(stderr, Some(2000));
        return Err(ApiError::invalid(
            "snapshot_path",
            format!(
                "sourcing {} failed with status {}: {}",
                path.display(),
                outcome.exit_code,
                stderr.trim_end()
            ),
        ));
    }
    job.settled(SETTLE_LIMIT).await;
    Ok(())
}

/// The session's latest command, checked against `command_id` when one is given.
fn command_of(session: &Session, command_id: Option<&str>) -> Result<Option<Arc<Job>>, ApiError> {
    let job = session.current_job();
    match (command_id, job) {
        (None, job) => Ok(job),
        (Some(id), Some(job)) if job.id() == id => Ok(Some(job)),
        (Some(id), _) => Err(ApiError::not_found(format!(
            "command {id:?} is not the latest command of bash session {:?} (only the latest command's output is kept)",
            session.id
        ))),
    }
}

fn command_info(job: &Job) -> BashCommandInfo {
    let outcome = job.outcome();
    BashCommandInfo {
        command_id: job.id().to_string(),
        command: job.command().to_string(),
        status: outcome
            .as_ref()
            .map(|o| wire_status(o.status))
            .unwrap_or(BashPipeStatus::Running),
        exit_code: outcome.map(|o| o.exit_code),
    }
}

fn wire_status(status: CommandStatus) -> BashPipeStatus {
    match status {
        CommandStatus::Running | CommandStatus::NoChangeTimeout => BashPipeStatus::Running,
        CommandStatus::Completed => BashPipeStatus::Completed,
        CommandStatus::HardTimeout => BashPipeStatus::TimedOut,
        CommandStatus::Terminated => BashPipeStatus::Killed,
    }
}

/// `stream` from `offset`, or a 422 naming the offset's field when it is past the end.
fn read(job: &Job, stream: Stream, offset: u64) -> Result<Chunk, ApiError> {
    job.read_stream(stream, offset).ok_or_else(|| {
        let field = match stream {
            Stream::Stdout => "offset",
            Stream::Stderr => "stderr_offset",
        };
        past_end(field, offset, job.stream_len(stream))
    })
}

fn past_end(field: &str, offset: u64, len: u64) -> ApiError {
    ApiError::invalid(
        field,
        format!("`{field}` {offset} is past the end of the output ({len} bytes so far)"),
    )
}

fn offset_field(field: &str, value: Option<f64>) -> Result<u64, ApiError> {
    let offset = validate::whole_number(field, value, 0, 0..=i64::MAX)?;
    // Checked non-negative above.
    Ok(offset.unsigned_abs())
}

/// An absolute path to an existing directory.
fn existing_dir(field: &str, dir: String) -> Result<std::path::PathBuf, ApiError> {
    let dir = validate::absolute_path(field, dir)?;
    if !dir.is_dir() {
        return Err(ApiError::invalid(
            field,
            format!("{field} {} is not an existing directory", dir.display()),
        ));
    }
    Ok(dir)
}

/// The per-command variables: shell identifiers (not the shell's own marker or wrapper names),
/// values without NUL, bounded in count and size.
fn validate_env(
    env: Option<BTreeMap<String, Option<String>>>,
) -> Result<Vec<(String, Option<String>)>, ApiError> {
    let Some(env) = env else {
        return Ok(Vec::new());
    };
    if env.len() > MAX_ENV_VARS {
        return Err(ApiError::invalid(
            "env",
            format!("`env` has {} variables; at most {MAX_ENV_VARS}", env.len()),
        ));
    }
    let mut total = 0usize;
    for (name, value) in &env {
        let loc = || vec!["body".to_string(), "env".to_string(), name.clone()];
        let identifier = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(ApiError::invalid_at(
                loc(),
                format!(
                    "`env` name {name:?} is not a shell variable name (letters, digits, _; not starting with a digit)"
                ),
            ));
        }
        if name.starts_with("__agentbox")
            || name == "AGENTBOX_SHELL_JOB"
            || name.starts_with("BASH")
        {
            return Err(ApiError::invalid_at(
                loc(),
                format!("`env` name {name:?} is reserved by the shell or sandboxd"),
            ));
        }
        if value.as_deref().is_some_and(|v| v.contains('\0')) {
            return Err(ApiError::invalid_at(
                loc(),
                format!("`env` value of {name:?} must not contain NUL characters"),
            ));
        }
        let size = name.len() + 1 + value.as_deref().map_or(0, str::len);
        if size > MAX_COMMAND_BYTES {
            return Err(ApiError::invalid_at(
                loc(),
                format!("`env` variable {name:?} is {size} bytes; at most {MAX_COMMAND_BYTES}"),
            ));
        }
        total += size;
    }
    if total > MAX_ENV_BYTES {
        return Err(ApiError::invalid(
            "env",
            format!("`env` is {total} bytes in all; at most {MAX_ENV_BYTES}"),
        ));
    }
    Ok(env.into_iter().collect())
}

/// SIGTERM (default), SIGKILL or SIGINT, with or without `SIG`, any case.
fn parse_signal(signal: Option<&str>) -> Result<Signal, ApiError> {
    let Some(name) = signal else {
        return Ok(Signal::SIGTERM);
    };
    let upper = name.trim().to_ascii_uppercase();
    match upper.strip_prefix("SIG").unwrap_or(&upper) {
        "TERM" => Ok(Signal::SIGTERM),
        "KILL" => Ok(Signal::SIGKILL),
        "INT" => Ok(Signal::SIGINT),
        _ => Err(ApiError::invalid(
            "signal",
            format!("`signal` must be SIGTERM, SIGKILL or SIGINT, got {name:?}"),
        )),
    }
}

/// `text` cut to at most `limit` characters, keeping its head and tail around a marker saying
/// how much was left out; true when it was cut.
fn middle_truncate(text: String, limit: Option<usize>) -> (String, bool) {
    let Some(limit) = limit else {
        return (text, false);
    };
    let chars = text.chars().count();
    if chars <= limit {
        return (text, false);
    }
    let marker_for = |omitted: usize| format!("\n[... {omitted} characters omitted ...]\n");
    // The marker's length depends on the count it shows; its longest form bounds it.
    let budget = limit.saturating_sub(marker_for(chars).chars().count());
    let head = budget / 2;
    let tail = budget - head;
    let omitted = chars - head - tail;
    let mut cut: String = text.chars().take(head).collect();
    cut.push_str(&marker_for(omitted));
    cut.extend(text.chars().skip(chars - tail));
    (cut, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_truncation_keeps_head_and_tail_within_the_limit() {
        let text: String = "a".repeat(500) + &"b".repeat(500);
        let (cut, was_cut) = middle_truncate(text.clone(), Some(100));
        assert!(was_cut);
        assert!(cut.chars().count() <= 100, "{}", cut.chars().count());
        assert!(cut.starts_with('a') && cut.ends_with('b'), "{cut}");
        assert!(cut.contains("characters omitted"), "{cut}");
        assert_eq!(
            middle_truncate(text.clone(), Some(1000)),
            (text.clone(), false)
        );
        assert_eq!(middle_truncate(text.clone(), None), (text, false));
    }

    #[test]
    fn signals_are_named_with_or_without_sig() {
        assert_eq!(parse_signal(None).unwrap(), Signal::SIGTERM);
        assert_eq!(parse_signal(Some("sigint")).unwrap(), Signal::SIGINT);
        assert_eq!(parse_signal(Some("KILL")).unwrap(), Signal::SIGKILL);
        assert!(parse_signal(Some("SIGHUP")).is_err());
    }
}
