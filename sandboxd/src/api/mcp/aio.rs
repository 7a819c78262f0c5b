//! The MCP tools under AIO Sandbox's names, so agents written for AIO's MCP server run unchanged:
//! its `sandbox_*` tools (context, packages, code, bash, file operations, editor, Markdown,
//! browser info, display screenshot and actions) and its browser set (`browser_*`, the
//! `@agent-infra/mcp-server-browser` tools: navigation, content, interaction by the index of
//! `browser_get_clickable_elements`, vision, tabs). `browser_navigate`, `browser_click` and
//! `browser_press_key` share their name with Agentbox's own tools and are served there.
//!
//! Each tool calls the REST handler that does the same thing, so validation, confinement and
//! limits are the REST routes'. Tools that AIO answers with JSON (`sandbox_execute_bash`,
//! `sandbox_execute_code`, `sandbox_file_operations`) answer JSON objects of the same shape:
//! `output` and `exit_code`; `success`, `action`, `path` and the operation's fields, or `error`.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use base64::Engine;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{ErrorData, tool, tool_router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{GuiActionArgs, SandboxTools, envelope_result, failure, json_result, to_json_text};
use crate::api::browser::{forms, input, page, tabs};
use crate::api::error::ApiError;
use crate::api::extract::AioJson;
use crate::api::types::{
    ClickRequest, CodeExecuteRequest, ConvertToMarkdownRequest, DesktopScreenshotQuery,
    EvaluateRequest, FileFindRequest, FileGrepRequest, FileListRequest, FileReadRequest,
    FileReplaceRequest, FileWriteRequest, FillFormRequest, FillRequest, HoverRequest,
    NewTabRequest, ShellExecRequest, StrReplaceEditorRequest,
};
use crate::api::{code, files, sandbox, util};
use crate::browser::{Clip, Evaluation, ImageFormat, ScreenshotOptions};

/// The session `sandbox_execute_bash` calls share unless they ask for a new one.
const SHARED_BASH_SESSION: &str = "mcp-bash";
/// How long the short scripts these tools run in the page may take.
const SCRIPT_LIMIT: Duration = Duration::from_secs(10);
/// Most links `browser_read_links` lists.
const MAX_LINKS: usize = 1000;
/// Most entries `browser_get_download_list` lists.
const MAX_DOWNLOADS: usize = 1000;

/// Arguments of `sandbox_execute_bash`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SandboxBashArgs {
    /// The command line, run by bash.
    pub cmd: String,
    /// Absolute directory to run in (the session stays there afterwards).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds after which the command and everything it started are killed.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Run in a new session instead of the one `sandbox_execute_bash` calls share.
    #[serde(default)]
    pub new_session: Option<bool>,
}

/// Arguments of `sandbox_get_packages`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct PackagesArgs {
    /// `python` or `nodejs` (`javascript` is taken for `nodejs`); both when absent.
    #[serde(default)]
    pub language: Option<String>,
}

/// Arguments of `sandbox_execute_code`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ExecuteCodeArgs {
    pub code: String,
    /// `python` (the default; a Jupyter kernel) or `javascript` (Node).
    #[serde(default)]
    pub language: Option<String>,
    /// Seconds the code may run.
    #[serde(default)]
    pub timeout: Option<f64>,
}

/// Arguments of `sandbox_file_operations`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct FileOperationArgs {
    /// `read`, `write`, `list`, `find` (files whose name matches the glob `pattern`), `search`
    /// (lines matching the regular expression `pattern`, in a file or under a directory) or
    /// `replace` (`old_str` by `new_str`, every occurrence).
    pub action: String,
    /// The file or directory (confined to the agent's home and /tmp).
    pub path: String,
    /// `write`: the content.
    #[serde(default)]
    pub content: Option<String>,
    /// `read` and `write`: `utf-8` (the default) or `base64`.
    #[serde(default)]
    pub encoding: Option<String>,
    /// `write`: append instead of replacing.
    #[serde(default)]
    pub append: Option<bool>,
    /// `find`: a glob; `search`: a regular expression.
    #[serde(default)]
    pub pattern: Option<String>,
    /// `replace`: the text to replace.
    #[serde(default)]
    pub old_str: Option<String>,
    /// `replace`: what replaces it.
    #[serde(default)]
    pub new_str: Option<String>,
    /// `list`: descend into subdirectories.
    #[serde(default)]
    pub recursive: Option<bool>,
}

/// Arguments naming a URI (`sandbox_convert_to_markdown`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UriArgs {
    /// An `http(s)` URL, a `data:` URI, or a file (`file:///path` or a path).
    pub uri: String,
}

/// Arguments naming a URL (`browser_new_tab`).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UrlArgs {
    pub url: String,
}

/// An element by `index` (from `browser_get_clickable_elements`) or CSS `selector`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct ElementArgs {
    /// Index from `browser_get_clickable_elements`.
    #[serde(default)]
    pub index: Option<f64>,
    /// CSS selector (when no index is given).
    #[serde(default)]
    pub selector: Option<String>,
}

/// Arguments of `browser_select`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SelectArgs {
    #[serde(default)]
    pub index: Option<f64>,
    #[serde(default)]
    pub selector: Option<String>,
    /// The option's value (or its label).
    pub value: String,
}

/// Arguments of `browser_form_input_fill`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct FormFillArgs {
    #[serde(default)]
    pub index: Option<f64>,
    #[serde(default)]
    pub selector: Option<String>,
    pub value: String,
    /// Replace the field's text (`true`) or type after it (`false`, the default).
    #[serde(default)]
    pub clear: Option<bool>,
}

