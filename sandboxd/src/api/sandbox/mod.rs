//! `GET /v1/sandbox`: who and where the agent is, in AIO's shape; and the packages installed
//! for its Python and Node.js (`GET /v1/sandbox/packages/{python,nodejs}`).

pub mod activity;
pub mod home;
pub mod hooks;
pub mod processes;
pub mod skills;

use axum::Json;
use axum::extract::State;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::types::{
    AvailableTool, Envelope, PackageInfo, RuntimeEnv, SandboxContext, SandboxDetail,
    SandboxResponse, ScreenInfo, SystemEnv, ToolCategory, ToolSpec,
};
use crate::packages;
use crate::system_info::{self, Runtime, SystemInfo};
use std::path::Path;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(context))
        .routes(routes!(python_packages))
        .routes(routes!(nodejs_packages))
        .merge(activity::routes())
        .merge(processes::routes())
        .merge(hooks::routes())
        .merge(home::routes())
        .merge(skills::routes())
}

/// Home dir, workspace, version and system details. The context is both in `data` and at the
/// top level, where AIO's SDK reads it.
#[utoipa::path(get, path = "/v1/sandbox", tag = "sandbox",
    responses((status = 200, body = SandboxResponse)))]
pub async fn context(State(state): State<AppState>) -> Json<SandboxResponse> {
    let context = sandbox_context(system_info::gather(state.settings.clone()).await);
    Json(SandboxResponse {
        success: true,
        message: "Operation successful".into(),
        data: context.clone(),
        context,
    })
}

/// The Python distributions the system `python3` sees (the agent's user site included), read
/// from their metadata without starting Python.
#[utoipa::path(get, path = "/v1/sandbox/packages/python", tag = "sandbox",
    responses((status = 200, body = Envelope<Vec<PackageInfo>>)))]
pub async fn python_packages(
    State(state): State<AppState>,
) -> Result<Json<Envelope<Vec<PackageInfo>>>, ApiError> {
    let home = state.settings.home_dir.clone();
    listing(move || packages::python_packages(&packages::python_site_dirs(&home, Path::new("/"))))
        .await
}

/// The global Node.js packages (npm's prefixes and Debian's module directories), read from
/// their package.json files.
#[utoipa::path(get, path = "/v1/sandbox/packages/nodejs", tag = "sandbox",
    responses((status = 200, body = Envelope<Vec<PackageInfo>>)))]
pub async fn nodejs_packages(
    State(state): State<AppState>,
) -> Result<Json<Envelope<Vec<PackageInfo>>>, ApiError> {
    let home = state.settings.home_dir.clone();
    listing(move || packages::node_packages(&packages::node_module_dirs(&home, Path::new("/"))))
        .await
}

/// Runs a directory scan off the async workers and answers its packages.
async fn listing(
    scan: impl FnOnce() -> packages::Listing + Send + 'static,
) -> Result<Json<Envelope<Vec<PackageInfo>>>, ApiError> {
    let listing = tokio::task::spawn_blocking(scan)
        .await
        .map_err(|e| ApiError::internal(format!("listing packages failed: {e}")))?;
    let mut envelope = Envelope::ok(
        listing
            .packages
            .into_iter()
            .map(|p| PackageInfo {
                name: p.name,
                version: p.version,
                location: p.location.display().to_string(),
            })
            .collect(),
    );
    if listing.truncated {
        envelope.message = format!(
            "the first {} packages (the listing is truncated)",
            packages::MAX_PACKAGES
        );
    }
    Ok(Json(envelope))
}

/// The wire context of the system's facts; an unknown fact is `unknown` (memory: 0).
fn sandbox_context(info: SystemInfo) -> SandboxContext {
    let unknown = |fact: Option<String>| fact.unwrap_or_else(|| "unknown".into());
    let home_dir = info.home_dir.display().to_string();
    let workspace = info.workspace.display().to_string();
    SandboxContext {
        home_dir: home_dir.clone(),
        workspace: workspace.clone(),
        version: info.version.to_string(),
        detail: SandboxDetail {
            system: SystemEnv {
                os: "linux".into(),
                os_version: unknown(info.os_version),
                kernel: unknown(info.kernel),
                arch: info.arch.to_string(),
                hostname: unknown(info.hostname),
                user: info.user,
                home_dir,
                workspace,
                timezone: info.timezone,
                occupied_ports: info.listening_ports.iter().map(u16::to_string).collect(),
                cpus: info.cpus,
                memory_total_bytes: info.memory_total_bytes.unwrap_or(0),
                screen: ScreenInfo {
                    width: info.screen.width,
                    height: info.screen.height,
                    depth: info.screen.depth,
                },
            },
            runtime: RuntimeEnv {
                python: info.python.into_iter().map(tool_spec).collect(),
                nodejs: info.nodejs.into_iter().map(tool_spec).collect(),
            },
            utils: info
                .tools
                .into_iter()
                .map(|group| ToolCategory {
                    category: group.category.to_string(),
                    tools: group
                        .tools
                        .into_iter()
                        .map(|tool| AvailableTool {
                            name: tool.name.to_string(),
                            description: tool.description.to_string(),
                        })
                        .collect(),
                })
                .collect(),
        },
    }
}

fn tool_spec(runtime: Runtime) -> ToolSpec {
    ToolSpec {
        ver: runtime.version,
        bin: Some(runtime.bin.display().to_string()),
        alias: runtime.aliases,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::Screen;
    use crate::system_info::{Tool, ToolGroup};

    #[test]
    fn facts_are_written_in_aios_shape() {
        let info = SystemInfo {
            home_dir: PathBuf::from("/home/agent"),
            workspace: PathBuf::from("/home/agent/work"),
            version: "1.2.3",
            os_version: None,
            kernel: Some("6.1.0".into()),
            arch: "x86_64",
            hostname: None,
            user: "agent".into(),
            timezone: "UTC".into(),
            listening_ports: vec![5900, 8080],
            cpus: 2,
            memory_total_bytes: None,
            screen: Screen {
                width: 1280,
                height: 800,
                depth: 24,
            },
            python: None,
            nodejs: Some(Runtime {
                version: Some("20.19.2".into()),
                bin: PathBuf::from("/usr/bin/node"),
                aliases: vec!["node".into(), "nodejs".into()],
            }),
            tools: vec![ToolGroup {
                category: "shell",
                tools: vec![Tool {
                    name: "jq",
                    description: "JSON processor",
                }],
            }],
        };
        let context = serde_json::to_value(sandbox_context(info)).expect("serializable");
        let system = &context["detail"]["system"];
        assert_eq!(system["os_version"], "unknown");
        assert_eq!(system["hostname"], "unknown");
        assert_eq!(system["kernel"], "6.1.0");
        assert_eq!(
            system["occupied_ports"],
            serde_json::json!(["5900", "8080"])
        );
        assert_eq!(system["memory_total_bytes"], 0);
        assert_eq!(system["home_dir"], "/home/agent");
        assert_eq!(context["workspace"], "/home/agent/work");
        assert_eq!(
            context["detail"]["runtime"]["python"],
            serde_json::json!([])
        );
        assert_eq!(
            context["detail"]["runtime"]["nodejs"],
            serde_json::json!([{
                "ver": "20.19.2",
                "bin": "/usr/bin/node",
                "alias": ["node", "nodejs"],
            }])
        );
        assert_eq!(context["detail"]["utils"][0]["tools"][0]["name"], "jq");
    }
}
