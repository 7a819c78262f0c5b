//! Facts about the sandbox for `GET /v1/sandbox`: OS, user, directories, listening ports and the
//! tools installed. Everything is read from `/proc`, `/etc` and `PATH`; nothing is executed.

use std::path::{Path, PathBuf};

use sysinfo::System;

use crate::api::types::{
    AvailableTool, RuntimeEnv, SandboxContext, SandboxDetail, ScreenInfo, SystemEnv, ToolCategory,
    ToolSpec,
};
use crate::config::Settings;

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

/// The full context; falls back to unknowns where a fact cannot be read.
pub fn sandbox_context(settings: &Settings) -> SandboxContext {
    let home = settings.home_dir.display().to_string();
    let workspace = settings.workspace.display().to_string();
    let memory_total_bytes = System::new().map(|mut s| {
        s.refresh_memory();
        s.cgroup_limits()
            .map(|limits| limits.total_memory)
            .filter(|&m| m > 0)
            .unwrap_or_else(|| s.total_memory())
    });
    SandboxContext {
        home_dir: home.clone(),
        workspace: workspace.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        detail: SandboxDetail {
            system: SystemEnv {
                os: "linux".into(),
                os_version: System::long_os_version().unwrap_or_else(|_| "unknown".into()),
                kernel: System::kernel_version().unwrap_or_else(|_| "unknown".into()),
                arch: std::env::consts::ARCH.into(),
                hostname: System::host_name().unwrap_or_else(|_| "unknown".into()),
                user: current_user(),
                home_dir: home,
                workspace,
                timezone: timezone(),
                occupied_ports: listening_ports()
                    .into_iter()
                    .map(|p| p.to_string())
                    .collect(),
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
                memory_total_bytes: memory_total_bytes.unwrap_or(0),
                screen: screen(settings),
            },
            runtime: RuntimeEnv {
                python: python().into_iter().collect(),
                nodejs: Vec::new(),
            },
            utils: tools(),
        },
    }
}

/// What can be said without touching the system (used if gathering fails).
pub fn minimal_context(settings: &Settings) -> SandboxContext {
    let home = settings.home_dir.display().to_string();
    let workspace = settings.workspace.display().to_string();
    SandboxContext {
        home_dir: home.clone(),
        workspace: workspace.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        detail: SandboxDetail {
            system: SystemEnv {
                os: "linux".into(),
                os_version: "unknown".into(),
                kernel: "unknown".into(),
                arch: std::env::consts::ARCH.into(),
                hostname: "unknown".into(),
                user: current_user(),
                home_dir: home,
                workspace,
                timezone: "UTC".into(),
                occupied_ports: Vec::new(),
                cpus: 1,
                memory_total_bytes: 0,
                screen: screen(settings),
            },
            runtime: RuntimeEnv {
                python: Vec::new(),
                nodejs: Vec::new(),
            },
            utils: Vec::new(),
        },
    }
}

fn screen(settings: &Settings) -> ScreenInfo {
    ScreenInfo {
        width: settings.screen.width,
        height: settings.screen.height,
        depth: settings.screen.depth,
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
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Python's version, read from where `python3` points (`python3.11` -> `3.11`).
fn python() -> Option<ToolSpec> {
    let bin = find_in_path("python3")?;
    let resolved = std::fs::canonicalize(&bin).unwrap_or_else(|_| bin.clone());
    let ver = resolved
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("python"))
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_owned);
    Some(ToolSpec {
        ver,
        bin: Some(bin.display().to_string()),
        alias: vec!["python3".into(), "python".into()],
    })
}

fn tools() -> Vec<ToolCategory> {
    TOOLS
        .iter()
        .map(|(category, tools)| ToolCategory {
            category: (*category).into(),
            tools: tools
                .iter()
                .filter(|(name, _)| {
                    find_in_path(name).is_some()
                        || *name == "chromium" && Path::new("/usr/lib/chromium/chromium").exists()
                })
                .map(|(name, description)| AvailableTool {
                    name: (*name).into(),
                    description: (*description).into(),
                })
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
}
