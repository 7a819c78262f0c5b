//! `GET /v1/sandbox`: the sandbox context in AIO's shape.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /v1/sandbox`: AIO's envelope, with the context both in `data` and, as AIO's SDK reads
/// it, at the top level.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SandboxResponse {
    pub success: bool,
    pub message: String,
    pub data: SandboxContext,
    #[serde(flatten)]
    pub context: SandboxContext,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SandboxContext {
    pub home_dir: String,
    pub workspace: String,
    pub version: String,
    pub detail: SandboxDetail,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SandboxDetail {
    pub system: SystemEnv,
    pub runtime: RuntimeEnv,
    pub utils: Vec<ToolCategory>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SystemEnv {
    pub os: String,
    pub os_version: String,
    pub kernel: String,
    pub arch: String,
    pub hostname: String,
    pub user: String,
    pub home_dir: String,
    pub workspace: String,
    pub timezone: String,
    /// Listening TCP ports, as strings (AIO's shape).
    pub occupied_ports: Vec<String>,
    pub cpus: usize,
    pub memory_total_bytes: u64,
    pub screen: ScreenInfo,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ScreenInfo {
    pub width: u32,
    pub height: u32,
    pub depth: u32,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct RuntimeEnv {
    pub python: Vec<ToolSpec>,
    pub nodejs: Vec<ToolSpec>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ToolSpec {
    pub ver: Option<String>,
    pub bin: Option<String>,
    pub alias: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ToolCategory {
    pub category: String,
    pub tools: Vec<AvailableTool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct AvailableTool {
    pub name: String,
    pub description: String,
}

/// One installed package (`GET /v1/sandbox/packages/{python,nodejs}`), sorted by name.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct PackageInfo {
    pub name: String,
    pub version: String,
    /// The directory it was found in: a Python site directory or a `node_modules` directory.
    pub location: String,
}