/// Arguments of `browser_scroll`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct ScrollArgs {
    /// CSS pixels, positive down and negative up; to the bottom of the page when absent.
    #[serde(default)]
    pub amount: Option<f64>,
}

/// Arguments of `browser_evaluate`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ScriptArgs {
    /// A JavaScript expression (a promise is awaited).
    pub script: String,
}

/// Arguments of `browser_vision_screen_click`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct VisionClickArgs {
    pub x: f64,
    pub y: f64,
    /// `[width, height]` of the space `x` and `y` are in (e.g. `[1000, 1000]` for thousandths
    /// of the viewport); CSS pixels of the viewport when absent.
    #[serde(default)]
    pub factors: Option<Vec<f64>>,
}

/// Arguments of `browser_switch_tab`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TabIndexArgs {
    /// Index from `browser_tab_list`.
    pub index: f64,
}

/// Arguments of `browser_screenshot`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct PageScreenshotArgs {
    /// A name for the screenshot (echoed in the answer).
    #[serde(default)]
    pub name: Option<String>,
    /// Only this element (CSS selector).
    #[serde(default)]
    pub selector: Option<String>,
    /// Only this element (index from `browser_get_clickable_elements`).
    #[serde(default)]
    pub index: Option<f64>,
    /// Width in CSS pixels from the left of the viewport (the viewport's when absent).
    #[serde(default)]
    pub width: Option<f64>,
    /// Height in CSS pixels from the top of the viewport (the viewport's when absent).
    #[serde(default)]
    pub height: Option<f64>,
    /// Outline the element while it is captured.
    #[serde(default)]
    pub highlight: Option<bool>,
    /// The whole page instead of the viewport.
    #[serde(default, rename = "fullPage")]
    pub full_page: Option<bool>,
}

/// A REST request from JSON, with the REST route's 422 naming the field.
fn request<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    let bytes = serde_json::to_vec(&value)
        .map_err(|e| ApiError::bad_request(format!("unusable arguments: {e}")))?;
    crate::api::extract::parse_json(&bytes)
}

/// A JSON answer AIO's clients read: `success` and the fields of `data` on success, `success:
/// false` and `error` (an error result) on failure.
fn aio_json<T: serde::Serialize>(
    head: Value,
    answer: Result<Json<crate::api::types::Envelope<T>>, ApiError>,
) -> CallToolResult {
    let mut object = match head {
        Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    let failed = |mut object: serde_json::Map<String, Value>, error: String| {
        object.insert("success".into(), Value::Bool(false));
        object.insert("error".into(), Value::String(error));
        CallToolResult::error(vec![ContentBlock::text(Value::Object(object).to_string())])
    };
    match answer {
        Ok(Json(envelope)) if envelope.success => {
            object.insert("success".into(), Value::Bool(true));
            match serde_json::to_value(&envelope.data) {
                Ok(Value::Object(fields)) => object.extend(fields),
                Ok(Value::Null) => {}
                Ok(other) => {
                    object.insert("data".into(), other);
                }
                Err(e) => return failed(object, format!("unserialisable result: {e}")),
            }
            object.insert("message".into(), Value::String(envelope.message));
            CallToolResult::success(vec![ContentBlock::text(Value::Object(object).to_string())])
        }
        Ok(Json(envelope)) => failed(object, envelope.message),
        Err(error) => failed(object, error.message),
    }
}

fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// A whole number from 0, or a 422 naming `field`.
fn index_field(field: &str, value: f64) -> Result<usize, ApiError> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value <= 1e6 {
        Ok(value as usize)
    } else {
        Err(ApiError::invalid(
            field,
            format!("`{field}` must be a whole number from 0, got {value}"),
        ))
    }
}

/// `{"selector": ...}` or `{"index": ...}` for a REST request; a 422 when neither is given.
fn element_fields(index: Option<f64>, selector: &Option<String>) -> Result<Value, ApiError> {
    let selector = selector.as_deref().map(str::trim).filter(|s| !s.is_empty());
    match (index, selector) {
        (Some(index), _) => Ok(json!({"index": index})),
        (None, Some(selector)) => Ok(json!({"selector": selector})),
        (None, None) => Err(ApiError::invalid(
            "index",
            "give `index` (from browser_get_clickable_elements) or `selector` (CSS)",
        )),
    }
}

/// Runs a JavaScript expression sandboxd wrote in the active tab and returns its value.
async fn page_value(tools: &SandboxTools, expression: &str) -> Result<Value, ApiError> {
    match tools
        .state
        .browser
        .evaluate(expression, SCRIPT_LIMIT)
        .await?
    {
        Evaluation::Value(value) => Ok(value),
        Evaluation::Exception(message) => Err(ApiError::conflict(message)),
    }
}

/// The viewport's size in CSS pixels (`innerWidth`, `innerHeight`: what a screenshot of the
/// viewport holds, scroll bars included).
async fn viewport(tools: &SandboxTools) -> Result<(f64, f64), ApiError> {
    let size = page_value(tools, "[window.innerWidth, window.innerHeight]").await?;
    let dimension = |n: usize| size.get(n).and_then(Value::as_f64).unwrap_or(0.0);
    Ok((dimension(0), dimension(1)))
}

/// One line per interactive element, as AIO lists them: `[index]<tag>text</tag>`.
fn clickable_lines(elements: &[Value]) -> String {
    let mut lines = String::new();
    for element in elements {
        let field = |name: &str| element.get(name).and_then(Value::as_str).unwrap_or("");
        let index = element.get("index").and_then(Value::as_u64).unwrap_or(0);
        let tag = match field("tag") {
            "" => "element",
            tag => tag,
        };
        let kind = field("type");
        let attributes = if kind.is_empty() {
            String::new()
        } else {
            format!(" type=\"{kind}\"")
        };
        let text = field("text").replace('\n', " ");
        lines.push_str(&format!("[{index}]<{tag}{attributes}>{text}</{tag}>\n"));
    }
    lines
}

