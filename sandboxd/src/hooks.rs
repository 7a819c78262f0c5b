//! Lifecycle hooks: shell commands run when the sandbox shuts down (SIGTERM to PID 1), before
//! any program is stopped, so a hook can still use the desktop, the browser and the files.
//!
//! Hooks come from the environment (`SANDBOX_SHUTDOWN_HOOKS`, a JSON list read at start; they
//! cannot be removed) or from the API. They run by priority, lower first; hooks of the same
//! priority run in parallel. Each runs as `bash -c <command>` in its own process group, as the
//! agent's user, in the workspace, with its output in sandboxd's (the container log), and is
//! killed (the whole group) at its timeout. The whole run is bounded by [`SHUTDOWN_BUDGET`] so
//! that, with the programs' own stop, the shutdown fits Docker's default stop grace period
//! (10 s): a hook still running when the budget ends is killed.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

/// The environment variable holding the hooks registered at start.
pub const ENV_VAR: &str = "SANDBOX_SHUTDOWN_HOOKS";
/// How long every hook together may take at shutdown.
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(6);
/// The most a hook's own timeout may be.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(8);
/// A hook's timeout when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most hooks registered at once.
pub const MAX_HOOKS: usize = 64;
/// The longest command.
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;

/// Variables a hook's command never sees.
const WITHHELD_VARS: &[&str] = &["SANDBOX_API_KEY", "SANDBOX_API_KEY_FILE", ENV_VAR];

/// Where a hook comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Env,
    Api,
}

/// A registered hook (the only event is shutdown).
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub name: String,
    pub command: String,
    pub timeout: Duration,
    pub priority: i64,
    pub source: Source,
}

/// Why a hook cannot be registered or removed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HookError {
    /// A field's value is refused (`field` names it).
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("no hook named {0:?}")]
    NotFound(String),
    #[error("hook {0:?} comes from the environment ({ENV_VAR}) and cannot be removed or replaced")]
    FromEnv(String),
    #[error("{MAX_HOOKS} hooks are registered already; remove one first")]
    Full,
}

/// Checks a hook's fields and builds it.
pub fn hook(
    name: &str,
    command: &str,
    timeout: Option<Duration>,
    priority: Option<i64>,
    source: Source,
) -> Result<Hook, HookError> {
    let invalid = |field, message: String| HookError::Invalid { field, message };
    let name_ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !name_ok {
        return Err(invalid(
            "name",
            format!("`name` is 1 to 64 letters, digits, `.`, `_` or `-`, got {name:?}"),
        ));
    }
    if command.trim().is_empty() {
        return Err(invalid("command", "`command` must not be blank".into()));
    }
    if command.len() > MAX_COMMAND_BYTES || command.contains('\0') {
        return Err(invalid(
            "command",
            format!("`command` is at most {MAX_COMMAND_BYTES} bytes, without NUL"),
        ));
    }
    let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(invalid(
            "timeout",
            format!(
                "`timeout` is in seconds, above 0 and at most {}, got {}",
                MAX_TIMEOUT.as_secs(),
                timeout.as_secs_f64()
            ),
        ));
    }
    Ok(Hook {
        name: name.to_string(),
        command: command.to_string(),
        timeout,
        priority: priority.unwrap_or(0),
        source,
    })
}

/// One entry of [`ENV_VAR`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvHook {
    name: String,
    command: String,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    timeout: Option<f64>,
    #[serde(default)]
    priority: Option<i64>,
}

/// Parses [`ENV_VAR`]'s value: a JSON list of `{name, command, timeout?, priority?, event?}`.
pub fn parse_env(value: &str) -> Result<Vec<Hook>, String> {
    let entries: Vec<EnvHook> = serde_json::from_str(value)
        .map_err(|e| format!("{ENV_VAR} is not a JSON list of hooks: {e}"))?;
    let mut hooks: Vec<Hook> = Vec::new();
    for entry in entries {
        if entry.event.as_deref().is_some_and(|e| e != "shutdown") {
            return Err(format!(
                "{ENV_VAR}: hook {:?}: the only event is `shutdown`",
                entry.name
            ));
        }
        let timeout = match entry.timeout {
            Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT.as_secs_f64() => {
                Some(Duration::from_secs_f64(t))
            }
            Some(t) => {
                return Err(format!(
                    "{ENV_VAR}: hook {:?}: `timeout` must be above 0 and at most {}, got {t}",
                    entry.name,
                    MAX_TIMEOUT.as_secs()
                ));
            }
            None => None,
        };
        let hook = hook(
            &entry.name,
            &entry.command,
            timeout,
            entry.priority,
            Source::Env,
        )
        .map_err(|e| format!("{ENV_VAR}: hook {:?}: {e}", entry.name))?;
        if hooks.iter().any(|h| h.name == hook.name) {
            return Err(format!("{ENV_VAR}: two hooks named {:?}", hook.name));
        }
        hooks.push(hook);
    }
    if hooks.len() > MAX_HOOKS {
        return Err(format!("{ENV_VAR}: at most {MAX_HOOKS} hooks"));
    }
    Ok(hooks)
}

