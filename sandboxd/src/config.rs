//! sandboxd's settings, read once from the environment at start-up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Environment variables that hold secrets: read, then removed from the process environment so
/// that no supervised program or shell command inherits them.
const SECRET_VARS: &[&str] = &["SANDBOX_API_KEY", "SANDBOX_API_KEY_FILE", "SANDBOX_AUTH"];

/// A setting that could not be used; names the variable.
#[derive(Debug, thiserror::Error)]
#[error("environment variable {name}: {message}")]
pub struct SettingsError {
    pub name: &'static str,
    pub message: String,
}

pub use crate::browser::BrowserSettings;
pub use crate::vnc::VncSettings;
pub use agentbox_http::logging::LogFormat;

/// The shortest API key sandboxd starts with. The orchestrator's sandbox keys are far longer;
/// this refuses the `k`s and `test`s that a person running a sandbox by hand might choose.
pub const MIN_API_KEY_CHARS: usize = 16;

/// Everything sandboxd needs to know about its environment.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the HTTP API listens (`SANDBOXD_LISTEN`, default `0.0.0.0:8080`).
    pub listen: SocketAddr,
    /// Every route but `/healthz` needs it (`SANDBOX_API_KEY`, or the first line of the file
    /// named by `SANDBOX_API_KEY_FILE`, which is deleted once read so that no process in the
    /// sandbox can find it later; `-` reads the first line of standard input). A missing or empty key is a start-up error; `None` only with
    /// the explicit opt-out `SANDBOX_AUTH=none`.
    pub api_key: Option<String>,
    /// Shut down after this long without an API request (`SANDBOXD_IDLE_EXIT_SECS`).
    pub idle_exit: Option<Duration>,
    /// Main programs file (`SANDBOXD_PROGRAMS`).
    pub programs_file: PathBuf,
    /// Drop-in directory of extra program files (`SANDBOXD_PROGRAMS_DIR`).
    pub programs_dir: PathBuf,
    /// Overrides of the programs file's log settings (`SANDBOXD_LOG_DIR`,
    /// `SANDBOXD_LOG_MAX_BYTES`, `SANDBOXD_LOG_BACKUPS`).
    pub log_dir: Option<PathBuf>,
    pub log_max_bytes: Option<u64>,
    pub log_backups: Option<u32>,
    /// `SANDBOXD_LOG_FORMAT`: `json` (default) or `text`.
    pub log_format: LogFormat,
    /// The agent's home directory (`HOME`).
    pub home_dir: PathBuf,
    /// The default working directory for agents (`SANDBOX_WORKSPACE`, default `$HOME/workspace`).
    pub workspace: PathBuf,
    /// A home archive to unpack into the home before any program starts
    /// (`SANDBOXD_HOME_ARCHIVE`, default `/var/lib/agentbox/restore/home.tar`, where the
    /// orchestrator puts a hibernated sandbox's, a snapshot's or a profile's before start).
    pub home_archive: PathBuf,
    /// A browser profile's archive to put in place of the home's Chromium profile before any
    /// program starts (`SANDBOXD_PROFILE_ARCHIVE`, default
    /// `/var/lib/agentbox/restore/profile.tar`, where the orchestrator puts a named profile's).
    pub profile_archive: PathBuf,
    /// Screen geometry (`SCREEN_WIDTH`, `SCREEN_HEIGHT`, `SCREEN_DEPTH`).
    pub screen: Screen,
    /// Sandbox id given by the orchestrator (`SANDBOX_ID`), for logs.
    pub sandbox_id: Option<String>,
    /// The X display the desktop API drives (`DISPLAY`, default `:1`).
    pub display: String,
    /// Browser origins allowed to call `/mcp` and to open WebSockets
    /// (`SANDBOXD_ALLOWED_ORIGINS`, or its older name `SANDBOXD_MCP_ALLOWED_ORIGINS`;
    /// comma-separated, e.g. `https://app.example.com:443`). By default a request with an
    /// `Origin` is refused unless the origin is sandboxd's own (the `Host` it was reached at),
    /// so that no other web page can drive the sandbox from a user's browser.
    pub allowed_origins: Vec<String>,
    /// The directories the file API may touch (`SANDBOXD_FILE_ROOTS`, absolute paths separated
    /// by `:`; default `$HOME:/tmp`).
    pub file_roots: Vec<PathBuf>,
    /// The most one file read returns (`SANDBOXD_MAX_READ_BYTES`; `10M`, `1048576`, ...).
    pub max_read_bytes: u64,
    /// The most one file write puts in a file (`SANDBOXD_MAX_WRITE_BYTES`).
    pub max_write_bytes: u64,
    /// The largest upload (`SANDBOXD_MAX_UPLOAD_BYTES`).
    pub max_upload_bytes: u64,
    /// The browser API's settings.
    pub browser: BrowserSettings,
    /// The remote desktop (noVNC and the VNC server behind it).
    pub vnc: VncSettings,
    /// xterm.js's files for the terminal page (`SANDBOXD_XTERM_DIR`, default
    /// `/usr/share/agentbox/xterm`: `xterm.js`, `xterm.css`, `xterm-addon-fit.js`).
    pub xterm_dir: PathBuf,
    /// Fork the shells commands run in from a long-lived zygote bash when the builtin for it is
    /// installed (`SANDBOXD_SHELL_ZYGOTE`, default true; false starts each from scratch).
    pub shell_zygote: bool,
    /// The user sandboxd becomes right after reading its settings when started as root
    /// (`SANDBOXD_RUN_AS`; the Swarm backend's way to read a key file only root may read, see
    /// `privileges`). Unset: sandboxd stays who it was started as.
    pub run_as: Option<String>,
    /// Python and JavaScript code behind `/v1/jupyter/*`, `/v1/nodejs/*` and `/v1/code/*`.
    pub code: CodeSettings,
    /// The ffmpeg that records the display and pages (`SANDBOXD_FFMPEG`, default `ffmpeg` on
    /// the `PATH`).
    pub ffmpeg: PathBuf,
    /// The shutdown hooks as given (`SANDBOX_SHUTDOWN_HOOKS`, a JSON list; parsed, reported and
    /// ignored when malformed, by [`crate::services`]).
    pub shutdown_hooks: Option<String>,
}

