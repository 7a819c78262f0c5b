//! The command line: `orchestrator serve` runs the server; the other commands are a client for
//! people, talking to a running server (`--url`, `AGENTBOX_URL`) with an API key (`--api-key`,
//! `AGENTBOX_API_KEY`). Slow steps show progress on a terminal.
//!
//! Requests and answers are the API's own wire types ([`crate::api::types`]; for `sandbox exec`,
//! sandboxd's from [`sandbox_client::types`]), so the command line cannot drift from the server.
//! An answer that does not decode is an error naming the call, never a panic.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};
use reqwest::Method;
use sandbox_client::types::{Envelope, ShellCommandResult, ShellExecRequest};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::types::{
    CreateKeyRequest, CreateSandboxRequest, CreateTokenRequest, CreatedKey, ErrorBody, KeyList,
    Sandbox, SandboxList, Token,
};
use crate::config::ServeArgs;
use crate::tokens::Scope;

mod runs;

#[derive(Debug, Parser)]
#[command(
    name = "orchestrator",
    version,
    about = "Agentbox orchestrator: one sandbox container per task"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Server URL for the client commands.
    #[arg(
        long,
        global = true,
        env = "AGENTBOX_URL",
        default_value = "http://127.0.0.1:8090"
    )]
    url: String,
    /// API key for the client commands.
    #[arg(long, global = true, env = "AGENTBOX_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server.
    Serve(Box<ServeArgs>),
    /// Create, list, remove sandboxes; run commands in them.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Issue a viewer token and print the noVNC link.
    Token {
        id: String,
        #[arg(long, default_value = "view", value_parser = scope_parser())]
        scope: Scope,
        /// Lifetime, seconds.
        #[arg(long, default_value_t = 900)]
        ttl: i64,
    },
    /// Manage API keys (admin key needed).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Start a computer-use run (`run "<task>" --model <m> [--follow]`), or list, show,
    /// cancel, take over, hand back.
    Run(Box<runs::RunArgs>),
    /// On a node of a Docker Swarm that runs sandboxes (`--backend swarm`): remove, now and
    /// every interval, the volumes this node's finished sandboxes left. Runs until stopped;
    /// `compose.swarm.yaml` runs it on every node.
    SweepNode {
        /// Seconds between sweeps.
        #[arg(long, env = "AGENTBOX_SWEEP_INTERVAL_SECS", default_value_t = 60)]
        interval_secs: u64,
    },
}

