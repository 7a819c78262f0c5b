//! Program specifications: what to run and how to look after it, loaded from TOML.
//!
//! A configuration file holds one optional `[supervisor]` table (log settings) and any number of
//! `[[program]]` tables. Several files can be merged (a main file plus a drop-in directory);
//! [`SupervisorConfig::validate`] then checks names, dependencies (known, acyclic) and limits.
//!
//! Strings in `command`, `args`, `env`, `working_dir` and probes may refer to the supervisor's own
//! environment as `${NAME}` or `${NAME:-default}`; [`SupervisorConfig::expand`] substitutes them
//! once, before anything starts. No string is ever handed to a shell by the supervisor itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Errors found while loading or validating a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading supervisor config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing supervisor config {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("program {name:?}: {message}")]
    Program { name: String, message: String },
    #[error("duplicate program name {0:?}")]
    Duplicate(String),
    #[error("dependency cycle among programs: {0}")]
    Cycle(String),
    #[error("{0}")]
    Invalid(String),
}

/// The whole configuration: global settings plus the programs.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SupervisorConfig {
    #[serde(default)]
    pub supervisor: GlobalSettings,
    #[serde(default, rename = "program")]
    pub programs: Vec<ProgramSpec>,
}

/// Settings that apply to every program.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GlobalSettings {
    /// Directory for per-program output logs (`<name>.log`, `<name>.log.1`, ...). Created if absent.
    pub log_dir: Option<PathBuf>,
    /// A log file is rotated when a write would take it past this many bytes.
    pub log_max_bytes: u64,
    /// How many rotated files (`.1` .. `.N`) are kept besides the live one.
    pub log_backups: u32,
}

impl Default for GlobalSettings {
    fn default() -> Self {
        Self {
            log_dir: None,
            log_max_bytes: 10 * 1024 * 1024,
            log_backups: 3,
        }
    }
}

/// When a program that has exited is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Always start it again, whatever its exit status.
    Always,
    /// Start it again unless it exited with status 0.
    OnFailure,
    /// Never start it again on its own.
    Never,
}

/// How the supervisor decides that a started program is ready to serve.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ReadinessProbe {
    /// A unix socket at this path exists and accepts a connection.
    UnixSocket(PathBuf),
    /// A TCP connection to this `host:port` is accepted.
    Tcp(String),
    /// An HTTP GET of this `http://host:port/path` URL returns a 2xx status.
    Http(String),
    /// Reading from this TCP address yields a greeting that starts with `expect`.
    Banner { address: String, expect: String },
    /// This command (argv, no shell) exits with status 0.
    Exec(Vec<String>),
}

/// One supervised program.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgramSpec {
    /// Unique name; used in logs, the state table and log file names.
    pub name: String,
    /// Executable path (or a name looked up in `PATH`).
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment on top of the supervisor's own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<PathBuf>,
    /// Run as this user (name or numeric uid); needs the supervisor to be root unless it already is
    /// that user.
    pub user: Option<String>,
    /// Run with this primary group (name or numeric gid); defaults to the user's primary group.
    pub group: Option<String>,
    /// Programs that must be ready before this one starts.
    #[serde(default)]
    pub depends_on: Vec<String>,
    pub ready: Option<ReadinessProbe>,
    /// Start when the supervisor starts.
    #[serde(default = "default_true")]
    pub autostart: bool,
    /// Counted by [`crate::Supervisor::all_required_ready`].
    #[serde(default = "default_true")]
    pub required: bool,
    #[serde(default = "default_restart")]
    pub restart: RestartPolicy,
    /// A program without a probe is ready once it has run this long; every program must stay up
    /// this long after becoming ready before its failure count is cleared.
    #[serde(default = "default_start_secs")]
    pub start_secs: f64,
    /// Consecutive failed starts tolerated before the program is marked fatal.
    #[serde(default = "default_start_retries")]
    pub start_retries: u32,
    /// First back-off delay after a failure; doubles with each further failure.
    #[serde(default = "default_backoff_initial")]
    pub backoff_initial_secs: f64,
    /// Upper bound of the back-off delay.
    #[serde(default = "default_backoff_max")]
    pub backoff_max_secs: f64,
    /// A probe that has not succeeded after this long counts as a failed start.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout_secs: f64,
    /// Pause between probe attempts.
    #[serde(default = "default_probe_interval")]
    pub probe_interval_ms: u64,
    /// Signal sent to the program's process group to stop it (name, e.g. `TERM`, or `SIGTERM`).
    #[serde(default = "default_stop_signal")]
    pub stop_signal: String,
    /// Wait this long after the stop signal before killing the whole process group.
    #[serde(default = "default_stop_wait")]
    pub stop_wait_secs: f64,
}