#[tool_router(router = aio_router, vis = "pub(super)")]
impl SandboxTools {
    /// AIO's bash tool, on the shell sessions.
    #[tool(
        description = "Run a bash command as the sandbox user: `cmd`, optional `cwd` and \
        `timeout` (seconds, then the command and everything it started are killed). Calls \
        share one session (directory and environment carry over) unless `new_session` is \
        true. Answers JSON: output, exit_code, status, session_id."
    )]
    async fn sandbox_execute_bash(
        &self,
        Parameters(args): Parameters<SandboxBashArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let request = ShellExecRequest {
            command: args.cmd,
            id: (args.new_session != Some(true)).then(|| SHARED_BASH_SESSION.to_string()),
            exec_dir: args.cwd,
            async_mode: None,
            timeout: None,
            strict: Some(true),
            no_change_timeout: None,
            hard_timeout: args.timeout,
            preserve_symlinks: None,
            truncate: None,
        };
        let answer = crate::api::shell::run_exec(&self.state, request).await;
        Ok(match answer {
            Ok(envelope) => match envelope.data {
                Some(result) => json_result(&json!({
                    "output": result.output,
                    "exit_code": result.exit_code,
                    "status": result.status,
                    "session_id": result.session_id,
                })),
                None => CallToolResult::error(vec![ContentBlock::text(envelope.message)]),
            },
            Err(error) => failure(error),
        })
    }

    /// The sandbox's context.
    #[tool(description = "The sandbox's home directory, workspace, version and system details.")]
    async fn sandbox_get_context(&self) -> Result<CallToolResult, ErrorData> {
        let Json(answer) = sandbox::context(State(self.state.clone())).await;
        Ok(text_result(to_json_text(&answer.data)))
    }

    /// The installed packages.
    #[tool(
        description = "The installed packages, by `language`: `python` (the distributions the \
        system python3 sees, the agent's user site included) or `nodejs` (global Node \
        packages); both when absent."
    )]
    async fn sandbox_get_packages(
        &self,
        Parameters(args): Parameters<PackagesArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let state = || State(self.state.clone());
        let language = args.language.as_deref().map(str::trim);
        Ok(match language {
            Some("python") => {
                envelope_result(sandbox::python_packages(state()).await, to_json_text)
            }
            Some("nodejs" | "javascript" | "node") => {
                envelope_result(sandbox::nodejs_packages(state()).await, to_json_text)
            }
            None | Some("") => {
                let python = sandbox::python_packages(state()).await;
                let node = sandbox::nodejs_packages(state()).await;
                match (python, node) {
                    (Ok(Json(python)), Ok(Json(node))) => text_result(to_json_text(&json!({
                        "python": python.data,
                        "nodejs": node.data,
                    }))),
                    (Err(error), _) | (_, Err(error)) => failure(error),
                }
            }
            Some(other) => failure(ApiError::invalid(
                "language",
                format!("`language` must be `python` or `nodejs`, got {other:?}"),
            )),
        })
    }

    /// Runs code.
    #[tool(
        description = "Run `code` in `language` python (a fresh Jupyter kernel; outputs, \
        display data and tracebacks) or javascript (Node). Answers JSON: status, stdout, \
        stderr, exit_code, outputs, traceback."
    )]
    async fn sandbox_execute_code(
        &self,
        Parameters(args): Parameters<ExecuteCodeArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let request = CodeExecuteRequest {
            language: args.language.unwrap_or_else(|| "python".to_string()),
            code: args.code,
            timeout: args.timeout,
            ..CodeExecuteRequest::default()
        };
        let answer = code::code_execute(State(self.state.clone()), AioJson(request)).await;
        Ok(match answer {
            Ok(Json(envelope)) => match envelope.data {
                Some(data) if envelope.success => text_result(to_json_text(&data)),
                _ => CallToolResult::error(vec![ContentBlock::text(envelope.message)]),
            },
            Err(error) => failure(error),
        })
    }

    /// File operations in one tool.
    #[tool(
        description = "File operations on `path` (confined to the agent's home and /tmp), by \
        `action`: read (`encoding` utf-8 or base64), write (`content`, `encoding`, `append`), \
        list (`recursive`), find (files matching the glob `pattern`), search (lines matching \
        the regular expression `pattern`, in a file or under a directory), replace (`old_str` \
        by `new_str`). Answers JSON: success, action, path and the operation's fields \
        (content, files, matches...), or error."
    )]
    async fn sandbox_file_operations(
        &self,
        Parameters(args): Parameters<FileOperationArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let head = json!({"action": args.action, "path": args.path});
        let state = || State(self.state.clone());
        let path = args.path.clone();
        let needs = |field: &str, value: &Option<String>| -> Result<String, ApiError> {
            value.clone().ok_or_else(|| {
                ApiError::invalid(
                    field,
                    format!("`{field}` is required for the `{}` action", args.action),
                )
            })
        };
        Ok(match args.action.as_str() {
            "read" => {
                let answer = async {
                    let request: FileReadRequest =
                        request(json!({"file": path, "encoding": args.encoding}))?;
                    files::read(state(), AioJson(request)).await
                };
                aio_json(head, answer.await)
            }
            "write" => {
                let answer = async {
                    let request: FileWriteRequest = request(json!({
                        "file": path,
                        "content": needs("content", &args.content)?,
                        "encoding": args.encoding,
                        "append": args.append,
                    }))?;
                    files::write_file(&self.state, request).await
                };
                aio_json(head, answer.await)
            }
            "list" => {
                let answer = async {
                    let request: FileListRequest =
                        request(json!({"path": path, "recursive": args.recursive}))?;
                    files::list(state(), AioJson(request)).await
                };
                aio_json(head, answer.await)
            }
            "find" => {
                let answer = async {
                    let request: FileFindRequest =
                        request(json!({"path": path, "glob": needs("pattern", &args.pattern)?}))?;
                    files::find(state(), AioJson(request)).await
                };
                aio_json(head, answer.await)
            }
            "search" => {
                let answer = async {
                    let request: FileGrepRequest = request(
                        json!({"path": path, "pattern": needs("pattern", &args.pattern)?}),
                    )?;
                    files::grep(state(), AioJson(request)).await
                };
                aio_json(head, answer.await)
            }
            "replace" => {
                let answer = async {
                    let request: FileReplaceRequest = request(json!({
                        "file": path,
                        "old_str": needs("old_str", &args.old_str)?,
                        "new_str": needs("new_str", &args.new_str)?,
                    }))?;
                    files::replace(state(), AioJson(request)).await
                };
                aio_json(head, answer.await)
            }
            other => aio_json::<()>(
                head,
                Err(ApiError::invalid(
                    "action",
                    format!(
                        "unknown action {other:?}: use read, write, list, find, search or replace"
                    ),
                )),
            ),
        })
    }

    /// Anthropic's text editor tool, under AIO's name.
    #[tool(
        description = "Text editor: `command` view (with optional view_range), create \
        (file_text), str_replace (old_str must be unique, new_str), insert (insert_line, \
        new_str) or undo_edit, on `path`."
    )]
    async fn sandbox_str_replace_editor(
        &self,
        parameters: Parameters<StrReplaceEditorRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        self.str_replace_editor(parameters).await
    }

    /// Converts a document to Markdown.
    #[tool(
        description = "Convert `uri` to Markdown: an http(s) URL (loaded by the browser), a \
        data: URI, or a file (file:///path or a path; HTML, text and Markdown)."
    )]
    async fn sandbox_convert_to_markdown(
        &self,
        Parameters(args): Parameters<UriArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let request: ConvertToMarkdownRequest = request(json!({"uri": args.uri}))?;
            util::convert_to_markdown(State(self.state.clone()), AioJson(request)).await
        };
        Ok(envelope_result(answer.await, Clone::clone))
    }

    /// The browser's endpoints and viewports.
    #[tool(
        description = "The browser's CDP URL, the remote desktop URL, its user agent and \
        viewports."
    )]
    async fn sandbox_get_browser_info(&self) -> Result<CallToolResult, ErrorData> {
        self.browser_get_info().await
    }

    /// The browser's endpoints and viewports (the other name AIO uses).
    #[tool(
        description = "The browser's CDP URL, the remote desktop URL, its user agent and \
        viewports."
    )]
    async fn browser_get_info(&self) -> Result<CallToolResult, ErrorData> {
        let answer = page::info(State(self.state.clone()), axum::http::HeaderMap::new()).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// A screenshot of the display.
    #[tool(
        description = "Screenshot of the whole display (the browser's window and the \
        desktop): the image and a text line with its id and scale. `max_width`/`max_height` \
        downscale it."
    )]
    async fn sandbox_browser_screenshot(
        &self,
        parameters: Parameters<DesktopScreenshotQuery>,
    ) -> Result<CallToolResult, ErrorData> {
        self.screenshot(parameters).await
    }

    /// A screenshot of the display (the other name AIO uses).
    #[tool(
        description = "Screenshot of the whole display: the image and a text line with \
        its id and scale. `max_width`/`max_height` downscale it."
    )]
    async fn browser_gui_screenshot(
        &self,
        parameters: Parameters<DesktopScreenshotQuery>,
    ) -> Result<CallToolResult, ErrorData> {
        self.screenshot(parameters).await
    }

    /// One mouse or keyboard action on the display.
    #[tool(
        description = "One mouse or keyboard action on the display, its fields at the top \
        level: `action_type` MOVE_TO, CLICK, DOUBLE_CLICK, RIGHT_CLICK, DRAG_TO, SCROLL, \
        TYPING, PRESS, HOTKEY, WAIT, WAIT_SETTLED..."
    )]
    async fn sandbox_browser_execute_action(
        &self,
        parameters: Parameters<GuiActionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.browser_gui_execute_action(parameters).await
    }

    /// One mouse or keyboard action on the display (the other name AIO uses).
    #[tool(
        description = "One mouse or keyboard action on the display, its fields at the top \
        level: `action_type` MOVE_TO, CLICK, DOUBLE_CLICK, RIGHT_CLICK, DRAG_TO, SCROLL, \
        TYPING, PRESS, HOTKEY, WAIT, WAIT_SETTLED..."
    )]
    async fn browser_gui_execute_action(
        &self,
        Parameters(args): Parameters<GuiActionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        self.desktop_action(Parameters(super::DesktopActionArgs {
            action: args.action,
        }))
        .await
    }

    /// Back one page.
    #[tool(description = "Go back to the previous page of the active tab.")]
    async fn browser_go_back(&self) -> Result<CallToolResult, ErrorData> {
        let answer = page::back(State(self.state.clone())).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// Forward one page.
    #[tool(description = "Go forward to the next page of the active tab.")]
    async fn browser_go_forward(&self) -> Result<CallToolResult, ErrorData> {
        let answer = page::forward(State(self.state.clone())).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// Closes every tab.
    #[tool(
        description = "Close the browser's pages: every tab is closed and one blank tab \
        is left (the browser itself keeps running for the next call)."
    )]
    async fn browser_close(&self) -> Result<CallToolResult, ErrorData> {
        let closed = async {
            let tabs = self.state.browser.tabs().await?;
            for index in (0..tabs.len()).rev() {
                self.state.browser.close_tab(index).await?;
            }
            Ok::<usize, ApiError>(tabs.len())
        };
        Ok(match closed.await {
            Ok(count) => text_result(format!(
                "closed {count} tab{}; one blank tab is open",
                if count == 1 { "" } else { "s" }
            )),
            Err(error) => failure(error),
        })
    }

    /// Closes the active tab.
    #[tool(
        description = "Close the active tab (the last tab is replaced by a blank one). \
        Answers the remaining tabs."
    )]
    async fn browser_close_tab(&self) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let tabs = self.state.browser.tabs().await?;
            let active = tabs.iter().find(|t| t.active).map_or(0, |t| t.index);
            tabs::close_tab(State(self.state.clone()), Path(active.to_string())).await
        };
        Ok(envelope_result(answer.await, to_json_text))
    }

    /// The page as Markdown.
    #[tool(description = "The active page's visible content as Markdown.")]
    async fn browser_get_markdown(&self) -> Result<CallToolResult, ErrorData> {
        let answer = page::markdown(State(self.state.clone())).await;
        Ok(envelope_result(answer, |data| data.markdown.clone()))
    }

    /// The page's visible text.
    #[tool(description = "The visible text of the active page (empty for an empty page).")]
    async fn browser_get_text(&self) -> Result<CallToolResult, ErrorData> {
        let answer = page::text(State(self.state.clone())).await;
        Ok(envelope_result(answer, Clone::clone))
    }

    /// The page's links.
    #[tool(
        description = "Every link of the active page (at most 1000), as JSON: text and \
        href."
    )]
    async fn browser_read_links(&self) -> Result<CallToolResult, ErrorData> {
        let script = format!(
            "Array.from(document.links).slice(0, {MAX_LINKS}).map(a => ({{ \
             text: (a.innerText || a.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 200), \
             href: a.href }}))"
        );
        Ok(match page_value(self, &script).await {
            Ok(links) => text_result(to_json_text(&links)),
            Err(error) => failure(error),
        })
    }

    /// The browser's downloads.
    #[tool(
        description = "The files in the browser's download directory (~/Downloads): \
        name, path, size and modification time, newest first."
    )]
    async fn browser_get_download_list(&self) -> Result<CallToolResult, ErrorData> {
        let dir = self.state.settings.home_dir.join("Downloads");
        let listed = tokio::task::spawn_blocking(move || download_list(&dir)).await;
        Ok(match listed {
            Ok(Ok(list)) => text_result(to_json_text(&list)),
            Ok(Err(error)) => failure(ApiError::internal(error)),
            Err(error) => failure(ApiError::internal(format!("listing downloads: {error}"))),
        })
    }

    /// Hovers over an element.
    #[tool(description = "Move the mouse over an element: `index` (from \
        browser_get_clickable_elements) or `selector` (CSS).")]
    async fn browser_hover(
        &self,
        Parameters(args): Parameters<ElementArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let request: HoverRequest = request(element_fields(args.index, &args.selector)?)?;
            input::hover(State(self.state.clone()), AioJson(request)).await
        };
        Ok(envelope_result(answer.await, to_json_text))
    }

    /// Chooses an option of a select.
    #[tool(
        description = "Choose the option with `value` (or that label) in a select: \
        `index` (from browser_get_clickable_elements) or `selector` (CSS)."
    )]
    async fn browser_select(
        &self,
        Parameters(args): Parameters<SelectArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let mut item = element_fields(args.index, &args.selector)?;
            item["value"] = Value::String(args.value.clone());
            let request: FillFormRequest = request(json!({"items": [item]}))?;
            forms::fill_form(State(self.state.clone()), AioJson(request)).await
        };
        Ok(match answer.await {
            Ok(Json(envelope)) if envelope.success => {
                text_result(format!("selected {:?}", args.value))
            }
            Ok(Json(envelope)) => CallToolResult::error(vec![ContentBlock::text(
                envelope.message.replacen("items[0]: ", "", 1),
            )]),
            Err(error) => failure(ApiError {
                message: error.message.replacen("items[0]: ", "", 1),
                ..error
            }),
        })
    }

    /// Fills an input.
    #[tool(description = "Type `value` into an input: `index` (from \
        browser_get_clickable_elements) or `selector` (CSS); `clear: true` replaces the \
        field's text, otherwise the value is typed after it.")]
    async fn browser_form_input_fill(
        &self,
        Parameters(args): Parameters<FormFillArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let target = element_fields(args.index, &args.selector)?;
            if args.clear == Some(true) {
                let mut fields = target;
                fields["text"] = Value::String(args.value.clone());
                let request: FillRequest = request(fields)?;
                let _filled = input::fill(State(self.state.clone()), AioJson(request)).await?;
            } else {
                let request: ClickRequest = request(target)?;
                let _clicked = input::click(State(self.state.clone()), AioJson(request)).await?;
                self.state.browser.press_key("Control+End").await?;
                let text = crate::api::browser::typed_text("value", &args.value)?;
                self.state.browser.type_text(text, Duration::ZERO).await?;
            }
            Ok::<(), ApiError>(())
        };
        Ok(match answer.await {
            Ok(()) => text_result(format!(
                "filled the field with {:?}{}",
                args.value,
                if args.clear == Some(true) {
                    " (its text was replaced)"
                } else {
                    ""
                }
            )),
            Err(error) => failure(error),
        })
    }

    /// The interactive elements, by index.
    #[tool(
        description = "The clickable, hoverable and fillable elements of the active page, \
        one per line as `[index]<tag>text</tag>`; pass the index to browser_click, \
        browser_hover, browser_select, browser_form_input_fill or browser_screenshot."
    )]
    async fn browser_get_clickable_elements(&self) -> Result<CallToolResult, ErrorData> {
        let answer = forms::elements(State(self.state.clone())).await;
        Ok(match answer {
            Ok(Json(envelope)) => {
                let elements = envelope.data.unwrap_or_default();
                let mut text = clickable_lines(&elements);
                if elements.is_empty() {
                    text = "the page has no interactive elements".to_string();
                } else if envelope.message.contains("first") {
                    text.push_str(&format!("({})\n", envelope.message));
                }
                text_result(text)
            }
            Err(error) => failure(error),
        })
    }

    /// Scrolls the page.
    #[tool(
        description = "Scroll the active page by `amount` CSS pixels (positive down, \
        negative up), or to the bottom when `amount` is absent."
    )]
    async fn browser_scroll(
        &self,
        Parameters(args): Parameters<ScrollArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let browser = &self.state.browser;
        let scrolled = match args.amount {
            Some(amount) if !amount.is_finite() || amount.abs() > 1e7 => Err(ApiError::invalid(
                "amount",
                format!("`amount` must be a number of CSS pixels, got {amount}"),
            )),
            Some(amount) => browser.scroll_by(0.0, amount).await.map_err(ApiError::from),
            None => browser
                .scroll_to(None, Some(1e9))
                .await
                .map_err(ApiError::from),
        };
        Ok(match scrolled {
            Ok(position) => json_result(&json!({
                "target": position.target, "x": position.x, "y": position.y,
            })),
            Err(error) => failure(error),
        })
    }

    /// Evaluates JavaScript.
    #[tool(
        description = "Evaluate the JavaScript expression `script` in the active page \
        (a promise is awaited); answers its value as JSON."
    )]
    async fn browser_evaluate(
        &self,
        Parameters(args): Parameters<ScriptArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let request: EvaluateRequest = request(json!({"expression": args.script}))?;
            page::evaluate(State(self.state.clone()), AioJson(request)).await
        };
        Ok(envelope_result(answer.await, to_json_text))
    }

    /// A screenshot of the page for a vision model.
    #[tool(
        description = "Screenshot of the active page's viewport for a vision model; the \
        text gives its size in CSS pixels, the space browser_vision_screen_click takes."
    )]
    async fn browser_vision_screen_capture(&self) -> Result<CallToolResult, ErrorData> {
        let shot = async {
            let shot = self.state.browser.screenshot(png(None, false)).await?;
            // The image's own size: the viewport with its scroll bars (innerWidth x
            // innerHeight), the space browser_vision_screen_click takes.
            let (width, height) = page::png_size(&shot.bytes).unwrap_or((shot.width, shot.height));
            Ok::<_, ApiError>((shot, width, height))
        };
        Ok(match shot.await {
            Ok((shot, width, height)) => CallToolResult::success(vec![
                ContentBlock::image(
                    base64::engine::general_purpose::STANDARD.encode(&shot.bytes),
                    "image/png",
                ),
                ContentBlock::text(
                    json!({"viewport_width": width, "viewport_height": height}).to_string(),
                ),
            ]),
            Err(error) => failure(error),
        })
    }

    /// Clicks a point of the page.
    #[tool(
        description = "Click at `x`,`y` of the active page's viewport: CSS pixels, or \
        with `factors` [w, h] a point of a w x h space scaled to the viewport (e.g. [1000, \
        1000] for thousandths)."
    )]
    async fn browser_vision_screen_click(
        &self,
        Parameters(args): Parameters<VisionClickArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let (x, y) = match args.factors.as_deref() {
                None => (args.x, args.y),
                Some(&[fx, fy]) if fx > 0.0 && fy > 0.0 && fx.is_finite() && fy.is_finite() => {
                    let (width, height) = viewport(self).await?;
                    (args.x / fx * width, args.y / fy * height)
                }
                Some(_) => {
                    return Err(ApiError::invalid(
                        "factors",
                        "`factors` must be [width, height], two positive numbers",
                    ));
                }
            };
            let request: ClickRequest = request(json!({"x": x, "y": y}))?;
            input::click(State(self.state.clone()), AioJson(request)).await
        };
        Ok(envelope_result(answer.await, to_json_text))
    }

    /// Opens a tab.
    #[tool(description = "Open `url` in a new tab, which becomes the active one.")]
    async fn browser_new_tab(
        &self,
        Parameters(args): Parameters<UrlArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let request = NewTabRequest {
            url: Some(args.url),
        };
        let answer = tabs::new_tab(State(self.state.clone()), AioJson(request)).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// Lists the tabs.
    #[tool(
        description = "The browser's tabs: index, url, title, which one is active (and a \
        JavaScript dialog open in one)."
    )]
    async fn browser_tab_list(&self) -> Result<CallToolResult, ErrorData> {
        let answer = tabs::list_tabs(State(self.state.clone())).await;
        Ok(envelope_result(answer, to_json_text))
    }

    /// Switches tabs.
    #[tool(description = "Make the tab at `index` (from browser_tab_list) the active one.")]
    async fn browser_switch_tab(
        &self,
        Parameters(args): Parameters<TabIndexArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = async {
            let index = index_field("index", args.index)?;
            tabs::activate_tab(State(self.state.clone()), Path(index.to_string())).await
        };
        Ok(envelope_result(answer.await, to_json_text))
    }

    /// A screenshot of the page or of one element.
    #[tool(
        description = "Screenshot of the active page: the viewport, the whole page \
        (`fullPage`), one element (`selector`, or `index` from \
        browser_get_clickable_elements; `highlight` outlines it), or the top-left `width` x \
        `height` of the viewport."
    )]
    async fn browser_screenshot(
        &self,
        Parameters(args): Parameters<PageScreenshotArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.page_screenshot(&args).await {
            Ok((shot, clip)) => {
                let mut meta = json!({"width": clip.width, "height": clip.height});
                if let Some(name) = &args.name {
                    meta["name"] = Value::String(name.clone());
                }
                CallToolResult::success(vec![
                    ContentBlock::image(
                        base64::engine::general_purpose::STANDARD.encode(&shot.bytes),
                        "image/png",
                    ),
                    ContentBlock::text(meta.to_string()),
                ])
            }
            Err(error) => failure(error),
        })
    }
}

