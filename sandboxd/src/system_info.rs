//! Facts about the sandbox for `GET /v1/sandbox`: OS, user, directories, listening ports and the
//! tools installed, as a [`SystemInfo`] (the API writes it in AIO's shape). Everything is read
//! from `/proc`, `/etc` and `PATH`, except Node.js's version: `node --version` is the one thing
//! run, through the reaper, with a time limit, and remembered for as long as the binary is the
//! same file.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sysinfo::System;

use crate::config::{Screen, Settings};

/// What sandboxd knows about the sandbox it runs in. A fact that could not be read is `None`
/// (or, for the time zone, UTC).
#[derive(Debug, Clone, PartialEq)]
pub struct SystemInfo {
    pub home_dir: PathBuf,
    pub workspace: PathBuf,
    /// sandboxd's version.
    pub version: &'static str,
    /// The distribution's name and version (`Debian GNU/Linux 12`).
    pub os_version: Option<String>,
    pub kernel: Option<String>,
    pub arch: &'static str,
    pub hostname: Option<String>,
    /// The user sandboxd runs as (its uid when it has no name).
    pub user: String,
    pub timezone: String,
    /// TCP ports something listens on, sorted.
    pub listening_ports: Vec<u16>,
    pub cpus: usize,
    /// Memory the sandbox may use: its cgroup's limit, else the machine's.
    pub memory_total_bytes: Option<u64>,
    pub screen: Screen,
    pub python: Option<Runtime>,
    pub nodejs: Option<Runtime>,
    /// Tools worth telling an agent about that are installed, by category.
    pub tools: Vec<ToolGroup>,
}

/// A language runtime found on `PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// The version it reports, when it could be read.
    pub version: Option<String>,
    /// The binary.
    pub bin: PathBuf,
    /// The names it answers to on `PATH`.
    pub aliases: Vec<String>,
}

/// Installed tools of one category (`browser`, `desktop`, `shell`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolGroup {
    pub category: &'static str,
    pub tools: Vec<Tool>,
}

/// An installed tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
}

/// Tools worth telling an agent about, by category: (binary, description).
const TOOLS: &[(&str, &[(&str, &str)])] = &[
    (
        "browser",
        &[(
            "chromium",
            "Chromium web browser, driven over CDP (port 9222)",
        )],
    ),
    (
        "desktop",
        &[
            (
                "xdotool",
                "Simulate keyboard and mouse input on the X display",
            ),
            ("xterm", "Terminal emulator"),
            ("mtpaint", "Paint program"),
            ("xclip", "X clipboard command line interface"),
            ("scrot", "Screenshot tool"),
        ],
    ),
    (
        "shell",
        &[
            ("bash", "GNU Bourne-Again shell"),
            ("curl", "Transfer data from or to URLs"),
            ("git", "Version control"),
            ("jq", "JSON processor"),
            ("convert", "ImageMagick image conversion"),
            ("unzip", "Extract zip archives"),
            ("nano", "Text editor"),
        ],
    ),
];

/// Names Node.js goes by on `PATH`: `node` upstream, `nodejs` in older Debian and Ubuntu
/// packages (newer ones have both).
const NODE_NAMES: [&str; 2] = ["node", "nodejs"];

/// How long `node --version` may take (a cold start on a busy sandbox is well under a second).
const NODE_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Everything, the blocking reads off the async workers and Node's probe alongside.
pub async fn gather(settings: Arc<Settings>) -> SystemInfo {
    let reading = settings.clone();
    let (info, nodejs) = tokio::join!(
        tokio::task::spawn_blocking(move || read_system(&reading)),
        nodejs()
    );
    let mut info = info.unwrap_or_else(|error| {
        tracing::error!(%error, "gathering system details panicked");
        minimal(&settings)
    });
    info.nodejs = nodejs;
    info
}

