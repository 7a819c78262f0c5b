//! MCP (Model Context Protocol) at `/mcp`, over streamable HTTP (the official `rmcp` crate).
//!
//! The tools call the same functions as the REST routes, so they share their validation, path
//! confinement and limits; `/mcp` sits behind the same API-key check as every other route.
//! A tool that fails answers `isError: true` with the REST error's message. Agentbox's own
//! tools are here; the tools under AIO Sandbox's names are in [`aio`].

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use base64::Engine;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::ApiError;
use super::extract::AioJson;
use super::types::{
    ClickRequest, DesktopAction, DesktopScreenshotQuery, Envelope, FileGrepRequest,
    FileListRequest, FileReadRequest, FileWriteRequest, FillRequest, NavigateRequest,
    PressKeyRequest, ShellExecRequest, StrReplaceEditorRequest,
};
use super::{browser, desktop, files, shell};

mod aio;
pub mod rest;

/// Arguments of the `desktop_action` tool: one action, as `POST /v1/browser/actions` takes it.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct DesktopActionArgs {
    /// The action, tagged by `action_type` (MOVE_TO, CLICK, DRAG_PATH, TYPING, HOTKEY, SCROLL,
    /// WAIT_SETTLED, ...). Coordinates are screen pixels, or pixels of the screenshot named by
    /// `screenshot_id`.
    pub action: DesktopAction,
}

/// Arguments of `browser_gui_execute_action` (AIO's name): one action, flat, as
/// `POST /v1/browser/actions` takes it.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GuiActionArgs {
    #[serde(flatten)]
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
            tool_router: Self::tool_router() + Self::aio_router(),
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
        WAIT, CURSOR_POSITION, WAIT_SETTLED (returns as soon as the screen stops changing; half the quiet period when the last action's effect is already on screen)."
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

    /// A file's content.
    #[tool(
        description = "Read a file (whole, or lines `start_line`..`end_line`, 0-based, end \
        exclusive) as UTF-8 text, or base64 with `encoding: \"base64\"`. Paths are confined to \
        the agent's home and /tmp."
    )]
    async fn file_read(
        &self,
        Parameters(request): Parameters<FileReadRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = files::read(State(self.state.clone()), AioJson(request)).await;
        Ok(envelope_result(answer, |data| data.content.clone()))
    }

    /// Writes a file.
    #[tool(
        description = "Write `content` to `file` (creating parent directories), replacing it \
        or, with `append: true`, appending. `encoding` is utf-8 (default) or base64. Paths are \
        confined to the agent's home and /tmp."
    )]
    async fn file_write(
        &self,
        Parameters(request): Parameters<FileWriteRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = files::write_file(&self.state, request).await;
        Ok(envelope_result(answer, |data| {
            format!("wrote {} bytes to {}", data.bytes_written, data.file)
        }))
    }

    /// Lists a directory.
    #[tool(
        description = "List a directory (`recursive`, `max_depth`, `show_hidden`, \
        `file_types` filter by extension). Returns JSON entries with name, path, size and type."
    )]
    async fn file_list(
        &self,
        Parameters(request): Parameters<FileListRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = files::list(State(self.state.clone()), AioJson(request)).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// Searches file contents.
    #[tool(
        description = "Search files for a regular expression (ripgrep-style): `path`, \
        `pattern`, include/exclude globs, case sensitivity, context lines. Returns JSON matches \
        with file, line number and line."
    )]
    async fn file_grep(
        &self,
        Parameters(request): Parameters<FileGrepRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = files::grep(State(self.state.clone()), AioJson(request)).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// Anthropic's text editor tool.
    #[tool(
        description = "Text editor: `command` view (with optional view_range), create \
        (file_text), str_replace (old_str must be unique, new_str), insert (insert_line, \
        new_str) or undo_edit, on `path`."
    )]
    async fn str_replace_editor(
        &self,
        Parameters(request): Parameters<StrReplaceEditorRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = files::str_replace_editor(State(self.state.clone()), AioJson(request)).await;
        Ok(envelope_result(answer, |data| data.output.clone()))
    }

    /// Opens a URL in the browser.
    #[tool(
        description = "Open an http(s) URL in the browser's active tab and wait until \
        `wait_until` (load, domcontentloaded, networkidle, commit). Private addresses are \
        refused unless the sandbox allows them. Returns the final URL and title."
    )]
    async fn browser_navigate(
        &self,
        Parameters(request): Parameters<NavigateRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = browser::page::navigate(State(self.state.clone()), AioJson(request)).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// The page as an agent reads it.
    #[tool(
        description = "Snapshot of the browser's active page: URL, title, the start of the \
        visible text, and the visible links, buttons and inputs, each with a CSS selector to \
        pass to browser_click and browser_fill."
    )]
    async fn browser_snapshot(&self) -> Result<CallToolResult, ErrorData> {
        let answer = browser::page::snapshot(State(self.state.clone())).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// The page's visible text.
    #[tool(description = "The visible text of the browser's active page.")]
    async fn browser_text(&self) -> Result<CallToolResult, ErrorData> {
        let answer = browser::page::text(State(self.state.clone())).await;
        Ok(envelope_result(answer, Clone::clone))
    }

    /// Clicks in the page.
    #[tool(
        description = "Click an element of the active page by CSS `selector` (and `index` \
        among matches) or at page coordinates `x`,`y`; `button` and `click_count` optional."
    )]
    async fn browser_click(
        &self,
        Parameters(request): Parameters<ClickRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = browser::input::click(State(self.state.clone()), AioJson(request)).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// Fills an input.
    #[tool(
        description = "Replace the value of the input or textarea matched by CSS `selector` \
        with `text`, firing input and change events."
    )]
    async fn browser_fill(
        &self,
        Parameters(request): Parameters<FillRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = browser::input::fill(State(self.state.clone()), AioJson(request)).await;
        Ok(done_result(answer))
    }

    /// Presses a key in the page.
    #[tool(description = "Press a key or combination in the active page: Enter, Tab, Control+a.")]
    async fn browser_press_key(
        &self,
        Parameters(request): Parameters<PressKeyRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = browser::input::press_key(State(self.state.clone()), AioJson(request)).await;
        Ok(done_result(answer))
    }
}