/// PNG screenshot options.
fn png(clip: Option<Clip>, full_page: bool) -> ScreenshotOptions {
    ScreenshotOptions {
        full_page,
        clip,
        format: ImageFormat::Png,
        quality: 100,
    }
}

/// The script that scrolls the element matching a selector into view and answers its
/// rectangle in document coordinates (null when nothing matches); `highlight` outlines it.
fn element_rect_script(selector: &str, highlight: bool) -> String {
    let selector = Value::String(selector.to_string());
    format!(
        "(() => {{ const el = document.querySelector({selector}); if (!el) return null; \
         el.scrollIntoView({{block: 'center', inline: 'center'}}); \
         if ({highlight}) {{ el.dataset.agentboxOutline = el.style.outline; \
         el.style.outline = '3px solid #e11'; }} \
         const r = el.getBoundingClientRect(); \
         return {{x: r.left + window.scrollX, y: r.top + window.scrollY, width: r.width, \
         height: r.height}}; }})()"
    )
}

/// The script that takes the outline `element_rect_script` put on an element away again.
fn unhighlight_script(selector: &str) -> String {
    let selector = Value::String(selector.to_string());
    format!(
        "(() => {{ const el = document.querySelector({selector}); \
         if (el && 'agentboxOutline' in el.dataset) {{ el.style.outline = \
         el.dataset.agentboxOutline; delete el.dataset.agentboxOutline; }} return true; }})()"
    )
}