/// How a hook's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exited with this shell code (0: success).
    Exited(i32),
    /// Killed at its timeout (or at the end of the budget).
    TimedOut,
    /// Could not start.
    NotStarted(String),
}

/// The registered hooks and how to run them.
#[derive(Debug)]
pub struct Hooks {
    hooks: Mutex<Vec<Hook>>,
    run_as: Option<(u32, u32)>,
    workdir: PathBuf,
}

impl Hooks {
    /// `run_as`: the user and group to run commands as, when sandboxd runs as root.
    pub fn new(env_hooks: Vec<Hook>, run_as: Option<(u32, u32)>, workdir: PathBuf) -> Self {
        Self {
            hooks: Mutex::new(env_hooks),
            run_as,
            workdir,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Hook>> {
        // Every change is a single push, replace or remove: a poisoned lock is still consistent.
        self.hooks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every hook, in the order they run (priority, then name).
    pub fn list(&self) -> Vec<Hook> {
        let mut hooks = self.lock().clone();
        hooks.sort_by(|a, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)));
        hooks
    }

    /// Registers `hook`, replacing an API hook of the same name.
    pub fn register(&self, hook: Hook) -> Result<Hook, HookError> {
        let mut hooks = self.lock();
        let count = hooks.len();
        match hooks.iter_mut().find(|h| h.name == hook.name) {
            Some(existing) if existing.source == Source::Env => Err(HookError::FromEnv(hook.name)),
            Some(existing) => {
                *existing = hook.clone();
                Ok(hook)
            }
            None if count >= MAX_HOOKS => Err(HookError::Full),
            None => {
                hooks.push(hook.clone());
                Ok(hook)
            }
        }
    }

    /// Removes an API hook.
    pub fn remove(&self, name: &str) -> Result<Hook, HookError> {
        let mut hooks = self.lock();
        let at = hooks
            .iter()
            .position(|h| h.name == name)
            .ok_or_else(|| HookError::NotFound(name.to_string()))?;
        if hooks[at].source == Source::Env {
            return Err(HookError::FromEnv(name.to_string()));
        }
        Ok(hooks.remove(at))
    }

    /// Runs every hook for the shutdown, within `budget`; returns each hook's outcome.
    pub async fn run_shutdown(&self, budget: Duration) -> Vec<(String, Outcome)> {
        let hooks = self.list();
        if hooks.is_empty() {
            return Vec::new();
        }
        let deadline = Instant::now() + budget;
        tracing::info!(
            hooks = hooks.len(),
            budget_secs = budget.as_secs_f64(),
            "running shutdown hooks"
        );
        let mut outcomes = Vec::new();
        let mut rest = hooks.as_slice();
        while let Some(first) = rest.first() {
            let same = rest
                .iter()
                .take_while(|h| h.priority == first.priority)
                .count();
            let (group, later) = rest.split_at(same);
            rest = later;
            let runs = group.iter().map(|hook| async move {
                let outcome = self.run_one(hook, deadline).await;
                match &outcome {
                    Outcome::Exited(0) => tracing::info!(hook = %hook.name, "shutdown hook done"),
                    other => {
                        tracing::warn!(hook = %hook.name, outcome = ?other, "shutdown hook failed")
                    }
                }
                (hook.name.clone(), outcome)
            });
            outcomes.extend(futures::future::join_all(runs).await);
        }
        outcomes
    }

    async fn run_one(&self, hook: &Hook, deadline: Instant) -> Outcome {
        let now = Instant::now();
        if now >= deadline {
            return Outcome::TimedOut;
        }
        let mut command = Command::new("/bin/bash");
        command
            .arg("-c")
            .arg(&hook.command)
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .current_dir(if self.workdir.is_dir() {
                self.workdir.as_path()
            } else {
                std::path::Path::new("/")
            })
            .env("SANDBOX_HOOK_NAME", &hook.name)
            .env("SANDBOX_HOOK_EVENT", "shutdown")
            .process_group(0);
        for name in WITHHELD_VARS {
            command.env_remove(name);
        }
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        let spawned = match supervisor::reaper().spawn(&mut command) {
            Ok(spawned) => spawned,
            Err(error) => return Outcome::NotStarted(error.to_string()),
        };
        let until = deadline.min(now + hook.timeout);
        match tokio::time::timeout_at(until, spawned.exit).await {
            Ok(Ok(status)) => Outcome::Exited(status.as_shell_code()),
            Ok(Err(_)) => Outcome::Exited(-1),
            Err(_) => {
                // The whole group: the command's children too.
                supervisor::process::ProcessGroup::new(spawned.pid).kill();
                Outcome::TimedOut
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(name: &str, command: &str, timeout: f64, priority: i64) -> Hook {
        hook(
            name,
            command,
            Some(Duration::from_secs_f64(timeout)),
            Some(priority),
            Source::Api,
        )
        .expect("valid hook")
    }

    #[test]
    fn fields_are_checked() {
        let field = |r: Result<Hook, HookError>| match r {
            Err(HookError::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(field(hook("a b", "true", None, None, Source::Api)), "name");
        assert_eq!(field(hook("", "true", None, None, Source::Api)), "name");
        assert_eq!(field(hook("a", "  ", None, None, Source::Api)), "command");
        assert_eq!(
            field(hook(
                "a",
                "true",
                Some(Duration::from_secs(9)),
                None,
                Source::Api
            )),
            "timeout"
        );
        assert_eq!(
            field(hook("a", "true", Some(Duration::ZERO), None, Source::Api)),
            "timeout"
        );
        let ok = hook("a", "true", None, None, Source::Api).expect("valid");
        assert_eq!(ok.timeout, DEFAULT_TIMEOUT);
        assert_eq!(ok.priority, 0);
    }

    #[test]
    fn the_environment_gives_hooks_that_cannot_be_removed() {
        let env = parse_env(r#"[{"name": "save", "command": "echo bye", "priority": 5}]"#)
            .expect("valid list");
        assert_eq!(env[0].source, Source::Env);
        assert!(parse_env("not json").is_err());
        assert!(parse_env(r#"[{"name": "x", "command": "true", "timeout": 99}]"#).is_err());
        assert!(parse_env(r#"[{"name": "x", "command": "true", "event": "start"}]"#).is_err());
        assert!(parse_env(r#"[{"name": "x", "cmd": "true"}]"#).is_err());
        let hooks = Hooks::new(env, None, PathBuf::from("/"));
        assert_eq!(hooks.remove("save"), Err(HookError::FromEnv("save".into())));
        assert_eq!(
            hooks.register(api("save", "true", 1.0, 0)),
            Err(HookError::FromEnv("save".into()))
        );
        hooks.register(api("mine", "true", 1.0, 9)).expect("added");
        hooks
            .register(api("mine", "false", 1.0, 1))
            .expect("replaced");
        let names: Vec<_> = hooks.list().into_iter().map(|h| h.name).collect();
        assert_eq!(names, ["mine", "save"]);
        assert!(hooks.remove("mine").is_ok());
        assert_eq!(
            hooks.remove("mine"),
            Err(HookError::NotFound("mine".into()))
        );
    }

    #[tokio::test]
    async fn hooks_run_by_priority_in_parallel_and_within_their_timeouts() {
        let dir = std::env::temp_dir().join(format!("hooks-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("log");
        let hooks = Hooks::new(Vec::new(), None, dir.clone());
        let l = log.display();
        // Priority 0: two in parallel (each sleeps 0.5 s); priority 1 after them.
        hooks
            .register(api("a", &format!("sleep 0.5; echo a >> {l}"), 2.0, 0))
            .expect("a");
        hooks
            .register(api("b", &format!("sleep 0.5; echo b >> {l}"), 2.0, 0))
            .expect("b");
        hooks
            .register(api("c", &format!("echo c >> {l}; exit 3"), 2.0, 1))
            .expect("c");
        hooks
            .register(api("slow", "sleep 30", 0.5, 2))
            .expect("slow");
        let started = std::time::Instant::now();
        let outcomes = hooks.run_shutdown(Duration::from_secs(5)).await;
        let took = started.elapsed();
        assert!(took < Duration::from_millis(2500), "took {took:?}");
        let text = std::fs::read_to_string(&log).expect("log written");
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[2], "c", "{text}");
        let outcome = |name: &str| {
            outcomes
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, o)| o.clone())
        };
        assert_eq!(outcome("a"), Some(Outcome::Exited(0)));
        assert_eq!(outcome("c"), Some(Outcome::Exited(3)));
        assert_eq!(outcome("slow"), Some(Outcome::TimedOut));
        // The budget bounds everything.
        let hooks = Hooks::new(Vec::new(), None, dir.clone());
        hooks.register(api("x", "sleep 30", 8.0, 0)).expect("x");
        let started = std::time::Instant::now();
        hooks.run_shutdown(Duration::from_millis(300)).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