/// Where code runs and how much of it at once.
#[derive(Debug, Clone)]
pub struct CodeSettings {
    /// The Python the IPython kernels run on (`SANDBOXD_PYTHON`, default `/usr/bin/python3`).
    pub python: PathBuf,
    /// The Node that runs JavaScript (`SANDBOXD_NODE`, default `/usr/bin/node`).
    pub node: PathBuf,
    /// Jupyter sessions at once (`SANDBOXD_JUPYTER_MAX_SESSIONS`, default 8, 1 to 64).
    pub jupyter_max_sessions: usize,
    /// Node sessions at once (`SANDBOXD_NODE_MAX_SESSIONS`, default 16, 1 to 64).
    pub node_max_sessions: usize,
    /// How long an unused session lives (`SANDBOXD_CODE_IDLE_SECS`, default 1800, 10 to
    /// 86400).
    pub idle_expiry: Duration,
    /// Bytes one Jupyter execution keeps of its output (8 MiB).
    pub jupyter_output_bytes: usize,
    /// Bytes one Node run keeps of stdout and of stderr each (1 MiB).
    pub node_output_bytes: usize,
}

/// The code runtimes' settings.
fn code_settings(get: &impl Fn(&str) -> Option<String>) -> Result<CodeSettings, SettingsError> {
    let program = |name: &str, default: &str| {
        get(name)
            .map(|p| p.trim().to_string())
            .unwrap_or_else(|| default.into())
    };
    let python = program("SANDBOXD_PYTHON", "/usr/bin/python3");
    let node = program("SANDBOXD_NODE", "/usr/bin/node");
    for (name, path) in [("SANDBOXD_PYTHON", &python), ("SANDBOXD_NODE", &node)] {
        if !path.starts_with('/') {
            return Err(SettingsError {
                name,
                message: format!("{path:?} is not an absolute path"),
            });
        }
    }
    Ok(CodeSettings {
        python: python.into(),
        node: node.into(),
        jupyter_max_sessions: bounded(get, "SANDBOXD_JUPYTER_MAX_SESSIONS", 8, 1, 64)? as usize,
        node_max_sessions: bounded(get, "SANDBOXD_NODE_MAX_SESSIONS", 16, 1, 64)? as usize,
        idle_expiry: Duration::from_secs(
            bounded(get, "SANDBOXD_CODE_IDLE_SECS", 30 * 60, 10, 86_400)?.into(),
        ),
        jupyter_output_bytes: 8 * 1024 * 1024,
        node_output_bytes: 1024 * 1024,
    })
}