impl SandboxTools {
    async fn page_screenshot(
        &self,
        args: &PageScreenshotArgs,
    ) -> Result<(crate::browser::Screenshot, Clip), ApiError> {
        let browser = &self.state.browser;
        let selector = match (args.index, args.selector.as_deref().map(str::trim)) {
            (Some(index), _) => {
                let index = index_field("index", index)?;
                let elements = browser.elements().await?;
                let found = elements
                    .elements
                    .iter()
                    .find(|e| e.get("index").and_then(Value::as_u64) == Some(index as u64))
                    .and_then(|e| e.get("selector").and_then(Value::as_str))
                    .map(str::to_string);
                Some(found.ok_or_else(|| {
                    ApiError::not_found(format!(
                        "no interactive element at index {index} (the page has {})",
                        elements.total
                    ))
                })?)
            }
            (None, Some(selector)) if !selector.is_empty() => Some(selector.to_string()),
            _ => None,
        };
        let dimension = |field: &str, value: Option<f64>| -> Result<Option<f64>, ApiError> {
            match value {
                Some(v) if !(v.is_finite() && (1.0..=16_384.0).contains(&v)) => {
                    Err(ApiError::invalid(
                        field,
                        format!("`{field}` must be from 1 to 16384 CSS pixels, got {v}"),
                    ))
                }
                other => Ok(other),
            }
        };
        let (width, height) = (
            dimension("width", args.width)?,
            dimension("height", args.height)?,
        );
        if let Some(selector) = selector {
            let highlight = args.highlight == Some(true);
            let rect = page_value(self, &element_rect_script(&selector, highlight)).await?;
            let number = |name: &str| rect.get(name).and_then(Value::as_f64);
            let (Some(x), Some(y), Some(w), Some(h)) =
                (number("x"), number("y"), number("width"), number("height"))
            else {
                return Err(ApiError::not_found(format!(
                    "no element matches the selector {selector:?}"
                )));
            };
            let clip = Clip {
                x,
                y,
                width: w.max(1.0),
                height: h.max(1.0),
            };
            let shot = browser.screenshot(png(Some(clip), false)).await;
            if highlight {
                // The outline goes whether or not the capture worked.
                let _ = page_value(self, &unhighlight_script(&selector)).await;
            }
            return Ok((shot?, clip));
        }
        if args.full_page == Some(true) {
            let shot = browser.screenshot(png(None, true)).await?;
            let clip = Clip {
                x: 0.0,
                y: 0.0,
                width: f64::from(shot.width),
                height: f64::from(shot.height),
            };
            return Ok((shot, clip));
        }
        let (view_width, view_height) = viewport(self).await?;
        let scroll = page_value(self, "[window.scrollX, window.scrollY]").await?;
        let offset = |n: usize| scroll.get(n).and_then(Value::as_f64).unwrap_or(0.0);
        let clip = Clip {
            x: offset(0),
            y: offset(1),
            width: width.unwrap_or(view_width).max(1.0),
            height: height.unwrap_or(view_height).max(1.0),
        };
        let shot = browser.screenshot(png(Some(clip), false)).await?;
        Ok((shot, clip))
    }