/// Everything but Node.js (see [`gather`]); unknowns where a fact cannot be read.
pub fn read_system(settings: &Settings) -> SystemInfo {
    let memory_total_bytes = System::new().map(|mut s| {
        s.refresh_memory();
        s.cgroup_limits()
            .map(|limits| limits.total_memory)
            .filter(|&m| m > 0)
            .unwrap_or_else(|| s.total_memory())
    });
    SystemInfo {
        os_version: System::long_os_version().ok(),
        kernel: System::kernel_version().ok(),
        hostname: System::host_name().ok(),
        timezone: timezone(),
        listening_ports: listening_ports(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_total_bytes: memory_total_bytes.ok(),
        python: python(),
        tools: tools(),
        ..minimal(settings)
    }
}

/// What can be said without touching the system (used if gathering fails).
pub fn minimal(settings: &Settings) -> SystemInfo {
    SystemInfo {
        home_dir: settings.home_dir.clone(),
        workspace: settings.workspace.clone(),
        version: env!("CARGO_PKG_VERSION"),
        os_version: None,
        kernel: None,
        arch: std::env::consts::ARCH,
        hostname: None,
        user: current_user(),
        timezone: "UTC".into(),
        listening_ports: Vec::new(),
        cpus: 1,
        memory_total_bytes: None,
        screen: settings.screen,
        python: None,
        nodejs: None,
        tools: Vec::new(),
    }
}

fn current_user() -> String {
    let uid = nix::unistd::Uid::effective();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

fn timezone() -> String {
    std::env::var("TZ")
        .ok()
        .filter(|tz| !tz.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/timezone")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|tz| !tz.is_empty())
        .unwrap_or_else(|| "UTC".into())
}

/// TCP ports in LISTEN state, from `/proc/net/tcp` and `/proc/net/tcp6`, sorted and unique.
pub fn listening_ports() -> Vec<u16> {
    let mut ports: Vec<u16> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| parse_listening(&table))
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

fn parse_listening(table: &str) -> Vec<u16> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            if state != "0A" {
                return None; // 0A is TCP_LISTEN
            }
            let port_hex = local.rsplit(':').next()?;
            u16::from_str_radix(port_hex, 16).ok()
        })
        .collect()
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    find_in(&std::env::var_os("PATH")?, name)
}

/// The first executable `name` in the directories of `path` (a `PATH` value).
fn find_in(path: &OsStr, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Python's version, read from where `python3` points (`python3.11` -> `3.11`).
fn python() -> Option<Runtime> {
    let bin = find_in_path("python3")?;
    let resolved = std::fs::canonicalize(&bin).unwrap_or_else(|_| bin.clone());
    let ver = resolved
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("python"))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_owned);
    Some(Runtime {
        version: ver,
        bin,
        aliases: vec!["python3".into(), "python".into()],
    })
}

/// Node.js, when `node` or `nodejs` is on `PATH`, with the version it reports.
async fn nodejs() -> Option<Runtime> {
    let path = std::env::var_os("PATH")?;
    let (bin, aliases) = find_node(&path)?;
    Some(Runtime {
        version: node_version(&bin).await,
        bin,
        aliases,
    })
}

/// The Node.js binary on `path` (`node` first, else `nodejs`) and the names on `path` that are
/// that same binary.
fn find_node(path: &OsStr) -> Option<(PathBuf, Vec<String>)> {
    let found: Vec<(&str, PathBuf)> = NODE_NAMES
        .iter()
        .filter_map(|name| Some((*name, find_in(path, name)?)))
        .collect();
    let (_, bin) = found.first()?.clone();
    let real = std::fs::canonicalize(&bin).unwrap_or_else(|_| bin.clone());
    let alias = found
        .iter()
        .filter(|(_, p)| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()) == real)
        .map(|(name, _)| (*name).to_string())
        .collect();
    Some((bin, alias))
}

/// The binary's `--version`, remembered while it is the same file (path, size, modification).
async fn node_version(bin: &Path) -> Option<String> {
    type Probed = Option<((PathBuf, u64, SystemTime), Option<String>)>;
    static LAST: Mutex<Probed> = Mutex::new(None);
    let metadata = std::fs::metadata(bin).ok()?;
    let key = (bin.to_path_buf(), metadata.len(), metadata.modified().ok()?);
    let remembered = LAST.lock().ok().and_then(|last| {
        last.as_ref()
            .filter(|(probed, _)| *probed == key)
            .map(|(_, version)| version.clone())
    });
    if let Some(version) = remembered {
        return version;
    }
    let version = run_for_output(bin, &["--version"], NODE_PROBE_TIMEOUT)
        .await
        .as_deref()
        .and_then(parse_node_version);
    if let Ok(mut last) = LAST.lock() {
        *last = Some((key, version.clone()));
    }
    version
}

/// `v20.19.2` → `20.19.2`: what `node --version` prints.
fn parse_node_version(output: &str) -> Option<String> {
    let version = output.trim().strip_prefix('v')?;
    let well_formed = version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    well_formed.then(|| version.to_string())
}