/// The remote desktop's settings ([`VncSettings`], owned by [`crate::vnc`]).
fn vnc_settings(get: &impl Fn(&str) -> Option<String>) -> Result<VncSettings, SettingsError> {
    Ok(VncSettings {
        addr: parse_or(get, "SANDBOXD_VNC_ADDR", "127.0.0.1:5900".parse().ok())?
            .expect("default VNC address is a valid literal"),
        program: get("SANDBOXD_VNC_PROGRAM").unwrap_or_else(|| "x11vnc".into()),
        password_file: get("SANDBOXD_VNC_PASSWORD_FILE")
            .unwrap_or_else(|| "/run/sandboxd/vnc-passwords".into())
            .into(),
        novnc_dir: get("SANDBOXD_NOVNC_DIR")
            .unwrap_or_else(|| "/usr/share/novnc".into())
            .into(),
    })
}

/// The browser API's settings ([`BrowserSettings`], owned by [`crate::browser`]).
fn browser_settings(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<BrowserSettings, SettingsError> {
    let cdp_addr = parse_or(
        get,
        "SANDBOXD_BROWSER_CDP_ADDR",
        "127.0.0.1:9229".parse().ok(),
    )?
    .expect("default CDP address is a valid literal");
    let allow_private = match get("SANDBOXD_BROWSER_ALLOW_PRIVATE") {
        None => false,
        Some(text) => parse_bool(&text).ok_or_else(|| SettingsError {
            name: "SANDBOXD_BROWSER_ALLOW_PRIVATE",
            message: format!("must be true or false, got {text:?}"),
        })?,
    };
    let allow_hosts = get("SANDBOXD_BROWSER_ALLOW_HOSTS")
        .map(|list| {
            list.split(',')
                .filter(|entry| !entry.trim().is_empty())
                .map(|entry| {
                    crate::browser::AllowedHost::parse(entry).map_err(|message| SettingsError {
                        name: "SANDBOXD_BROWSER_ALLOW_HOSTS",
                        message,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    let public_url = |name: &'static str| -> Result<Option<String>, SettingsError> {
        match get(name) {
            None => Ok(None),
            Some(text) => match url::Url::parse(text.trim()) {
                Ok(url) if ["http", "https", "ws", "wss"].contains(&url.scheme()) => {
                    Ok(Some(text.trim().to_string()))
                }
                _ => Err(SettingsError {
                    name,
                    message: format!("must be an http(s) or ws(s) URL, got {text:?}"),
                }),
            },
        }
    };
    Ok(BrowserSettings {
        cdp_addr,
        allow_private,
        allow_hosts,
        public_cdp_url: public_url("SANDBOXD_PUBLIC_CDP_URL")?,
        public_vnc_url: public_url("SANDBOXD_PUBLIC_VNC_URL")?,
        program: get("SANDBOXD_BROWSER_PROGRAM")
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "chromium".into()),
    })
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Default of `SANDBOXD_MAX_READ_BYTES`.
pub const DEFAULT_MAX_READ_BYTES: u64 = 10 << 20;
/// Default of `SANDBOXD_MAX_WRITE_BYTES`.
pub const DEFAULT_MAX_WRITE_BYTES: u64 = 10 << 20;
/// Default of `SANDBOXD_MAX_UPLOAD_BYTES`.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Screen {
    pub width: u32,
    pub height: u32,
    pub depth: u32,
}

impl Settings {
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`, so tests need not touch the real environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let listen = parse_or(&get, "SANDBOXD_LISTEN", "0.0.0.0:8080".parse().ok())?
            .expect("default listen address is a valid literal");
        let idle_exit = match parse_or::<u64>(&get, "SANDBOXD_IDLE_EXIT_SECS", None)? {
            Some(0) => {
                return Err(SettingsError {
                    name: "SANDBOXD_IDLE_EXIT_SECS",
                    message: "must be a positive number of seconds".into(),
                });
            }
            other => other.map(Duration::from_secs),
        };
        let log_format = match get("SANDBOXD_LOG_FORMAT").as_deref() {
            None => LogFormat::Json,
            Some(name) => name
                .parse()
                .map_err(
                    |e: agentbox_http::logging::UnknownLogFormat| SettingsError {
                        name: "SANDBOXD_LOG_FORMAT",
                        message: e.to_string(),
                    },
                )?,
        };
        let home_dir = PathBuf::from(get("HOME").unwrap_or_else(|| "/home/agent".into()));
        let workspace = get("SANDBOX_WORKSPACE")
            .map(PathBuf::from)
            .unwrap_or_else(|| home_dir.join("workspace"));
        let screen = Screen {
            width: bounded(&get, "SCREEN_WIDTH", 1280, 64, 7680)?,
            height: bounded(&get, "SCREEN_HEIGHT", 800, 64, 4320)?,
            depth: match parse_or::<u32>(&get, "SCREEN_DEPTH", Some(24))? {
                Some(d @ (16 | 24)) => d,
                _ => {
                    return Err(SettingsError {
                        name: "SCREEN_DEPTH",
                        message: "must be 16 or 24".into(),
                    });
                }
            },
        };
        let log_max_bytes = parse_or(&get, "SANDBOXD_LOG_MAX_BYTES", None)?;
        if log_max_bytes.is_some_and(|b: u64| b < 1024) {
            return Err(SettingsError {
                name: "SANDBOXD_LOG_MAX_BYTES",
                message: "must be at least 1024".into(),
            });
        }
        let file_roots = match get("SANDBOXD_FILE_ROOTS") {
            None => vec![home_dir.clone(), PathBuf::from("/tmp")],
            Some(text) => parse_roots(&text)?,
        };
        let run_as = match get("SANDBOXD_RUN_AS") {
            None => None,
            Some(name)
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                Some(name)
            }
            Some(name) => {
                return Err(SettingsError {
                    name: "SANDBOXD_RUN_AS",
                    message: format!("must be a user name, got {name:?}"),
                });
            }
        };
        let (api_key, key_source) = match get("SANDBOX_API_KEY_FILE") {
            Some(path) => (
                Some(read_key_file(&path, run_as.as_deref())?),
                "SANDBOX_API_KEY_FILE",
            ),
            None => (get("SANDBOX_API_KEY"), "SANDBOX_API_KEY"),
        };
        if let Some(key) = &api_key
            && key.chars().count() < MIN_API_KEY_CHARS
        {
            return Err(SettingsError {
                name: key_source,
                message: format!(
                    "holds a key of {} characters: use at least {MIN_API_KEY_CHARS} random \
                     characters (a short key can be guessed)",
                    key.chars().count()
                ),
            });
        }
        let api_key = match (api_key, get("SANDBOX_AUTH").as_deref()) {
            (Some(_), Some("none")) => {
                return Err(SettingsError {
                    name: "SANDBOX_AUTH",
                    message: "is `none` but an API key is set too; choose one".into(),
                });
            }
            (key @ Some(_), None | Some("key")) => key,
            (None, Some("none")) => None,
            (None, None | Some("key")) => {
                return Err(SettingsError {
                    name: "SANDBOX_API_KEY",
                    message: "is missing or empty: every port of the sandbox needs a credential. \
                              Set SANDBOX_API_KEY (or SANDBOX_API_KEY_FILE), or SANDBOX_AUTH=none \
                              to run without authentication"
                        .into(),
                });
            }
            (_, Some(other)) => {
                return Err(SettingsError {
                    name: "SANDBOX_AUTH",
                    message: format!("must be `key` (the default) or `none`, got {other:?}"),
                });
            }
        };
        Ok(Self {
            listen,
            api_key,
            idle_exit,
            programs_file: get("SANDBOXD_PROGRAMS")
                .unwrap_or_else(|| "/etc/sandboxd/programs.toml".into())
                .into(),
            programs_dir: get("SANDBOXD_PROGRAMS_DIR")
                .unwrap_or_else(|| "/etc/sandboxd/programs.d".into())
                .into(),
            log_dir: get("SANDBOXD_LOG_DIR").map(PathBuf::from),
            log_max_bytes,
            log_backups: parse_or(&get, "SANDBOXD_LOG_BACKUPS", None)?,
            log_format,
            home_dir,
            workspace,
            home_archive: get("SANDBOXD_HOME_ARCHIVE")
                .unwrap_or_else(|| "/var/lib/agentbox/restore/home.tar".into())
                .into(),
            profile_archive: get("SANDBOXD_PROFILE_ARCHIVE")
                .unwrap_or_else(|| "/var/lib/agentbox/restore/profile.tar".into())
                .into(),
            screen,
            sandbox_id: get("SANDBOX_ID"),
            display: get("DISPLAY").unwrap_or_else(|| ":1".into()),
            allowed_origins: get("SANDBOXD_ALLOWED_ORIGINS")
                .or_else(|| get("SANDBOXD_MCP_ALLOWED_ORIGINS"))
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|o| !o.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            file_roots,
            max_read_bytes: byte_size(&get, "SANDBOXD_MAX_READ_BYTES", DEFAULT_MAX_READ_BYTES)?,
            max_write_bytes: byte_size(&get, "SANDBOXD_MAX_WRITE_BYTES", DEFAULT_MAX_WRITE_BYTES)?,
            max_upload_bytes: byte_size(
                &get,
                "SANDBOXD_MAX_UPLOAD_BYTES",
                DEFAULT_MAX_UPLOAD_BYTES,
            )?,
            browser: browser_settings(&get)?,
            vnc: vnc_settings(&get)?,
            xterm_dir: get("SANDBOXD_XTERM_DIR")
                .unwrap_or_else(|| "/usr/share/agentbox/xterm".into())
                .into(),
            code: code_settings(&get)?,
            ffmpeg: get("SANDBOXD_FFMPEG")
                .unwrap_or_else(|| "ffmpeg".into())
                .into(),
            shutdown_hooks: get(crate::hooks::ENV_VAR),
            run_as,
            shell_zygote: match get("SANDBOXD_SHELL_ZYGOTE") {
                None => true,
                Some(text) => parse_bool(&text).ok_or_else(|| SettingsError {
                    name: "SANDBOXD_SHELL_ZYGOTE",
                    message: format!("must be true or false, got {text:?}"),
                })?,
            },
        })
    }
}

/// `SANDBOX_API_KEY_FILE=-`: the key is the first line of standard input (how the
/// orchestrator hands it over: written before start, so it is there at once).
pub const KEY_FROM_STDIN: &str = "-";

/// Reads the first line of standard input, then points standard input at `/dev/null`, so that
/// no program started later inherits the stream it came on.
fn read_key_from_stdin() -> std::io::Result<String> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let null = std::fs::File::open("/dev/null")?;
    nix::unistd::dup2_stdin(null)?;
    Ok(line.trim().to_string())
}

/// Reads the key file's first line and deletes the file, so that no process in the sandbox can
/// find it later. A file that cannot be deleted (a Swarm secret's read-only mount) may stay
/// only when no process left in the sandbox will be able to read it
/// (`privileges::key_file_may_stay`).
fn read_key_file(path: &str, run_as: Option<&str>) -> Result<String, SettingsError> {
    let error = |message: String| SettingsError {
        name: "SANDBOX_API_KEY_FILE",
        message,
    };
    if path == KEY_FROM_STDIN {
        let key =
            read_key_from_stdin().map_err(|e| error(format!("reading standard input: {e}")))?;
        if key.is_empty() {
            return Err(error("standard input held no key".into()));
        }
        return Ok(key);
    }
    let text = std::fs::read_to_string(path).map_err(|e| error(format!("reading {path}: {e}")))?;
    let key = text.lines().next().unwrap_or("").trim().to_string();
    if key.is_empty() {
        return Err(error(format!("{path} holds no key")));
    }
    if let Err(e) = std::fs::remove_file(path)
        && !crate::privileges::key_file_may_stay(std::path::Path::new(path), run_as)
    {
        return Err(error(format!("removing {path} after reading it: {e}")));
    }
    Ok(key)
}

fn parse_or<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: Option<T>,
) -> Result<Option<T>, SettingsError>
where
    T::Err: std::fmt::Display,
{
    match get(name) {
        None => Ok(default),
        Some(text) => text.trim().parse().map(Some).map_err(|e| SettingsError {
            name,
            message: format!("cannot parse {text:?}: {e}"),
        }),
    }
}

fn parse_roots(text: &str) -> Result<Vec<PathBuf>, SettingsError> {
    let mut roots = Vec::new();
    for entry in text.split(':').map(str::trim).filter(|e| !e.is_empty()) {
        if !entry.starts_with('/') {
            return Err(SettingsError {
                name: "SANDBOXD_FILE_ROOTS",
                message: format!("{entry:?} is not an absolute path"),
            });
        }
        roots.push(PathBuf::from(entry));
    }
    if roots.is_empty() {
        return Err(SettingsError {
            name: "SANDBOXD_FILE_ROOTS",
            message: "names no directory".into(),
        });
    }
    Ok(roots)
}

fn byte_size(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: u64,
) -> Result<u64, SettingsError> {
    let Some(text) = get(name) else {
        return Ok(default);
    };
    match crate::files::size::parse_byte_size(&text) {
        Some(0) => Err(SettingsError {
            name,
            message: "must be at least 1 byte".into(),
        }),
        Some(bytes) => Ok(bytes),
        None => Err(SettingsError {
            name,
            message: format!("cannot parse {text:?} as a size (such as 1048576, 500K or 10M)"),
        }),
    }
}

fn bounded(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: u32,
    min: u32,
    max: u32,
) -> Result<u32, SettingsError> {
    let value = parse_or(get, name, Some(default))?.unwrap_or(default);
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(SettingsError {
            name,
            message: format!("must be between {min} and {max}, got {value}"),
        })
    }
}

/// Removes secret variables from the process environment.
///
/// # Safety
/// Must be called while the process has a single thread (see [`std::env::remove_var`]).
#[allow(unsafe_code)]
pub unsafe fn scrub_secrets_from_env() {
    for name in SECRET_VARS {
        // SAFETY: the caller guarantees no other thread reads or writes the environment.
        unsafe { std::env::remove_var(name) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const TEST_KEY: &str = "config-test-key-0123";

    /// Settings from `vars`, with a key unless the test names the key or the auth mode.
    fn settings(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let mut map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if !["SANDBOX_API_KEY", "SANDBOX_API_KEY_FILE", "SANDBOX_AUTH"]
            .iter()
            .any(|name| map.contains_key(*name))
        {
            map.insert("SANDBOX_API_KEY".into(), TEST_KEY.into());
        }
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults() {
        let s = settings(&[("HOME", "/home/agent")]).unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(s.api_key.as_deref(), Some(TEST_KEY));
        assert_eq!(s.idle_exit, None);
        assert_eq!(s.workspace, PathBuf::from("/home/agent/workspace"));
        assert_eq!(
            s.screen,
            Screen {
                width: 1280,
                height: 800,
                depth: 24
            }
        );
        assert_eq!(s.log_format, LogFormat::Json);
        assert_eq!(
            s.file_roots,
            vec![PathBuf::from("/home/agent"), PathBuf::from("/tmp")]
        );
        assert_eq!(s.max_read_bytes, DEFAULT_MAX_READ_BYTES);
        assert_eq!(s.max_upload_bytes, DEFAULT_MAX_UPLOAD_BYTES);
        assert_eq!(s.browser.program, "chromium");
        let s = settings(&[("SANDBOXD_BROWSER_PROGRAM", " browser ")]).unwrap();
        assert_eq!(s.browser.program, "browser");
    }

    #[test]
    fn file_settings() {
        let s = settings(&[
            ("SANDBOXD_FILE_ROOTS", "/srv/a: /b/ :"),
            ("SANDBOXD_MAX_READ_BYTES", "1M"),
            ("SANDBOXD_MAX_WRITE_BYTES", "4096"),
            ("SANDBOXD_MAX_UPLOAD_BYTES", "2G"),
        ])
        .unwrap();
        assert_eq!(
            s.file_roots,
            vec![PathBuf::from("/srv/a"), PathBuf::from("/b/")]
        );
        assert_eq!(s.max_read_bytes, 1 << 20);
        assert_eq!(s.max_write_bytes, 4096);
        assert_eq!(s.max_upload_bytes, 2 << 30);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (vars, name) in [
            (
                vec![("SANDBOXD_IDLE_EXIT_SECS", "soon")],
                "SANDBOXD_IDLE_EXIT_SECS",
            ),
            (
                vec![("SANDBOXD_IDLE_EXIT_SECS", "0")],
                "SANDBOXD_IDLE_EXIT_SECS",
            ),
            (vec![("SCREEN_WIDTH", "99999")], "SCREEN_WIDTH"),
            (vec![("SCREEN_DEPTH", "8")], "SCREEN_DEPTH"),
            (vec![("SANDBOXD_LISTEN", "nowhere")], "SANDBOXD_LISTEN"),
            (vec![("SANDBOXD_LOG_FORMAT", "xml")], "SANDBOXD_LOG_FORMAT"),
            (
                vec![("SANDBOXD_LOG_MAX_BYTES", "10")],
                "SANDBOXD_LOG_MAX_BYTES",
            ),
            (
                vec![("SANDBOXD_FILE_ROOTS", "relative")],
                "SANDBOXD_FILE_ROOTS",
            ),
            (vec![("SANDBOXD_FILE_ROOTS", ":::")], "SANDBOXD_FILE_ROOTS"),
            (
                vec![("SANDBOXD_MAX_READ_BYTES", "lots")],
                "SANDBOXD_MAX_READ_BYTES",
            ),
            (
                vec![("SANDBOXD_MAX_WRITE_BYTES", "0")],
                "SANDBOXD_MAX_WRITE_BYTES",
            ),
            (
                vec![("SANDBOXD_MAX_UPLOAD_BYTES", "1.5G")],
                "SANDBOXD_MAX_UPLOAD_BYTES",
            ),
        ] {
            let err = settings(&vars).unwrap_err();
            assert_eq!(err.name, name);
            assert!(err.to_string().contains(name));
        }
    }

    #[test]
    fn browser_settings() {
        let s = settings(&[]).unwrap().browser;
        assert!(!s.allow_private);
        assert!(s.allow_hosts.is_empty());
        assert_eq!(s.cdp_addr.to_string(), "127.0.0.1:9229");
        let s = settings(&[
            ("SANDBOXD_BROWSER_ALLOW_PRIVATE", "true"),
            (
                "SANDBOXD_BROWSER_ALLOW_HOSTS",
                "127.0.0.1, 10.0.0.0/8,intranet.example,",
            ),
            ("SANDBOXD_PUBLIC_CDP_URL", "wss://box.example/cdp"),
        ])
        .unwrap()
        .browser;
        assert!(s.allow_private);
        assert_eq!(s.allow_hosts.len(), 3);
        assert_eq!(s.public_cdp_url.as_deref(), Some("wss://box.example/cdp"));
        for (vars, name) in [
            (
                vec![("SANDBOXD_BROWSER_ALLOW_PRIVATE", "maybe")],
                "SANDBOXD_BROWSER_ALLOW_PRIVATE",
            ),
            (
                vec![("SANDBOXD_BROWSER_ALLOW_HOSTS", "10.0.0.0/8,not a host")],
                "SANDBOXD_BROWSER_ALLOW_HOSTS",
            ),
            (
                vec![("SANDBOXD_PUBLIC_VNC_URL", "vnc.html")],
                "SANDBOXD_PUBLIC_VNC_URL",
            ),
            (
                vec![("SANDBOXD_BROWSER_CDP_ADDR", "chromium")],
                "SANDBOXD_BROWSER_CDP_ADDR",
            ),
        ] {
            let err = settings(&vars).unwrap_err();
            assert_eq!(err.name, name);
            assert!(err.to_string().contains(name), "{err}");
        }
    }

    #[test]
    fn a_key_file_is_read_once_and_removed() {
        let dir = std::env::temp_dir().join(format!("sandboxd-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "s3cret-s3cret-s3cret\n").unwrap();
        let p = path.display().to_string();
        let s = settings(&[("SANDBOX_API_KEY_FILE", &p), ("SANDBOX_API_KEY", "ignored")]).unwrap();
        assert_eq!(s.api_key.as_deref(), Some("s3cret-s3cret-s3cret"));
        assert!(!path.exists());
        let err = settings(&[("SANDBOX_API_KEY_FILE", &p)]).unwrap_err();
        assert_eq!(err.name, "SANDBOX_API_KEY_FILE");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_or_empty_key_is_an_error_unless_auth_is_explicitly_off() {
        for vars in [
            vec![("SANDBOX_API_KEY", "")],
            vec![("SANDBOX_API_KEY", "  ")],
        ] {
            let err = settings(&vars).unwrap_err();
            assert_eq!(err.name, "SANDBOX_API_KEY", "{err}");
            assert!(err.to_string().contains("SANDBOX_AUTH=none"), "{err}");
        }
        let err = settings(&[("SANDBOX_AUTH", "key")]).unwrap_err();
        assert_eq!(err.name, "SANDBOX_API_KEY");
        assert_eq!(settings(&[("SANDBOX_AUTH", "none")]).unwrap().api_key, None);
        let err = settings(&[("SANDBOX_AUTH", "none"), ("SANDBOX_API_KEY", TEST_KEY)]).unwrap_err();
        assert_eq!(err.name, "SANDBOX_AUTH");
        let err = settings(&[("SANDBOX_AUTH", "off")]).unwrap_err();
        assert_eq!(err.name, "SANDBOX_AUTH");
        let s = settings(&[
            ("SANDBOX_API_KEY", TEST_KEY),
            ("SANDBOXD_IDLE_EXIT_SECS", "30"),
        ])
        .unwrap();
        assert_eq!(s.api_key.as_deref(), Some(TEST_KEY));
        assert_eq!(s.idle_exit, Some(Duration::from_secs(30)));
    }

    /// Issue 28: sandboxd started with a 3-character key. Shorter than 16 characters is a
    /// start-up error naming the variable (and not the key); 16 is enough.
    #[test]
    fn a_short_key_is_refused_at_start_up() {
        for short in ["abc", "x7Q", "fifteen-chars-x"] {
            let err = settings(&[("SANDBOX_API_KEY", short)]).unwrap_err();
            assert_eq!(err.name, "SANDBOX_API_KEY", "{short}");
            assert!(err.to_string().contains("at least 16"), "{err}");
            assert!(
                !err.to_string().contains(short),
                "the key is not printed: {err}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "abc\n").unwrap();
        let err = settings(&[("SANDBOX_API_KEY_FILE", &path.display().to_string())]).unwrap_err();
        assert_eq!(err.name, "SANDBOX_API_KEY_FILE");
        let s = settings(&[("SANDBOX_API_KEY", "sixteen-chars-xy")]).unwrap();
        assert_eq!(s.api_key.as_deref(), Some("sixteen-chars-xy"));
    }
}