    /// Calls the AIO-named tool `name`, for the REST view; `None` if it is not one of them.
    pub(super) async fn call_aio(
        &self,
        name: &str,
        a: &serde_json::Map<String, Value>,
    ) -> Result<Option<Result<CallToolResult, ErrorData>>, ApiError> {
        use super::arguments_of as args;
        Ok(Some(match name {
            "sandbox_execute_bash" => self.sandbox_execute_bash(args(a)?).await,
            "sandbox_get_context" => self.sandbox_get_context().await,
            "sandbox_get_packages" => self.sandbox_get_packages(args(a)?).await,
            "sandbox_execute_code" => self.sandbox_execute_code(args(a)?).await,
            "sandbox_file_operations" => self.sandbox_file_operations(args(a)?).await,
            "sandbox_str_replace_editor" => self.sandbox_str_replace_editor(args(a)?).await,
            "sandbox_convert_to_markdown" => self.sandbox_convert_to_markdown(args(a)?).await,
            "sandbox_get_browser_info" => self.sandbox_get_browser_info().await,
            "browser_get_info" => self.browser_get_info().await,
            "sandbox_browser_screenshot" => self.sandbox_browser_screenshot(args(a)?).await,
            "browser_gui_screenshot" => self.browser_gui_screenshot(args(a)?).await,
            "sandbox_browser_execute_action" => self.sandbox_browser_execute_action(args(a)?).await,
            "browser_gui_execute_action" => self.browser_gui_execute_action(args(a)?).await,
            "browser_go_back" => self.browser_go_back().await,
            "browser_go_forward" => self.browser_go_forward().await,
            "browser_close" => self.browser_close().await,
            "browser_close_tab" => self.browser_close_tab().await,
            "browser_get_markdown" => self.browser_get_markdown().await,
            "browser_get_text" => self.browser_get_text().await,
            "browser_read_links" => self.browser_read_links().await,
            "browser_get_download_list" => self.browser_get_download_list().await,
            "browser_hover" => self.browser_hover(args(a)?).await,
            "browser_select" => self.browser_select(args(a)?).await,
            "browser_form_input_fill" => self.browser_form_input_fill(args(a)?).await,
            "browser_get_clickable_elements" => self.browser_get_clickable_elements().await,
            "browser_scroll" => self.browser_scroll(args(a)?).await,
            "browser_evaluate" => self.browser_evaluate(args(a)?).await,
            "browser_vision_screen_capture" => self.browser_vision_screen_capture().await,
            "browser_vision_screen_click" => self.browser_vision_screen_click(args(a)?).await,
            "browser_new_tab" => self.browser_new_tab(args(a)?).await,
            "browser_tab_list" => self.browser_tab_list().await,
            "browser_switch_tab" => self.browser_switch_tab(args(a)?).await,
            "browser_screenshot" => self.browser_screenshot(args(a)?).await,
            _ => return Ok(None),
        }))
    }
}