fn default_true() -> bool {
    true
}
fn default_restart() -> RestartPolicy {
    RestartPolicy::Always
}
fn default_start_secs() -> f64 {
    1.0
}
fn default_start_retries() -> u32 {
    3
}
fn default_backoff_initial() -> f64 {
    0.5
}
fn default_backoff_max() -> f64 {
    30.0
}
fn default_ready_timeout() -> f64 {
    30.0
}
fn default_probe_interval() -> u64 {
    10
}
fn default_stop_signal() -> String {
    "TERM".to_string()
}
fn default_stop_wait() -> f64 {
    5.0
}

impl ProgramSpec {
    /// A spec with every default, for building programs in code.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            working_dir: None,
            user: None,
            group: None,
            depends_on: Vec::new(),
            ready: None,
            autostart: true,
            required: true,
            restart: default_restart(),
            start_secs: default_start_secs(),
            start_retries: default_start_retries(),
            backoff_initial_secs: default_backoff_initial(),
            backoff_max_secs: default_backoff_max(),
            ready_timeout_secs: default_ready_timeout(),
            probe_interval_ms: default_probe_interval(),
            stop_signal: default_stop_signal(),
            stop_wait_secs: default_stop_wait(),
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    pub fn start_secs(&self) -> Duration {
        Duration::from_secs_f64(self.start_secs)
    }

    pub fn stop_wait(&self) -> Duration {
        Duration::from_secs_f64(self.stop_wait_secs)
    }