/// The MCP server's name in the REST view (`/v1/mcp/{server_name}/...`): sandboxd serves one.
pub const SERVER_NAME: &str = "sandbox";

impl SandboxTools {
    /// Every tool, as `tools/list` lists them.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.tool_router.list_all()
    }

    /// Calls the tool `name` with `arguments`, as `tools/call` does, for the REST view; `None`
    /// if there is no such tool. Arguments that do not fit the tool are a 422 naming the field.
    pub async fn call(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<CallToolResult>, ApiError> {
        let a = &arguments;
        let result = match name {
            "screenshot" => self.screenshot(arguments_of(a)?).await,
            "desktop_action" => self.desktop_action(arguments_of(a)?).await,
            "shell_exec" => self.shell_exec(arguments_of(a)?).await,
            "file_read" => self.file_read(arguments_of(a)?).await,
            "file_write" => self.file_write(arguments_of(a)?).await,
            "file_list" => self.file_list(arguments_of(a)?).await,
            "file_grep" => self.file_grep(arguments_of(a)?).await,
            "str_replace_editor" => self.str_replace_editor(arguments_of(a)?).await,
            "browser_navigate" => self.browser_navigate(arguments_of(a)?).await,
            "browser_snapshot" => self.browser_snapshot().await,
            "browser_text" => self.browser_text().await,
            "browser_click" => self.browser_click(arguments_of(a)?).await,
            "browser_fill" => self.browser_fill(arguments_of(a)?).await,
            "browser_press_key" => self.browser_press_key(arguments_of(a)?).await,
            _ => match self.call_aio(name, a).await? {
                Some(result) => result,
                None => return Ok(None),
            },
        };
        result
            .map(Some)
            .map_err(|error| ApiError::internal(error.message.to_string()))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SandboxTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "An Agentbox sandbox: a Linux desktop (1 display, Chromium, a terminal, a paint \
             program) you can see with `screenshot` and drive with `desktop_action`, a \
             browser you can also drive by page (`browser_*`), plus a shell and files \
             confined to the agent's home and /tmp.",
        )
    }
}

/// A tool's arguments as its parameter type; arguments that do not fit are a 422 naming the
/// field, as the REST route's body would be.
fn arguments_of<T: serde::de::DeserializeOwned>(
    arguments: &serde_json::Map<String, serde_json::Value>,
) -> Result<Parameters<T>, ApiError> {
    let bytes = serde_json::to_vec(arguments)
        .map_err(|e| ApiError::bad_request(format!("unusable arguments: {e}")))?;
    super::extract::parse_json(&bytes).map(Parameters)
}

/// A tool result for a failed call, with the same message the REST route would give.
fn failure(error: ApiError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.message)])
}

/// A tool result from a REST handler's answer: `text` renders the data of a success; an
/// envelope with `success: false` or an error becomes an error result with its message.
/// A tool's answer from its route's: `text` of the data, exactly (an empty page's text or an
/// empty file is an empty text, not the envelope's "Operation successful").
fn envelope_result<T: Serialize>(
    answer: Result<Json<Envelope<T>>, ApiError>,
    text: impl FnOnce(&T) -> String,
) -> CallToolResult {
    match answer {
        Ok(Json(envelope)) => match (envelope.success, envelope.data) {
            (true, Some(data)) => CallToolResult::success(vec![ContentBlock::text(text(&data))]),
            (true, None) => CallToolResult::success(vec![ContentBlock::text(envelope.message)]),
            (false, _) => CallToolResult::error(vec![ContentBlock::text(envelope.message)]),
        },
        Err(error) => failure(error),
    }
}

/// The answer of a tool whose route returns no data (a fill, a key press): the route's message.
fn done_result(answer: Result<Json<Envelope<()>>, ApiError>) -> CallToolResult {
    match answer {
        Ok(Json(envelope)) if envelope.success => {
            CallToolResult::success(vec![ContentBlock::text(envelope.message)])
        }
        Ok(Json(envelope)) => CallToolResult::error(vec![ContentBlock::text(envelope.message)]),
        Err(error) => failure(error),
    }
}

fn to_json_text<T: Serialize>(data: &T) -> String {
    serde_json::to_string_pretty(data).unwrap_or_else(|e| format!("(unserialisable result: {e})"))
}

fn json_result(value: &serde_json::Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value.to_string())])
}

/// Buffers an `/mcp` request body of at most `limit` bytes before rmcp sees it: rmcp reads
/// bodies whole and without a bound. The limit leaves room for the largest `file_write`.
pub async fn bounded_body(
    State(limit): State<usize>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use http_body_util::BodyExt;
    let (parts, body) = request.into_parts();
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => {
            let body = axum::body::Body::from(collected.to_bytes());
            next.run(axum::extract::Request::from_parts(parts, body))
                .await
        }
        Err(error)
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            ApiError::too_large(format!(
                "the MCP request body is larger than {limit} bytes, the most /mcp accepts"
            ))
            .into_response()
        }
        Err(error) => {
            ApiError::bad_request(format!("cannot read the request body: {error}")).into_response()
        }
    }
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
