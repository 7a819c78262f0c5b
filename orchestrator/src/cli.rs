//! The command line: `orchestrator serve` runs the server; the other commands are a client for
//! people, talking to a running server (`--url`, `AGENTBOX_URL`) with an API key (`--api-key`,
//! `AGENTBOX_API_KEY`). Slow steps show progress on a terminal.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::config::ServeArgs;

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
        #[arg(long, default_value = "view", value_parser = ["view", "control"])]
        scope: String,
        /// Lifetime, seconds.
        #[arg(long, default_value_t = 900)]
        ttl: i64,
    },
    /// Manage API keys (admin key needed).
    #[command(subcommand)]
    Keys(KeysCommand),
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
        agentbox_http::logging::init(args.log_format, "info,sqlx=warn,hyper=warn,bollard=warn");
        let settings = args.settings()?;
        crate::serve(settings).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let client = Client::new(&url, api_key)?;
    match command {
        Command::Serve(_) => unreachable!("handled above"),
        Command::Sandbox(command) => sandbox(&client, command).await,
        Command::Token { id, scope, ttl } => {
            let token = client
                .send(
                    reqwest::Method::POST,
                    &format!("/v1/sandboxes/{id}/tokens"),
                    Some(json!({"scope": scope, "ttl_secs": ttl})),
                )
                .await?;
            println!("{}", token["viewer_url"].as_str().unwrap_or_default());
            eprintln!(
                "token {} ({}), expires {}",
                token["id"].as_str().unwrap_or(""),
                scope,
                token["expires_at"].as_str().unwrap_or("")
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys(command) => keys(&client, command).await,
    }
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
            let body = json!({
                "image": image,
                "resolution": resolution,
                "idle_timeout_secs": idle_timeout,
                "max_lifetime_secs": lifetime,
                "env": env.into_iter().collect::<BTreeMap<_, _>>(),
                "metadata": metadata.into_iter().collect::<BTreeMap<_, _>>(),
            });
            let progress = Progress::start("creating sandbox");
            let result = client
                .send(reqwest::Method::POST, "/v1/sandboxes", Some(body))
                .await;
            progress.finish(result.is_ok());
            let sandbox = result?;
            if json {
                println!("{}", serde_json::to_string_pretty(&sandbox)?);
            } else {
                println!("{}", sandbox["id"].as_str().unwrap_or_default());
                eprintln!("api: {}", sandbox["urls"]["api"].as_str().unwrap_or(""));
                eprintln!("cdp: {}", sandbox["urls"]["cdp"].as_str().unwrap_or(""));
                eprintln!("expires: {}", sandbox["expires_at"].as_str().unwrap_or(""));
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
            let list = client
                .send(
                    reqwest::Method::GET,
                    &format!("/v1/sandboxes?{query}"),
                    None,
                )
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:<26} {:<9} {:<25} {:<25} METADATA",
                "ID", "STATUS", "CREATED", "EXPIRES"
            );
            for s in list["sandboxes"].as_array().into_iter().flatten() {
                let metadata = s["metadata"].as_object().map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(",")
                });
                println!(
                    "{:<26} {:<9} {:<25} {:<25} {}",
                    s["id"].as_str().unwrap_or(""),
                    s["status"].as_str().unwrap_or(""),
                    s["created_at"].as_str().unwrap_or(""),
                    s["expires_at"].as_str().unwrap_or(""),
                    metadata.unwrap_or_default()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCommand::Rm { ids } => {
            let mut failed = false;
            for id in ids {
                match client
                    .send(
                        reqwest::Method::DELETE,
                        &format!("/v1/sandboxes/{id}"),
                        None,
                    )
                    .await
                {
                    Ok(_) => println!("removed {id}"),
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
        SandboxCommand::Exec { id, cwd, command } => {
            let command = command
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ");
            let progress = Progress::start("running");
            let result = client
                .send(
                    reqwest::Method::POST,
                    &format!("/v1/sandboxes/{id}/api/v1/shell/exec"),
                    Some(json!({"command": command, "exec_dir": cwd})),
                )
                .await;
            progress.finish(result.is_ok());
            let answer = result?;
            let data = &answer["data"];
            if let Some(output) = data["output"].as_str() {
                print!("{output}");
                let _ = std::io::stdout().flush();
            }
            if answer["success"] == Value::Bool(false) {
                eprintln!(
                    "{}",
                    answer["message"].as_str().unwrap_or("the command failed")
                );
            }
            let code =
                data["exit_code"]
                    .as_i64()
                    .unwrap_or(if answer["success"] == Value::Bool(true) {
                        0
                    } else {
                        1
                    });
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
    }
}

async fn keys(client: &Client, command: KeysCommand) -> anyhow::Result<ExitCode> {
    match command {
        KeysCommand::Create { name, admin } => {
            let key = client
                .send(
                    reqwest::Method::POST,
                    "/v1/keys",
                    Some(json!({"name": name, "admin": admin})),
                )
                .await?;
            println!("{}", key["key"].as_str().unwrap_or_default());
            eprintln!(
                "key id {} (shown once: store it now)",
                key["id"].as_str().unwrap_or("")
            );
        }
        KeysCommand::Ls => {
            let list = client.send(reqwest::Method::GET, "/v1/keys", None).await?;
            println!(
                "{:<26} {:<6} {:<25} {:<25} NAME",
                "ID", "ADMIN", "CREATED", "REVOKED"
            );
            for k in list["keys"].as_array().into_iter().flatten() {
                println!(
                    "{:<26} {:<6} {:<25} {:<25} {}",
                    k["id"].as_str().unwrap_or(""),
                    k["admin"].as_bool().unwrap_or(false),
                    k["created_at"].as_str().unwrap_or(""),
                    k["revoked_at"].as_str().unwrap_or("-"),
                    k["name"].as_str().unwrap_or("")
                );
            }
        }
        KeysCommand::Rm { id } => {
            client
                .send(reqwest::Method::DELETE, &format!("/v1/keys/{id}"), None)
                .await?;
            println!("revoked {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
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

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let Some(key) = &self.key else {
            bail!("no API key: pass --api-key or set AGENTBOX_API_KEY");
        };
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("reaching {}", self.base))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let message = value["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| value.to_string());
            let mut error = format!("{status}: {message}");
            if let Some(logs) = value["error"]["logs"].as_str() {
                error.push_str(&format!("\ncontainer output:\n{logs}"));
            }
            bail!(error);
        }
        Ok(value)
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
    }
}