#[derive(Debug, Subcommand)]
enum SandboxCommand {
    /// Create a sandbox and wait until it is ready.
    Create {
        #[arg(long)]
        image: Option<String>,
        /// WIDTHxHEIGHT
        #[arg(long)]
        resolution: Option<String>,
        /// Idle timeout, seconds.
        #[arg(long)]
        idle_timeout: Option<i64>,
        /// Absolute lifetime, seconds.
        #[arg(long)]
        lifetime: Option<i64>,
        /// KEY=VALUE (repeatable)
        #[arg(long = "env", value_parser = parse_pair)]
        env: Vec<(String, String)>,
        /// KEY=VALUE (repeatable)
        #[arg(long = "metadata", value_parser = parse_pair)]
        metadata: Vec<(String, String)>,
        /// Print the whole JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// List sandboxes.
    Ls {
        #[arg(long)]
        status: Option<String>,
        /// KEY=VALUE (repeatable)
        #[arg(long = "metadata", value_parser = parse_pair)]
        metadata: Vec<(String, String)>,
        #[arg(long)]
        json: bool,
    },
    /// Remove sandboxes.
    Rm { ids: Vec<String> },
    /// Pause sandboxes (freeze every process; memory and state kept).
    Pause { ids: Vec<String> },
    /// Resume paused sandboxes.
    Resume { ids: Vec<String> },
    /// Hibernate sandboxes (remove the container, keep the home on disk).
    Hibernate { ids: Vec<String> },
    /// Wake hibernated sandboxes.
    Wake { ids: Vec<String> },
    /// Run a shell command in a sandbox (through its `/v1/shell/exec`).
    Exec {
        id: String,
        /// Working directory in the sandbox.
        #[arg(long)]
        cwd: Option<String>,
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key and print it (once).
    Create {
        name: String,
        #[arg(long)]
        admin: bool,
    },
    /// List keys.
    Ls,
    /// Revoke a key.
    Rm { id: String },
}

/// `view` or `control`, listed as such in `--help`.
fn scope_parser() -> impl TypedValueParser<Value = Scope> {
    PossibleValuesParser::new([Scope::View.as_str(), Scope::Control.as_str()]).map(|name| {
        if name == Scope::Control.as_str() {
            Scope::Control
        } else {
            Scope::View
        }
    })
}

fn parse_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got `{text}`"))
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("orchestrator: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli));
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("orchestrator: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let Cli {
        command,
        url,
        api_key,
    } = cli;
    if let Command::Serve(args) = command {
        // Before anything else: a stop during start-up must not be lost (as PID 1 in a
        // container, the kernel drops a signal nobody handles).
        let signals = agentbox_http::signals::TerminationSignals::install()
            .context("listening for termination signals")?;
        agentbox_http::logging::init(args.log_format, "info,sqlx=warn,hyper=warn,bollard=warn");
        let settings = args.settings()?;
        crate::serve(settings, signals).await?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::SweepNode { interval_secs } = command {
        let mut signals = agentbox_http::signals::TerminationSignals::install()
            .context("listening for termination signals")?;
        agentbox_http::logging::init(agentbox_http::logging::LogFormat::Json, "info,bollard=warn");
        let stop = async move {
            signals.recv().await;
        };
        crate::backend::swarm::sweep_node_forever(Duration::from_secs(interval_secs.max(1)), stop)
            .await?;
        return Ok(ExitCode::SUCCESS);
    }
    let client = Client::new(&url, api_key)?;
    match command {
        Command::Serve(_) | Command::SweepNode { .. } => unreachable!("handled above"),
        Command::Sandbox(command) => sandbox(&client, command).await,
        Command::Token { id, scope, ttl } => {
            let request = CreateTokenRequest {
                scope,
                ttl_secs: Some(ttl),
            };
            let token: Token = client
                .send(
                    Method::POST,
                    &format!("/v1/sandboxes/{id}/tokens"),
                    Some(&request),
                )
                .await?
                .decode()?;
            println!("{}", token.viewer_url);
            eprintln!(
                "token {} ({}), expires {}",
                token.id,
                scope.as_str(),
                token.expires_at
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys(command) => keys(&client, command).await,
        Command::Run(args) => runs::run(&client, *args).await,
    }
}

/// `method /v1/sandboxes/{id}{suffix}` for each id, saying `done` or the error of each; fails
/// when any did.
async fn each_sandbox(
    client: &Client,
    method: Method,
    suffix: &str,
    done: &str,
    ids: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for id in ids {
        match client
            .send(
                method.clone(),
                &format!("/v1/sandboxes/{id}{suffix}"),
                NO_BODY,
            )
            .await
        {
            Ok(_) => println!("{done} {id}"),
            Err(error) => {
                eprintln!("{id}: {error:#}");
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn sandbox(client: &Client, command: SandboxCommand) -> anyhow::Result<ExitCode> {
    match command {
        SandboxCommand::Create {
            image,
            resolution,
            idle_timeout,
            lifetime,
            env,
            metadata,
            json,
        } => {
            let request = CreateSandboxRequest {
                image,
                resolution,
                idle_timeout_secs: idle_timeout,
                max_lifetime_secs: lifetime,
                env: Some(env.into_iter().collect::<BTreeMap<_, _>>()),
                metadata: Some(metadata.into_iter().collect::<BTreeMap<_, _>>()),
                ..CreateSandboxRequest::default()
            };
            let progress = Progress::start("creating sandbox");
            let result = client
                .send(Method::POST, "/v1/sandboxes", Some(&request))
                .await;
            progress.finish(result.is_ok());
            let answer = result?;
            if json {
                println!("{}", answer.pretty()?);
            } else {
                let sandbox: Sandbox = answer.decode()?;
                println!("{}", sandbox.id);
                eprintln!("api: {}", sandbox.urls.api);
                eprintln!("cdp: {}", sandbox.urls.cdp);
                eprintln!("expires: {}", sandbox.expires_at);
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCommand::Ls {
            status,
            metadata,
            json,
        } => {
            let mut query: Vec<(String, String)> = Vec::new();
            if let Some(status) = status {
                query.push(("status".into(), status));
            }
            query.extend(
                metadata
                    .into_iter()
                    .map(|(k, v)| (format!("metadata.{k}"), v)),
            );
            let query = serde_urlencoded::to_string(&query)?;
            let answer = client
                .send(Method::GET, &format!("/v1/sandboxes?{query}"), NO_BODY)
                .await?;
            if json {
                println!("{}", answer.pretty()?);
            } else {
                print!("{}", sandbox_table(&answer.decode()?));
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCommand::Rm { ids } => {
            each_sandbox(client, Method::DELETE, "", "removed", ids).await
        }
        SandboxCommand::Pause { ids } => {
            each_sandbox(client, Method::POST, "/pause", "paused", ids).await
        }
        SandboxCommand::Resume { ids } => {
            each_sandbox(client, Method::POST, "/resume", "resumed", ids).await
        }
        SandboxCommand::Hibernate { ids } => {
            each_sandbox(client, Method::POST, "/hibernate", "hibernated", ids).await
        }
        SandboxCommand::Wake { ids } => {
            each_sandbox(client, Method::POST, "/wake", "woken", ids).await
        }
        SandboxCommand::Exec { id, cwd, command } => {
            let command = command
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ");
            let request = ShellExecRequest {
                command,
                exec_dir: cwd,
                ..ShellExecRequest::default()
            };
            let progress = Progress::start("running");
            let result = client
                .send(
                    Method::POST,
                    &format!("/v1/sandboxes/{id}/api/v1/shell/exec"),
                    Some(&request),
                )
                .await;
            progress.finish(result.is_ok());
            let answer: Envelope<ShellCommandResult> = result?.decode()?;
            if let Some(result) = &answer.data {
                print!("{}", result.output);
                let _ = std::io::stdout().flush();
            }
            if !answer.success {
                eprintln!("{}", answer.message);
            }
            Ok(ExitCode::from(exec_exit_code(&answer)))
        }
    }
}

async fn keys(client: &Client, command: KeysCommand) -> anyhow::Result<ExitCode> {
    match command {
        KeysCommand::Create { name, admin } => {
            let request = CreateKeyRequest {
                name,
                admin: Some(admin),
            };
            let key: CreatedKey = client
                .send(Method::POST, "/v1/keys", Some(&request))
                .await?
                .decode()?;
            println!("{}", key.key);
            eprintln!("key id {} (shown once: store it now)", key.api_key.id);
        }
        KeysCommand::Ls => {
            let answer = client.send(Method::GET, "/v1/keys", NO_BODY).await?;
            print!("{}", key_table(&answer.decode()?));
        }
        KeysCommand::Rm { id } => {
            client
                .send(Method::DELETE, &format!("/v1/keys/{id}"), NO_BODY)
                .await?;
            println!("revoked {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `sandbox ls`: one line per sandbox under a header.
fn sandbox_table(list: &SandboxList) -> String {
    let mut table = format!(
        "{:<26} {:<9} {:<25} {:<25} METADATA\n",
        "ID", "STATUS", "CREATED", "EXPIRES"
    );
    for sandbox in &list.sandboxes {
        let metadata = sandbox
            .metadata
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",");
        table.push_str(&format!(
            "{:<26} {:<9} {:<25} {:<25} {}\n",
            sandbox.id, sandbox.status, sandbox.created_at, sandbox.expires_at, metadata
        ));
    }
    table
}

/// `keys ls`: one line per key under a header (`-` for a key not revoked).
fn key_table(list: &KeyList) -> String {
    let mut table = format!(
        "{:<26} {:<6} {:<25} {:<25} NAME\n",
        "ID", "ADMIN", "CREATED", "REVOKED"
    );
    for key in &list.keys {
        table.push_str(&format!(
            "{:<26} {:<6} {:<25} {:<25} {}\n",
            key.id,
            key.admin,
            key.created_at,
            key.revoked_at.as_deref().unwrap_or("-"),
            key.name
        ));
    }
    table
}

/// The exit code of `sandbox exec`: the command's own (cut to 0..=255), or, when it has none
/// (still running, or no result), 0 for a successful answer and 1 otherwise.
fn exec_exit_code(answer: &Envelope<ShellCommandResult>) -> u8 {
    let code = answer
        .data
        .as_ref()
        .and_then(|result| result.exit_code)
        .unwrap_or(if answer.success { 0 } else { 1 });
    // In range after the clamp, so the conversion cannot fail.
    u8::try_from(code.clamp(0, 255)).unwrap_or(u8::MAX)
}

/// Quotes a word for a POSIX shell.
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The HTTP client of the CLI.
struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Client {
    fn new(base: &str, key: Option<String>) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(600))
                .build()?,
            base: base.trim_end_matches('/').to_string(),
            key,
        })
    }

    /// Sends one call; a status other than 2xx is an error carrying the server's message (and,
    /// for a sandbox that failed to start, its container's output).
    async fn send<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<Answer> {
        self.send_with_headers(method, path, body, std::iter::empty())
            .await
    }

    /// [`send`](Self::send) with extra request headers.
    async fn send_with_headers<'h, B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        headers: impl Iterator<Item = (&'static str, &'h str)>,
    ) -> anyhow::Result<Answer> {
        let Some(key) = &self.key else {
            bail!("no API key: pass --api-key or set AGENTBOX_API_KEY");
        };
        let call = format!("{method} {path}");
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("reaching {}", self.base))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .with_context(|| format!("reading the answer to {call}"))?;
        if !status.is_success() {
            bail!(failure_message(&status.to_string(), &text));
        }
        Ok(Answer { call, text })
    }
}

/// No body, for [`Client::send`].
const NO_BODY: Option<&()> = None;

/// The error for an answer that is not 2xx: the orchestrator's `{error: {message, logs}}`, or
/// sandboxd's envelope (`{success: false, message}`, from a proxied call), or the body as is.
fn failure_message(status: &str, text: &str) -> String {
    if let Ok(ErrorBody { error }) = serde_json::from_str::<ErrorBody>(text) {
        let mut message = format!("{status}: {}", error.message);
        if let Some(logs) = error.logs {
            message.push_str(&format!("\ncontainer output:\n{logs}"));
        }
        return message;
    }
    if let Ok(body) = serde_json::from_str::<sandbox_client::types::ErrorBody>(text) {
        return format!("{status}: {}", body.message);
    }
    format!("{status}: {}", text.trim())
}

/// A successful answer's body, with the call it answers (for error messages).
struct Answer {
    call: String,
    text: String,
}

impl Answer {
    /// The body as the wire type `T`; an answer that does not fit is an error naming the call.
    fn decode<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_str(&self.text).with_context(|| {
            format!(
                "the answer to {} is not the expected {}",
                self.call,
                std::any::type_name::<T>()
            )
        })
    }

    /// The body as indented JSON, whatever its fields (`--json`).
    fn pretty(&self) -> anyhow::Result<String> {
        let value: serde_json::Value = serde_json::from_str(&self.text)
            .with_context(|| format!("the answer to {} is not JSON", self.call))?;
        Ok(serde_json::to_string_pretty(&value)?)
    }
}

/// A progress line on stderr while a slow step runs (only on a terminal).
struct Progress {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    started: Instant,
    what: &'static str,
    tty: bool,
}

impl Progress {
    fn start(what: &'static str) -> Self {
        let tty = std::io::stderr().is_terminal();
        let started = Instant::now();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tty.then(|| {
            tokio::spawn(async move {
                let frames = ['|', '/', '-', '\\'];
                let mut i = 0;
                loop {
                    eprint!(
                        "\r{} {what}... {:.1} s ",
                        frames[i % 4],
                        started.elapsed().as_secs_f64()
                    );
                    i += 1;
                    tokio::select! {
                        _ = &mut stopped => break,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                }
            })
        });
        if !tty {
            eprintln!("{what}...");
        }
        Self {
            stop: Some(stop),
            task,
            started,
            what,
            tty,
        }
    }

    fn finish(mut self, ok: bool) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let verdict = if ok { "done" } else { "failed" };
        if self.tty {
            eprint!("\r\x1b[2K");
        }
        eprintln!(
            "{} {verdict} in {:.1} s",
            self.what,
            self.started.elapsed().as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("ls"), "ls");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    fn sandbox(id: &str, metadata: &[(&str, &str)]) -> Sandbox {
        Sandbox {
            id: id.into(),
            status: "ready".into(),
            image: "agentbox/sandbox:latest".into(),
            created_at: "2026-01-02T03:04:05Z".into(),
            ready_at: None,
            expires_at: "2026-01-02T04:04:05Z".into(),
            last_active_at: "2026-01-02T03:04:05Z".into(),
            idle_timeout_secs: 600,
            max_lifetime_secs: 3600,
            resolution: None,
            metadata: metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            error: None,
            paused_at: None,
            auto_resume: false,
            idle_pause_secs: None,
            hibernated_at: None,
            idle_hibernate_secs: None,
            urls: crate::api::types::SandboxUrls {
                api: format!("http://o/v1/sandboxes/{id}/api"),
                vnc: format!("http://o/v1/sandboxes/{id}/vnc/"),
                cdp: format!("ws://o/v1/sandboxes/{id}/cdp"),
            },
        }
    }

    #[test]
    fn sandboxes_are_listed_one_line_each_from_the_wire_type() {
        let list = SandboxList {
            sandboxes: vec![
                sandbox("sbx-1", &[("team", "x"), ("a", "1")]),
                sandbox("sbx-2", &[]),
            ],
        };
        let decoded: SandboxList = Answer {
            call: "GET /v1/sandboxes".into(),
            text: serde_json::to_string(&list).unwrap(),
        }
        .decode()
        .unwrap();
        assert_eq!(
            sandbox_table(&decoded),
            "ID                         STATUS    CREATED                   EXPIRES                   METADATA\n\
             sbx-1                      ready     2026-01-02T03:04:05Z      2026-01-02T04:04:05Z      a=1,team=x\n\
             sbx-2                      ready     2026-01-02T03:04:05Z      2026-01-02T04:04:05Z      \n"
        );
    }

    #[test]
    fn keys_are_listed_with_a_dash_when_not_revoked() {
        let list: KeyList = Answer {
            call: "GET /v1/keys".into(),
            text: r#"{"keys": [
                {"id": "k1", "name": "admin", "admin": true, "created_at": "t1", "revoked_at": null},
                {"id": "k2", "name": "ci", "admin": false, "created_at": "t2", "revoked_at": "t3"}
            ]}"#
            .into(),
        }
        .decode()
        .unwrap();
        assert_eq!(
            key_table(&list),
            "ID                         ADMIN  CREATED                   REVOKED                   NAME\n\
             k1                         true   t1                        -                         admin\n\
             k2                         false  t2                        t3                        ci\n"
        );
    }

    #[test]
    fn an_answer_that_does_not_fit_is_an_error_naming_the_call() {
        let answer = Answer {
            call: "GET /v1/keys".into(),
            text: r#"{"keys": [{"id": "k1"}]}"#.into(),
        };
        let error = format!("{:#}", answer.decode::<KeyList>().unwrap_err());
        assert!(error.contains("GET /v1/keys"), "{error}");
        assert!(error.contains("missing field `name`"), "{error}");
        let answer = Answer {
            call: "POST /v1/keys".into(),
            text: "<html>".into(),
        };
        assert!(answer.decode::<CreatedKey>().is_err());
        assert!(answer.pretty().is_err());
    }

    #[test]
    fn failures_carry_the_servers_message() {
        assert_eq!(
            failure_message(
                "503 Service Unavailable",
                r#"{"error": {"code": "sandbox_not_ready", "message": "not ready", "logs": "boom"}}"#
            ),
            "503 Service Unavailable: not ready\ncontainer output:\nboom"
        );
        assert_eq!(
            failure_message(
                "422 Unprocessable Entity",
                r#"{"success": false, "message": "command must not be empty", "data": null}"#
            ),
            "422 Unprocessable Entity: command must not be empty"
        );
        assert_eq!(
            failure_message("502 Bad Gateway", "upstream gone\n"),
            "502 Bad Gateway: upstream gone"
        );
    }

    #[test]
    fn exec_exits_with_the_commands_code_or_by_success() {
        let answer = |success: bool, exit_code: Option<i32>| -> Envelope<ShellCommandResult> {
            let data = serde_json::json!({
                "session_id": "s", "command": "c", "status": "completed", "output": "",
                "console": [], "exit_code": exit_code, "truncated": false,
            });
            serde_json::from_value(serde_json::json!({
                "success": success, "message": "m", "data": data,
            }))
            .unwrap()
        };
        assert_eq!(exec_exit_code(&answer(true, Some(3))), 3);
        assert_eq!(exec_exit_code(&answer(true, Some(300))), 255);
        assert_eq!(exec_exit_code(&answer(true, Some(-1))), 0);
        assert_eq!(exec_exit_code(&answer(true, None)), 0);
        assert_eq!(exec_exit_code(&answer(false, None)), 1);
        let failed: Envelope<ShellCommandResult> = serde_json::from_str(
            r#"{"success": false, "message": "no such session", "data": null}"#,
        )
        .unwrap();
        assert_eq!(exec_exit_code(&failed), 1);
    }

    #[test]
    fn the_command_line_parses() {
        Cli::try_parse_from([
            "orchestrator",
            "sandbox",
            "create",
            "--env",
            "A=1",
            "--metadata",
            "team=x",
        ])
        .unwrap();
        Cli::try_parse_from([
            "orchestrator",
            "sandbox",
            "exec",
            "sbx-1",
            "--",
            "ls",
            "-la",
        ])
        .unwrap();
        Cli::try_parse_from([
            "orchestrator",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--pool-size",
            "0",
        ])
        .unwrap();
        assert!(
            Cli::try_parse_from(["orchestrator", "sandbox", "create", "--env", "novalue"]).is_err()
        );
        let scope_of = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Token { scope, .. } => scope,
            other => panic!("not a token command: {other:?}"),
        };
        assert_eq!(scope_of(&["orchestrator", "token", "sbx-1"]), Scope::View);
        assert_eq!(
            scope_of(&["orchestrator", "token", "sbx-1", "--scope", "control"]),
            Scope::Control
        );
        assert!(Cli::try_parse_from(["orchestrator", "token", "sbx-1", "--scope", "all"]).is_err());
    }
}