    pub fn ready_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.ready_timeout_secs)
    }

    pub fn probe_interval(&self) -> Duration {
        Duration::from_millis(self.probe_interval_ms)
    }

    /// The back-off delay before the attempt that follows `failures` consecutive failures
    /// (`failures >= 1`): `initial * 2^(failures-1)`, capped at the maximum.
    pub fn backoff_delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(30) as i32;
        let secs = (self.backoff_initial_secs * 2f64.powi(exponent)).min(self.backoff_max_secs);
        Duration::from_secs_f64(secs.max(0.0))
    }

    /// The stop signal, parsed. Validation guarantees this succeeds for a validated spec.
    pub fn stop_signal(&self) -> Result<nix::sys::signal::Signal, ConfigError> {
        parse_signal(&self.stop_signal).ok_or_else(|| ConfigError::Program {
            name: self.name.clone(),
            message: format!("unknown stop_signal {:?}", self.stop_signal),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let fail = |message: String| {
            Err(ConfigError::Program {
                name: self.name.clone(),
                message,
            })
        };
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            || self.name.starts_with('.')
        {
            return fail(
                "name must be 1-64 characters of [A-Za-z0-9._-], not starting with '.'".into(),
            );
        }
        if self.command.is_empty() {
            return fail("command must not be empty".into());
        }
        self.stop_signal()?;
        for (field, value) in [
            ("start_secs", self.start_secs),
            ("backoff_initial_secs", self.backoff_initial_secs),
            ("backoff_max_secs", self.backoff_max_secs),
            ("ready_timeout_secs", self.ready_timeout_secs),
            ("stop_wait_secs", self.stop_wait_secs),
        ] {
            if !value.is_finite() || !(0.0..=86_400.0).contains(&value) {
                return fail(format!("{field} must be between 0 and 86400 seconds"));
            }
        }
        if self.probe_interval_ms == 0 || self.probe_interval_ms > 60_000 {
            return fail("probe_interval_ms must be between 1 and 60000".into());
        }
        if let Some(ReadinessProbe::Exec(argv)) = &self.ready
            && argv.is_empty()
        {
            return fail("ready.exec needs at least the program to run".into());
        }
        if let Some(ReadinessProbe::Http(url)) = &self.ready
            && !url.starts_with("http://")
        {
            return fail(format!("ready.http must be an http:// URL, got {url:?}"));
        }
        if self.depends_on.iter().any(|d| d == &self.name) {
            return fail("a program cannot depend on itself".into());
        }
        Ok(())
    }
}

/// Parses `TERM`, `SIGTERM` or a number into a signal.
pub fn parse_signal(text: &str) -> Option<nix::sys::signal::Signal> {
    use std::str::FromStr;
    let upper = text.trim().to_ascii_uppercase();
    if let Ok(n) = upper.parse::<i32>() {
        return nix::sys::signal::Signal::try_from(n).ok();
    }
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    nix::sys::signal::Signal::from_str(&full).ok()
}

impl SupervisorConfig {
    /// Parses one TOML document.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: origin.to_path_buf(),
            source: Box::new(source),
        })
    }

    /// Loads a main file and then every `*.toml` file of `drop_in_dir` (if given and present), in
    /// name order. Programs are appended; a drop-in's `[supervisor]` table is ignored.
    pub fn load(main: &Path, drop_in_dir: Option<&Path>) -> Result<Self, ConfigError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        let mut config = Self::from_toml(&read(main)?, main)?;
        if let Some(dir) = drop_in_dir
            && dir.is_dir()
        {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|source| ConfigError::Read {
                    path: dir.to_path_buf(),
                    source,
                })?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "toml"))
                .collect();
            files.sort();
            for file in files {
                let extra = Self::from_toml(&read(&file)?, &file)?;
                config.programs.extend(extra.programs);
            }
        }
        Ok(config)
    }

    /// Substitutes `${NAME}` and `${NAME:-default}` in every program string, looking names up
    /// with `lookup` (normally the process environment).
    pub fn expand(&mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        for program in &mut self.programs {
            let name = program.name.clone();
            let exp = |s: &str| {
                expand_vars(s, &lookup).map_err(|message| ConfigError::Program {
                    name: name.clone(),
                    message,
                })
            };
            program.command = exp(&program.command)?;
            for arg in &mut program.args {
                *arg = exp(arg)?;
            }
            for value in program.env.values_mut() {
                *value = exp(value)?;
            }
            if let Some(dir) = &program.working_dir {
                program.working_dir = Some(PathBuf::from(exp(&dir.to_string_lossy())?));
            }
            program.ready = match program.ready.take() {
                None => None,
                Some(ReadinessProbe::UnixSocket(p)) => Some(ReadinessProbe::UnixSocket(
                    PathBuf::from(exp(&p.to_string_lossy())?),
                )),
                Some(ReadinessProbe::Tcp(a)) => Some(ReadinessProbe::Tcp(exp(&a)?)),
                Some(ReadinessProbe::Http(u)) => Some(ReadinessProbe::Http(exp(&u)?)),
                Some(ReadinessProbe::Banner { address, expect }) => Some(ReadinessProbe::Banner {
                    address: exp(&address)?,
                    expect: exp(&expect)?,
                }),
                Some(ReadinessProbe::Exec(argv)) => Some(ReadinessProbe::Exec(
                    argv.iter().map(|a| exp(a)).collect::<Result<_, _>>()?,
                )),
            };
        }
        Ok(())
    }

    /// Checks names, dependencies and limits. Returns the programs in a start order where every
    /// program comes after all of its dependencies.
    pub fn validate(&self) -> Result<Vec<String>, ConfigError> {
        if self.supervisor.log_max_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "supervisor.log_max_bytes must be at least 1024".into(),
            ));
        }
        if self.supervisor.log_backups > 100 {
            return Err(ConfigError::Invalid(
                "supervisor.log_backups must be at most 100".into(),
            ));
        }
        let mut names = HashSet::new();
        for program in &self.programs {
            program.validate()?;
            if !names.insert(program.name.as_str()) {
                return Err(ConfigError::Duplicate(program.name.clone()));
            }
        }
        for program in &self.programs {
            for dep in &program.depends_on {
                if !names.contains(dep.as_str()) {
                    return Err(ConfigError::Program {
                        name: program.name.clone(),
                        message: format!("depends_on names unknown program {dep:?}"),
                    });
                }
            }
        }
        topological_order(&self.programs)
    }
}

/// Kahn's algorithm, keeping the file order among programs that are free at the same time.
fn topological_order(programs: &[ProgramSpec]) -> Result<Vec<String>, ConfigError> {
    let mut remaining: HashMap<&str, usize> = programs
        .iter()
        .map(|p| (p.name.as_str(), p.depends_on.len()))
        .collect();
    let mut order = Vec::with_capacity(programs.len());
    while order.len() < programs.len() {
        let next: Vec<&str> = programs
            .iter()
            .map(|p| p.name.as_str())
            .filter(|n| remaining.get(n) == Some(&0))
            .collect();
        if next.is_empty() {
            let mut stuck: Vec<&str> = remaining.keys().copied().collect();
            stuck.sort_unstable();
            return Err(ConfigError::Cycle(stuck.join(", ")));
        }
        for name in next {
            remaining.remove(name);
            order.push(name.to_string());
            for p in programs {
                if p.depends_on.iter().any(|d| d == name)
                    && let Some(count) = remaining.get_mut(p.name.as_str())
                {
                    *count -= 1;
                }
            }
        }
    }
    Ok(order)
}