/// Runs `program args` through the reaper, in a process group of its own killed if it outlives
/// `limit`; its standard output (at most 4 KiB) if it exits with 0.
pub(crate) async fn run_for_output(
    program: &Path,
    args: &[&str],
    limit: Duration,
) -> Option<String> {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let spawned = supervisor::reaper().spawn(&mut command).ok()?;
    let pid = spawned.pid;
    let mut child = spawned.child;
    let stdout = child.stdout.take();
    let reading = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        stdout?.take(4096).read_to_string(&mut text).ok()?;
        Some(text)
    });
    let finished = tokio::time::timeout(limit, async {
        let text = reading.await.ok().flatten();
        let status = spawned.exit.await.ok();
        (text, status)
    })
    .await;
    match finished {
        Ok((text, Some(status))) if status.success() => text,
        Ok(_) => None,
        Err(_) => {
            supervisor::process::ProcessGroup::new(pid).kill();
            None
        }
    }
}

fn tools() -> Vec<ToolGroup> {
    TOOLS
        .iter()
        .map(|(category, tools)| ToolGroup {
            category,
            tools: tools
                .iter()
                .filter(|(name, _)| {
                    find_in_path(name).is_some()
                        || *name == "chromium" && Path::new("/usr/lib/chromium/chromium").exists()
                })
                .map(|(name, description)| Tool { name, description })
                .collect(),
        })
        .filter(|c| !c.tools.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_parsed_from_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0 100 0 0 10 0\n\
   1: 0100007F:170C 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 2 1 0 100 0 0 10 0\n\
   2: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0 100 0 0 10 0\n";
        assert_eq!(parse_listening(table), [8080, 5900]);
    }

    #[test]
    fn node_versions_are_read_from_its_output() {
        assert_eq!(parse_node_version("v20.19.2\n").as_deref(), Some("20.19.2"));
        assert_eq!(parse_node_version("v18.19.0").as_deref(), Some("18.19.0"));
        assert_eq!(
            parse_node_version("v22.0.0-rc.1\n").as_deref(),
            Some("22.0.0-rc.1")
        );
        for bad in ["", "v", "20.1.0", "node: not found", "vX.1", "v1.2 3"] {
            assert_eq!(parse_node_version(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn node_is_found_as_node_or_nodejs() {
        use std::os::unix::fs::PermissionsExt;
        let only_nodejs = tempfile::tempdir().expect("a directory");
        let both = tempfile::tempdir().expect("a directory");
        let empty = tempfile::tempdir().expect("a directory");
        let executable = |path: &Path| {
            std::fs::write(path, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        executable(&only_nodejs.path().join("nodejs"));
        executable(&both.path().join("node"));
        std::os::unix::fs::symlink("node", both.path().join("nodejs")).expect("symlink");
        // Not executable: not a candidate.
        std::fs::write(empty.path().join("node"), "").expect("write");

        let path = |dirs: &[&Path]| std::env::join_paths(dirs).expect("a PATH");
        let (bin, alias) = find_node(&path(&[empty.path(), only_nodejs.path()])).expect("found");
        assert_eq!(bin, only_nodejs.path().join("nodejs"));
        assert_eq!(alias, ["nodejs"]);
        let (bin, alias) = find_node(&path(&[only_nodejs.path(), both.path()])).expect("found");
        assert_eq!(bin, both.path().join("node"), "`node` comes first");
        assert_eq!(alias, ["node"], "that `nodejs` is another binary");
        let (bin, alias) = find_node(&path(&[both.path()])).expect("found");
        assert_eq!(bin, both.path().join("node"));
        assert_eq!(alias, ["node", "nodejs"]);
        assert_eq!(find_node(&path(&[empty.path()])), None);
    }

    #[tokio::test]
    async fn probes_run_through_the_reaper_within_their_limit() {
        let sh = Path::new("/bin/sh");
        let second = Duration::from_secs(5);
        let output = run_for_output(sh, &["-c", "echo v1.2.3"], second).await;
        assert_eq!(output.as_deref(), Some("v1.2.3\n"));
        assert_eq!(
            run_for_output(sh, &["-c", "echo v1.2.3; exit 1"], second).await,
            None,
            "a failed run says nothing"
        );
        let started = std::time::Instant::now();
        let hung = run_for_output(sh, &["-c", "sleep 30"], Duration::from_millis(200)).await;
        assert_eq!(hung, None);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            run_for_output(Path::new("/nonexistent/node"), &["--version"], second).await,
            None
        );
    }
}
