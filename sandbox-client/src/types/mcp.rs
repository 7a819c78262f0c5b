//! The MCP REST view (`/v1/mcp/*`): the tools `/mcp` serves, listed and called over plain
//! REST in MCP's own shapes (`ListToolsResult`, `CallToolResult`), as AIO's SDK reads them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// One tool, as MCP's `tools/list` describes it.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct McpTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of the tool's arguments.
    #[serde(rename = "inputSchema")]
    #[schema(value_type = Object)]
    pub input_schema: Value,
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub annotations: Option<Value>,
}

/// `GET /v1/mcp/{server_name}/tools`: MCP's `ListToolsResult`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct McpListToolsResult {
    pub tools: Vec<McpTool>,
    #[serde(
        rename = "nextCursor",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub next_cursor: Option<String>,
}

/// `POST /v1/mcp/{server_name}/tools/{tool_name}`: MCP's `CallToolResult`. A tool that ran
/// and failed has `isError: true` and says why in `content`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct McpCallToolResult {
    /// Content blocks: `{"type": "text", "text"}`, `{"type": "image", "data", "mimeType"}`...
    #[schema(value_type = Vec<Object>)]
    pub content: Vec<Value>,
    #[serde(
        rename = "structuredContent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<Object>)]
    pub structured_content: Option<Value>,
    #[serde(rename = "isError", default)]
    pub is_error: bool,
}
