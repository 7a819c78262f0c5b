//! MCP (Model Context Protocol) at `/mcp`, over streamable HTTP (the official `rmcp` crate).
//!
//! The tools call the same functions as the REST routes, so they share their validation, path
//! confinement and limits; `/mcp` sits behind the same API-key check as every other route.
//! A tool that fails answers `isError: true` with the REST error's message.

use std::sync::Arc;

use base64::Engine;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;

use super::AppState;
use super::error::ApiError;
use super::types::{DesktopAction, DesktopScreenshotQuery, ShellExecRequest};
use super::{desktop, shell};

/// Arguments of the `desktop_action` tool: one action, as `POST /v1/browser/actions` takes it.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DesktopActionArgs {
    /// The action, tagged by `action_type` (MOVE_TO, CLICK, DRAG_PATH, TYPING, HOTKEY, SCROLL,
    /// WAIT_SETTLED, ...). Coordinates are screen pixels, or pixels of the screenshot named by
    /// `screenshot_id`.
    pub action: DesktopAction,
}

/// The MCP server of one sandbox.
#[derive(Clone)]
pub struct SandboxTools {
    state: AppState,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl SandboxTools {
    pub fn new(state: AppState) -> Self {
        Self {
            state,
            tool_router: Self::tool_router(),
        }
    }

    /// Screenshot of the whole desktop.
    #[tool(
        description = "Take a screenshot of the whole desktop. Returns the image and a text \
        line with its id and scale; pass `screenshot_id` in desktop actions to aim in the \
        image's pixels. `max_width`/`max_height` downscale it (aspect kept)."
    )]
    async fn screenshot(
        &self,
        Parameters(query): Parameters<DesktopScreenshotQuery>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match desktop::take_screenshot(&self.state, &query).await {
            Ok(shot) => {
                let image = shot.image;
                let meta = serde_json::json!({
                    "screenshot_id": shot.id,
                    "image_width": image.width,
                    "image_height": image.height,
                    "screen_width": image.screen_width,
                    "screen_height": image.screen_height,
                    "scale_x": image.scale_x,
                    "scale_y": image.scale_y,
                });
                CallToolResult::success(vec![
                    ContentBlock::image(
                        base64::engine::general_purpose::STANDARD.encode(&image.bytes),
                        image.mime,
                    ),
                    ContentBlock::text(meta.to_string()),
                ])
            }
            Err(error) => failure(error),
        })
    }

    /// One mouse or keyboard action on the desktop.
    #[tool(
        description = "Perform one mouse or keyboard action on the desktop through XTest: \
        MOVE_TO, MOVE_REL, CLICK (num_clicks, modifiers), RIGHT_CLICK, DOUBLE_CLICK, \
        TRIPLE_CLICK, MOUSE_DOWN, MOUSE_UP, DRAG_TO, DRAG_REL, DRAG_PATH (one press, one \
        release), SCROLL (wheel notches), TYPING (any Unicode), PRESS, KEY_DOWN, KEY_UP, HOTKEY, \
        WAIT, CURSOR_POSITION, WAIT_SETTLED (returns as soon as the screen stops changing)."
    )]
    async fn desktop_action(
        &self,
        Parameters(args): Parameters<DesktopActionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match desktop::perform(&self.state, args.action).await {
            Ok(data) => json_result(&serde_json::json!({
                "action_performed": data.action_performed,
                "cursor": data.cursor,
                "settle": data.settle,
            })),
            Err(error) => failure(error),
        })
    }

    /// A shell command in a session.
    #[tool(
        description = "Run a bash command as the unprivileged sandbox user and return its \
        output and exit code. Pass `id` to keep the working directory and environment of a \
        session between calls; `timeout` returns early with status `running`, `hard_timeout` \
        kills the command and everything it started."
    )]
    async fn shell_exec(
        &self,
        Parameters(request): Parameters<ShellExecRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match shell::run_exec(&self.state, request).await {
            Ok(envelope) => match envelope.data {
                Some(result) => {
                    let mut text = result.output.clone();
                    text.push_str(&format!(
                        "\n[session {} · status {:?} · exit code {}]",
                        result.session_id,
                        result.status,
                        result
                            .exit_code
                            .map_or_else(|| "none yet".to_string(), |c| c.to_string())
                    ));
                    CallToolResult::success(vec![ContentBlock::text(text)])
                }
                None => CallToolResult::error(vec![ContentBlock::text(envelope.message)]),
            },
            Err(error) => failure(error),
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SandboxTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "An Agentbox sandbox: a Linux desktop (1 display, Chromium, a terminal, a paint \
             program) you can see with `screenshot` and drive with `desktop_action`, plus a \
             shell and files confined to the agent's home and /tmp.",
        )
    }
}

/// A tool result for a failed call, with the same message the REST route would give.
fn failure(error: ApiError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.message)])
}

fn json_result(value: &serde_json::Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value.to_string())])
}

/// The `/mcp` endpoint as a tower service. Host checks are off (the route needs the API key,
/// which a DNS-rebinding page cannot send); browser `Origin`s are refused unless listed.
pub fn service(
    state: AppState,
    allowed_origins: Vec<String>,
) -> StreamableHttpService<SandboxTools, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_allowed_origins(allowed_origins.clone());
    if allowed_origins.is_empty() {
        config = config.enforce_origin_validation();
    }
    StreamableHttpService::new(
        move || Ok(SandboxTools::new(state.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