/// Expands `${NAME}` and `${NAME:-default}`; `$$` is a literal `$`. Any other `$` is kept as is.
fn expand_vars(input: &str, lookup: &impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| format!("unterminated ${{...}} in {input:?}"))?;
            let expr = &body[..end];
            let (name, default) = match expr.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (expr, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("bad variable name {name:?} in {input:?}"));
            }
            match lookup(name).filter(|v| !v.is_empty()) {
                Some(value) => out.push_str(&value),
                None => match default {
                    Some(d) => out.push_str(d),
                    None => return Err(format!("variable {name} is not set (used in {input:?})")),
                },
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<String>, ConfigError> {
        SupervisorConfig::from_toml(text, Path::new("test.toml"))?.validate()
    }

    #[test]
    fn order_puts_dependencies_first() {
        let order = parse(
            r#"
            [[program]]
            name = "c"
            command = "true"
            depends_on = ["b"]
            [[program]]
            name = "a"
            command = "true"
            [[program]]
            name = "b"
            command = "true"
            depends_on = ["a"]
            "#,
        )
        .unwrap();
        assert_eq!(order, ["a", "b", "c"]);
    }

    #[test]
    fn cycles_unknown_deps_and_duplicates_are_refused() {
        let cycle = parse(
            r#"
            [[program]]
            name = "a"
            command = "true"
            depends_on = ["b"]
            [[program]]
            name = "b"
            command = "true"
            depends_on = ["a"]
            "#,
        );
        assert!(matches!(cycle, Err(ConfigError::Cycle(s)) if s == "a, b"));
        let unknown = parse("[[program]]\nname = \"a\"\ncommand = \"x\"\ndepends_on = [\"zz\"]\n");
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("unknown program \"zz\"")
        );
        let dup = parse(
            "[[program]]\nname = \"a\"\ncommand = \"x\"\n[[program]]\nname = \"a\"\ncommand = \"y\"\n",
        );
        assert!(matches!(dup, Err(ConfigError::Duplicate(n)) if n == "a"));
    }

    #[test]
    fn bad_fields_name_the_program_and_field() {
        let err = parse("[[program]]\nname = \"a\"\ncommand = \"x\"\nstop_signal = \"NOPE\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"a\"") && err.contains("stop_signal"),
            "{err}"
        );
        let err = parse("[[program]]\nname = \"a\"\ncommand = \"x\"\nstop_wait_secs = -1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("stop_wait_secs"), "{err}");
        let err = parse("[[program]]\nname = \"a\"\ncommand = \"x\"\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
        let err = parse("[[program]]\nname = \"a/b\"\ncommand = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("name must be"), "{err}");
    }

    #[test]
    fn probes_parse_in_every_form() {
        let config = SupervisorConfig::from_toml(
            r#"
            [[program]]
            name = "a"
            command = "x"
            ready = { unix_socket = "/tmp/.X11-unix/X1" }
            [[program]]
            name = "b"
            command = "x"
            ready = { banner = { address = "127.0.0.1:5900", expect = "RFB 003.008" } }
            [[program]]
            name = "c"
            command = "x"
            ready = { exec = ["sh", "-c", "true"] }
            "#,
            Path::new("t"),
        )
        .unwrap();
        assert_eq!(
            config.programs[1].ready,
            Some(ReadinessProbe::Banner {
                address: "127.0.0.1:5900".into(),
                expect: "RFB 003.008".into()
            })
        );
    }

    #[test]
    fn variables_expand_with_defaults() {
        let lookup = |name: &str| (name == "W").then(|| "1920".to_string());
        assert_eq!(expand_vars("${W}x${H:-800}", &lookup).unwrap(), "1920x800");
        assert_eq!(
            expand_vars("$$HOME and $x", &lookup).unwrap(),
            "$HOME and $x"
        );
        assert!(
            expand_vars("${MISSING}", &lookup)
                .unwrap_err()
                .contains("MISSING")
        );
        assert!(expand_vars("${W", &lookup).is_err());
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut spec = ProgramSpec::new("a", "x");
        spec.backoff_initial_secs = 0.5;
        spec.backoff_max_secs = 3.0;
        let delays: Vec<f64> = (1..=5)
            .map(|n| spec.backoff_delay(n).as_secs_f64())
            .collect();
        assert_eq!(delays, [0.5, 1.0, 2.0, 3.0, 3.0]);
    }

    #[test]
    fn signals_parse_by_name_and_number() {
        use nix::sys::signal::Signal;
        assert_eq!(parse_signal("TERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("sigint"), Some(Signal::SIGINT));
        assert_eq!(parse_signal("9"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("FOO"), None);
    }
}