/// The regular files of the download directory, newest first (none when it does not exist).
fn download_list(dir: &std::path::Path) -> Result<Vec<Value>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(format!("reading {}: {error}", dir.display())),
    };
    let mut files: Vec<(u128, Value)> = Vec::new();
    for entry in entries.flatten().take(10 * MAX_DOWNLOADS) {
        let Ok(meta) = entry.metadata() else { continue };
        let name = entry.file_name().to_string_lossy().into_owned();
        // Chromium writes a download under `.crdownload` until it completes.
        if !meta.is_file() || name.ends_with(".crdownload") {
            continue;
        }
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis());
        files.push((
            modified,
            json!({
                "name": name,
                "path": entry.path().to_string_lossy(),
                "size": meta.len(),
                "modified_ms": modified as u64,
            }),
        ));
    }
    files.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    Ok(files
        .into_iter()
        .take(MAX_DOWNLOADS)
        .map(|(_, v)| v)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clickable_elements_are_listed_as_aio_lists_them() {
        let elements = vec![
            json!({"index": 0, "tag": "a", "text": "next page"}),
            json!({"index": 1, "tag": "input", "type": "text", "text": ""}),
            json!({"index": 2, "tag": "button", "text": "Go\nnow"}),
        ];
        assert_eq!(
            clickable_lines(&elements),
            "[0]<a>next page</a>\n[1]<input type=\"text\"></input>\n[2]<button>Go now</button>\n"
        );
    }

    #[test]
    fn indexes_and_elements_are_checked() {
        assert_eq!(index_field("index", 3.0).unwrap(), 3);
        for bad in [-1.0, 1.5, f64::NAN, 1e9] {
            assert!(
                index_field("index", bad)
                    .unwrap_err()
                    .message
                    .contains("index")
            );
        }
        assert_eq!(
            element_fields(Some(2.0), &None).unwrap(),
            json!({"index": 2.0})
        );
        assert_eq!(
            element_fields(None, &Some(" #a ".into())).unwrap(),
            json!({"selector": "#a"})
        );
        assert!(element_fields(None, &Some(" ".into())).is_err());
    }

    #[test]
    fn selectors_are_quoted_into_the_scripts() {
        let script = element_rect_script("a[title=\"x'y\"]", false);
        assert!(script.contains(r#"document.querySelector("a[title=\"x'y\"]")"#));
    }

    #[test]
    fn the_download_list_skips_partial_downloads_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("done.pdf"), b"12345").unwrap();
        std::fs::write(dir.path().join("half.zip.crdownload"), b"1").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let list = download_list(dir.path()).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0]["name"], "done.pdf");
        assert_eq!(list[0]["size"], 5);
        assert!(
            download_list(&dir.path().join("absent"))
                .unwrap()
                .is_empty()
        );
    }
}
