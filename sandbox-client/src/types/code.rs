//! `/v1/jupyter/*`, `/v1/nodejs/*` and `/v1/code/*`: running Python on a Jupyter kernel and
//! JavaScript on Node, with AIO's field names (as the `agent-sandbox` SDK sends and reads them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// One output of an execution, in nbformat's shape: `stream` (`name`, `text`),
/// `execute_result` / `display_data` (`data` by MIME type, images base64, `metadata`) or
/// `error` (`ename`, `evalue`, `traceback`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, ToSchema)]
pub struct CodeOutput {
    pub output_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evalue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<Vec<String>>,
}

/// `POST /v1/jupyter/execute`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct JupyterExecuteRequest {
    /// Python code (IPython syntax: magics and `!commands` work).
    pub code: String,
    /// Seconds the code may run (1 to 600, default 60); then it is interrupted and the answer
    /// has status `timeout`.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// `python3` (default) or the installed interpreter's versioned name (`GET /v1/jupyter/info`).
    #[serde(default)]
    pub kernel_name: Option<String>,
    /// Session to run in (created when unknown). Without one, the shared session `default`.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Absolute directory the kernel changes to before running the code.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// The answer of `POST /v1/jupyter/execute`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct JupyterExecuteResponse {
    pub kernel_name: String,
    pub session_id: Option<String>,
    /// `ok`, `error` (the code raised, or the kernel died) or `timeout`.
    pub status: String,
    pub execution_count: Option<u64>,
    pub outputs: Vec<CodeOutput>,
    pub code: String,
    pub msg_id: Option<String>,
}

/// `GET /v1/jupyter/info`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct JupyterInfoResponse {
    pub default_kernel: String,
    pub available_kernels: Vec<String>,
    pub active_sessions: u64,
    pub session_timeout_seconds: u64,
    pub max_sessions: u64,
    pub description: String,
    pub kernel_detection: String,
}

/// `POST /v1/jupyter/sessions/create`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct JupyterCreateSessionRequest {
    /// The new session's id (generated when absent); 409 if it exists.
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub kernel_name: Option<String>,
    /// Absolute directory the kernel starts in.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// The answer of `POST /v1/jupyter/sessions/create` (the kernel is running).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct JupyterCreateSessionResponse {
    pub session_id: String,
    pub kernel_name: String,
    pub message: String,
}

/// The answer of `DELETE /v1/jupyter/sessions` and `DELETE /v1/jupyter/sessions/{session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct JupyterDeleteResult {
    /// How many sessions (and their kernels) were ended.
    pub deleted: u64,
}

/// One session in `GET /v1/jupyter/sessions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct JupyterSessionInfo {
    pub kernel_name: String,
    /// Seconds since the Unix epoch.
    pub last_used: f64,
    pub age_seconds: u64,
}

/// `GET /v1/jupyter/sessions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct JupyterSessionsResult {
    pub sessions: BTreeMap<String, JupyterSessionInfo>,
}

/// `POST /v1/nodejs/execute`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct NodeJsExecuteRequest {
    /// JavaScript (CommonJS: `require` works).
    pub code: String,
    /// Seconds the code may run (1 to 600, default 60); then its process group is killed and
    /// the answer has status `timeout`.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Standard input for the program (stateless runs only).
    #[serde(default)]
    pub stdin: Option<String>,
    /// Files to create in the run's own directory first: name (plain, no `/`) to content
    /// (stateless runs only).
    #[serde(default)]
    pub files: Option<BTreeMap<String, Option<String>>>,
    /// Run in a persistent session: globals persist between calls with the same `session_id`.
    #[serde(default)]
    pub stateful: Option<bool>,
    /// Session to run in (implies `stateful`; created when unknown).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Absolute working directory (default: the run's own directory, or the session's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Node version: only the installed one is accepted (`GET /v1/nodejs/info`).
    #[serde(default)]
    pub version: Option<String>,
}

/// The answer of `POST /v1/nodejs/execute`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsExecuteResponse {
    /// Always `javascript`.
    pub language: String,
    /// `ok`, `error` or `timeout`.
    pub status: String,
    pub execution_count: Option<u64>,
    pub outputs: Vec<CodeOutput>,
    pub code: String,
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i64,
    pub session_id: Option<String>,
}

/// A package in [`NodeJsRuntimeInfo`].
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsPackageInfo {
    pub name: String,
    pub version: String,
}

/// `GET /v1/nodejs/info`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsRuntimeInfo {
    pub node_version: String,
    pub npm_version: String,
    pub supported_languages: Vec<String>,
    pub description: String,
    pub runtime_directory: Option<String>,
    pub global_npm_directory: Option<String>,
    pub runtime_packages: Vec<NodeJsPackageInfo>,
    pub global_packages: Vec<NodeJsPackageInfo>,
    pub available_versions: Vec<String>,
    pub current_version: Option<String>,
    /// Why a figure above is missing, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /v1/nodejs/sessions`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct NodeJsCreateSessionRequest {
    #[serde(default)]
    pub session_id: Option<String>,
    /// Absolute working directory of the session.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Milliseconds without use after which the session ends (default 30 minutes).
    #[serde(default)]
    pub max_idle_time: Option<i64>,
}

/// `PATCH /v1/nodejs/sessions/{session_id}`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct NodeJsUpdateSessionRequest {
    #[serde(default)]
    pub max_idle_time: Option<i64>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// A Node session.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsSessionInfo {
    pub session_id: String,
    pub cwd: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: f64,
    /// Milliseconds since the Unix epoch.
    pub last_used: f64,
    /// Milliseconds.
    pub max_idle_time: i64,
    /// Seconds since last use.
    pub age_seconds: u64,
    /// `IDLE` or `EXECUTING`.
    pub state: String,
}

/// The answer of `POST /v1/nodejs/sessions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsCreateSessionResponse {
    pub session_id: String,
    pub created: bool,
    pub message: Option<String>,
    pub session: Option<NodeJsSessionInfo>,
}

/// `GET /v1/nodejs/sessions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsSessionListResponse {
    pub sessions: BTreeMap<String, NodeJsSessionInfo>,
}

/// `GET /v1/nodejs/sessions/{session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsSessionResponse {
    pub session: NodeJsSessionInfo,
}

/// The answer of `PATCH /v1/nodejs/sessions/{session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsUpdateSessionResponse {
    pub updated: bool,
    pub session: NodeJsSessionInfo,
}

/// The answer of `DELETE /v1/nodejs/sessions/{session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NodeJsDeleteSessionResponse {
    pub deleted: bool,
}

/// `POST /v1/code/execute`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct CodeExecuteRequest {
    /// `python` (on a Jupyter kernel) or `javascript` (on Node).
    pub language: String,
    pub code: String,
    #[serde(default)]
    pub timeout: Option<f64>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Keep state between calls with the same `session_id` (generated when absent).
    #[serde(default)]
    pub stateful: Option<bool>,
    #[serde(default)]
    pub session_id: Option<String>,
}

/// The answer of `POST /v1/code/execute`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CodeExecuteResponse {
    pub language: String,
    pub status: String,
    pub outputs: Vec<CodeOutput>,
    pub code: String,
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i64>,
    pub traceback: Option<Vec<String>>,
    pub session_id: Option<String>,
}

/// A runtime in `GET /v1/code/info`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CodeLanguageInfo {
    pub language: String,
    pub description: String,
    pub runtime_version: Option<String>,
    pub default_timeout: u64,
    pub max_timeout: u64,
    pub details: BTreeMap<String, Value>,
}

/// `GET /v1/code/info`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CodeInfoResponse {
    pub languages: Vec<CodeLanguageInfo>,
}
