//! The MCP REST view, AIO's `/v1/mcp/*`: the tools `/mcp` serves, listed and called over plain
//! REST. sandboxd serves one MCP server, named [`mcp::SERVER_NAME`]; a call goes through the
//! same tool functions as `/mcp` (which call the REST handlers), so validation, confinement
//! and limits are the same on every path.

use axum::Json;
use axum::extract::{Path, State};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{self as mcp, SandboxTools};
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{Envelope, ErrorBody, McpCallToolResult, McpListToolsResult, McpTool};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(servers))
        .routes(routes!(tools))
        .routes(routes!(call_tool))
}

/// The MCP servers whose tools the REST view serves: sandboxd's own.
#[utoipa::path(get, path = "/v1/mcp/servers", tag = "mcp",
    responses((status = 200, body = Envelope<Vec<String>>)))]
pub async fn servers() -> Json<Envelope<Vec<String>>> {
    Json(Envelope::ok(vec![mcp::SERVER_NAME.to_string()]))
}

fn check_server(server_name: &str) -> Result<(), ApiError> {
    if server_name == mcp::SERVER_NAME {
        return Ok(());
    }
    Err(ApiError::not_found(format!(
        "no MCP server named {server_name:?}; sandboxd serves one, {:?} (GET /v1/mcp/servers)",
        mcp::SERVER_NAME
    )))
}

/// The server's tools, in MCP's `ListToolsResult` shape.
#[utoipa::path(get, path = "/v1/mcp/{server_name}/tools", tag = "mcp",
    params(("server_name" = String, Path, description = "the MCP server (`sandbox`)")),
    responses(
        (status = 200, body = Envelope<McpListToolsResult>),
        (status = 404, description = "no such server", body = ErrorBody),
    ))]
pub async fn tools(
    State(state): State<AppState>,
    Path(server_name): Path<String>,
) -> Result<Json<Envelope<McpListToolsResult>>, ApiError> {
    check_server(&server_name)?;
    let tools = SandboxTools::new(state)
        .tools()
        .into_iter()
        .map(|tool| {
            serde_json::to_value(&tool)
                .and_then(serde_json::from_value::<McpTool>)
                .map_err(|e| ApiError::internal(format!("describing tool {}: {e}", tool.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(Envelope::ok(McpListToolsResult {
        tools,
        next_cursor: None,
    })))
}

/// Calls one tool with the body as its arguments; the answer is MCP's `CallToolResult`
/// (`success: false` with the tool's message when it ran and failed).
#[utoipa::path(post, path = "/v1/mcp/{server_name}/tools/{tool_name}", tag = "mcp",
    params(
        ("server_name" = String, Path, description = "the MCP server (`sandbox`)"),
        ("tool_name" = String, Path, description = "a tool from GET /v1/mcp/{server_name}/tools"),
    ),
    request_body(content = Object, description = "the tool's arguments"),
    responses(
        (status = 200, body = Envelope<McpCallToolResult>),
        (status = 404, description = "no such server or tool", body = ErrorBody),
        (status = 422, description = "the arguments do not fit the tool (the message names the field)", body = ErrorBody),
    ))]
pub async fn call_tool(
    State(state): State<AppState>,
    Path((server_name, tool_name)): Path<(String, String)>,
    AioJson(arguments): AioJson<serde_json::Map<String, serde_json::Value>>,
) -> Result<Json<Envelope<McpCallToolResult>>, ApiError> {
    check_server(&server_name)?;
    let Some(result) = SandboxTools::new(state).call(&tool_name, arguments).await? else {
        return Err(ApiError::not_found(format!(
            "MCP server {server_name:?} has no tool named {tool_name:?} (GET /v1/mcp/{server_name}/tools lists them)"
        )));
    };
    let result: McpCallToolResult = serde_json::to_value(&result)
        .and_then(serde_json::from_value)
        .map_err(|e| ApiError::internal(format!("reading the result of {tool_name}: {e}")))?;
    let is_error = result.is_error;
    let message = if is_error {
        let text = result
            .content
            .iter()
            .filter_map(|block| block.get("text").and_then(|t| t.as_str()))
            .collect::<Vec<_>>()
            .join("\n");
        format!("tool {tool_name} failed: {text}")
    } else {
        "Operation successful".to_string()
    };
    Ok(Json(Envelope {
        success: !is_error,
        message,
        data: Some(result),
        hint: None,
    }))
}
