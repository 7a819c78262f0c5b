//! [`SandboxdComputer`]: the [`Computer`] trait over sandboxd's REST API, through the shared
//! typed client ([`sandbox_client::SandboxClient`]) and its wire types.
//!
//! Routes used: `GET /v1/browser/screenshot` (the id, sizes and scale come in `x-*` headers),
//! `POST /v1/browser/actions` (coordinates in observation pixels, mapped by sandboxd through the
//! transform it recorded for `screenshot_id`), `POST /v1/shell/exec`, `POST /v1/file/read`,
//! `POST /v1/file/write`, `POST /v1/file/str_replace_editor`.
//!
//! The loop's [`DesktopAction`] is the model-facing subset of sandboxd's actions (no relative
//! moves: they cannot be checked against an observation); [`wire_action`] turns it into the
//! shared wire type, with the observation's id on every action that aims at a point.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use sandbox_client::types::{
    self as wire, DesktopButton, DesktopScreenshotQuery, EditorCommandName, FileContentEncoding,
    FileReadRequest, FileWriteRequest, ShellExecRequest, StrReplaceEditorRequest,
};
use sandbox_client::{ClientConfig, ClientError, SandboxClient};
use tokio::sync::Mutex;

use super::{
    ActionReport, Computer, ComputerError, EditCommand, EditOutcome, SettleReport, ShellOutcome,
};
use crate::action::{Button, DesktopAction};
use crate::observation::{ImageFormat, Observation, ObservationMeta, ObserveRequest, fit_within};
use crate::secret::Secret;

/// Limit on a call (screenshots, files, instant actions); actions and shell commands that take
/// time of their own get that time on top (the client adds it).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A sandbox reached over HTTP (sandboxd itself, or a proxy in front of it).
pub struct SandboxdComputer {
    client: SandboxClient,
    /// The shell session commands run in, so the working directory and environment carry over
    /// between commands (sandboxd creates it on the first command).
    shell_session: Mutex<Option<String>>,
}

impl std::fmt::Debug for SandboxdComputer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxdComputer")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl SandboxdComputer {
    /// The client settings a computer uses: one minute per call, plus an action's own time.
    pub fn client_config() -> ClientConfig {
        ClientConfig {
            request_timeout: CALL_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        }
    }

    /// `base_url` such as `http://10.0.0.5:8091`; paths are appended to it. A pool of its own;
    /// [`from_client`](Self::from_client) shares one.
    pub fn new(base_url: impl AsRef<str>, key: Option<Secret>) -> Result<Self, ComputerError> {
        let client = SandboxClient::with_config(
            base_url.as_ref(),
            key.as_ref().map(Secret::expose),
            &Self::client_config(),
        )
        .map_err(|error| match error {
            ClientError::BaseUrl { .. } => ComputerError::Refused {
                field: Some("base_url".into()),
                message: error.to_string(),
            },
            other => from_client("client setup", other),
        })?;
        Ok(Self::from_client(client))
    }

    /// A computer over an existing client (and its connection pool).
    pub fn from_client(client: SandboxClient) -> Self {
        Self {
            client,
            shell_session: Mutex::new(None),
        }
    }

    async fn screenshot(
        &self,
        request: &ObserveRequest,
        step: &'static str,
    ) -> Result<Observation, ComputerError> {
        let (format, quality) = match request.format {
            ImageFormat::Png => (wire::ImageFormat::Png, None),
            ImageFormat::Jpeg { quality } => (wire::ImageFormat::Jpeg, Some(i64::from(quality))),
        };
        let shot = self
            .client
            .screenshot(&DesktopScreenshotQuery {
                format: Some(format),
                quality,
                max_width: request.max_width,
                max_height: request.max_height,
            })
            .await
            .map_err(|e| from_client(step, e))?;
        Ok(Observation {
            id: shot.info.id.to_string(),
            image: Bytes::from(shot.bytes),
            mime: shot.content_type,
            image_width: shot.info.image_width,
            image_height: shot.info.image_height,
            screen_width: shot.info.screen_width,
            screen_height: shot.info.screen_height,
            taken_at: SystemTime::now(),
        })
    }
}

#[async_trait]
impl Computer for SandboxdComputer {
    async fn observe(&self, request: &ObserveRequest) -> Result<Observation, ComputerError> {
        self.screenshot(request, "screenshot").await
    }

    async fn act(
        &self,
        action: &DesktopAction,
        observation_id: Option<&str>,
    ) -> Result<ActionReport, ComputerError> {
        let screenshot_id = match observation_id {
            None => None,
            Some(id) => Some(id.parse::<u64>().map_err(|_| ComputerError::Refused {
                field: Some("screenshot_id".into()),
                message: format!("observation {id:?} is not a sandboxd screenshot id"),
            })?),
        };
        let data = self
            .client
            .action(&wire_action(action, screenshot_id))
            .await
            .map_err(|e| from_client("action", e))?;
        Ok(ActionReport {
            cursor: data.cursor.map(|c| (c.x, c.y)),
            settle: data.settle.map(settle_report),
        })
    }

    async fn wait_settled(
        &self,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<SettleReport, ComputerError> {
        self.client
            .wait_settled(Some(quiet), Some(timeout))
            .await
            .map(settle_report)
            .map_err(|e| from_client("wait settled", e))
    }

    async fn zoom(
        &self,
        observation: &ObservationMeta,
        region: [f64; 4],
        bounds: (u32, u32),
    ) -> Result<Observation, ComputerError> {
        let full = self.screenshot(&ObserveRequest::full(), "zoom").await?;
        let refuse = |message: String| ComputerError::Refused {
            field: Some("region".into()),
            message,
        };
        let [x0, y0, x1, y1] = region;
        if !(observation.contains(x0, y0) && x1 > x0 && y1 > y0)
            || x1 > f64::from(observation.image_width)
            || y1 > f64::from(observation.image_height)
        {
            return Err(refuse(format!(
                "region [{x0}, {y0}, {x1}, {y1}] is not a rectangle inside the {}x{} screenshot",
                observation.image_width, observation.image_height
            )));
        }
        let decoded =
            image::load_from_memory(&full.image).map_err(|e| ComputerError::Protocol {
                step: "zoom",
                message: format!("the screenshot cannot be decoded: {e}"),
            })?;
        let (sx, sy) = (observation.scale_x(), observation.scale_y());
        let left = (x0 * sx).floor().max(0.0) as u32;
        let top = (y0 * sy).floor().max(0.0) as u32;
        let right = ((x1 * sx).ceil() as u32).min(decoded.width());
        let bottom = ((y1 * sy).ceil() as u32).min(decoded.height());
        if right <= left || bottom <= top {
            return Err(refuse("region is empty on the screen".into()));
        }
        let mut crop = decoded.crop_imm(left, top, right - left, bottom - top);
        let (w, h) = fit_within((crop.width(), crop.height()), bounds);
        if (w, h) != (crop.width(), crop.height()) {
            crop = crop.resize_exact(w, h, image::imageops::FilterType::Triangle);
        }
        let mut encoded = Vec::new();
        crop.write_to(
            &mut std::io::Cursor::new(&mut encoded),
            image::ImageFormat::Png,
        )
        .map_err(|e| ComputerError::Protocol {
            step: "zoom",
            message: format!("cannot encode the zoomed image: {e}"),
        })?;
        Ok(Observation {
            id: format!("{}-zoom", full.id),
            image: Bytes::from(encoded),
            mime: "image/png".into(),
            image_width: w,
            image_height: h,
            screen_width: right - left,
            screen_height: bottom - top,
            taken_at: SystemTime::now(),
        })
    }

    async fn run_shell(
        &self,
        command: &str,
        timeout: Duration,
        restart: bool,
    ) -> Result<ShellOutcome, ComputerError> {
        let mut session = self.shell_session.lock().await;
        if restart {
            *session = None;
        }
        let request = ShellExecRequest {
            command: command.to_string(),
            id: session.clone(),
            timeout: Some(timeout.as_secs_f64()),
            ..ShellExecRequest::default()
        };
        let result = self
            .client
            .shell_exec(&request)
            .await
            .map_err(|e| from_client("shell", e))?;
        *session = Some(result.session_id);
        Ok(ShellOutcome {
            still_running: matches!(
                result.status,
                wire::BashCommandStatus::Running | wire::BashCommandStatus::NoChangeTimeout
            ),
            exit_code: result.exit_code,
            output: result.output,
            truncated: result.truncated,
        })
    }

    async fn read_file(&self, path: &str) -> Result<String, ComputerError> {
        let request = FileReadRequest {
            file: path.to_string(),
            ..FileReadRequest::default()
        };
        self.client
            .file_read(&request)
            .await
            .map(|result| result.content)
            .map_err(|e| from_client("read file", e))
    }

    async fn write_file(&self, path: &str, content: &[u8]) -> Result<(), ComputerError> {
        let request = FileWriteRequest {
            file: path.to_string(),
            content: base64::engine::general_purpose::STANDARD.encode(content),
            encoding: Some(FileContentEncoding::Base64),
            ..FileWriteRequest::default()
        };
        self.client
            .file_write(&request)
            .await
            .map(|_| ())
            .map_err(|e| from_client("write file", e))
    }

    async fn edit(&self, command: &EditCommand) -> Result<EditOutcome, ComputerError> {
        self.client
            .str_replace_editor(&editor_request(command))
            .await
            .map(|result| EditOutcome {
                output: result.output,
            })
            .map_err(|e| from_client("edit file", e))
    }
}

/// The editor command as sandboxd's `str_replace_editor` request.
fn editor_request(command: &EditCommand) -> StrReplaceEditorRequest {
    match command {
        EditCommand::View { path, view_range } => StrReplaceEditorRequest {
            view_range: view_range.map(|range| range.to_vec()),
            ..StrReplaceEditorRequest::new(EditorCommandName::View, path)
        },
        EditCommand::Create { path, file_text } => StrReplaceEditorRequest {
            file_text: Some(file_text.clone()),
            ..StrReplaceEditorRequest::new(EditorCommandName::Create, path)
        },
        EditCommand::StrReplace {
            path,
            old_str,
            new_str,
        } => StrReplaceEditorRequest {
            old_str: Some(old_str.clone()),
            new_str: Some(new_str.clone()),
            ..StrReplaceEditorRequest::new(EditorCommandName::StrReplace, path)
        },
        EditCommand::Insert {
            path,
            insert_line,
            new_str,
        } => StrReplaceEditorRequest {
            insert_line: Some(*insert_line),
            new_str: Some(new_str.clone()),
            ..StrReplaceEditorRequest::new(EditorCommandName::Insert, path)
        },
        EditCommand::UndoEdit { path } => {
            StrReplaceEditorRequest::new(EditorCommandName::UndoEdit, path)
        }
    }
}

fn wire_button(button: Option<Button>) -> Option<DesktopButton> {
    button.map(|button| match button {
        Button::Left => DesktopButton::Left,
        Button::Right => DesktopButton::Right,
        Button::Middle => DesktopButton::Middle,
    })
}

/// The loop's action as sandboxd's, aimed through screenshot `screenshot_id` where it has a
/// point.
pub fn wire_action(action: &DesktopAction, screenshot_id: Option<u64>) -> wire::DesktopAction {
    use wire::DesktopAction as W;
    match action.clone() {
        DesktopAction::MoveTo { x, y } => W::MoveTo {
            x,
            y,
            screenshot_id,
        },
        DesktopAction::Click {
            x,
            y,
            button,
            num_clicks,
            modifiers,
        } => W::Click {
            x,
            y,
            button: wire_button(button),
            num_clicks,
            modifiers,
            screenshot_id,
        },
        DesktopAction::DoubleClick { x, y } => W::DoubleClick {
            x,
            y,
            screenshot_id,
        },
        DesktopAction::TripleClick { x, y } => W::TripleClick {
            x,
            y,
            screenshot_id,
        },
        DesktopAction::RightClick { x, y } => W::RightClick {
            x,
            y,
            screenshot_id,
        },
        DesktopAction::MouseDown { button } => W::MouseDown {
            button: wire_button(button),
        },
        DesktopAction::MouseUp { button } => W::MouseUp {
            button: wire_button(button),
        },
        DesktopAction::DragTo { x, y, button } => W::DragTo {
            x,
            y,
            button: wire_button(button),
            screenshot_id,
        },
        DesktopAction::DragPath {
            path,
            button,
            step_ms,
        } => W::DragPath {
            path,
            button: wire_button(button),
            step_ms,
            screenshot_id,
        },
        DesktopAction::Scroll { x, y, dx, dy } => W::Scroll {
            dx: Some(dx),
            dy: Some(dy),
            x,
            y,
            unit: None,
            screenshot_id,
        },
        DesktopAction::Typing {
            text,
            use_clipboard,
        } => W::Typing {
            text,
            use_clipboard,
        },
        DesktopAction::Press { key } => W::Press { key },
        DesktopAction::Hotkey { keys } => W::Hotkey { keys },
        DesktopAction::KeyDown { key } => W::KeyDown { key },
        DesktopAction::KeyUp { key } => W::KeyUp { key },
        DesktopAction::Wait { duration } => W::Wait { duration },
        DesktopAction::CursorPosition {} => W::CursorPosition {},
        DesktopAction::WaitSettled {
            quiet_ms,
            timeout_ms,
        } => W::WaitSettled {
            quiet_ms,
            timeout_ms,
        },
    }
}

fn settle_report(settle: wire::SettleInfo) -> SettleReport {
    SettleReport {
        settled: settle.settled,
        waited_ms: settle.waited_ms,
        frames: settle.frames,
        last_change_ms: settle.last_change_ms,
        quiet_ms: settle.quiet_ms,
    }
}

/// A client error as the loop sees it: a 4xx with a message is a refusal (naming the field for
/// 422) that the model reads (a path outside the allowed roots is a 403 refusal), 503 is
/// "unavailable", a refused key and the rest are failures.
fn from_client(step: &'static str, error: ClientError) -> ComputerError {
    let field = error.field();
    match error {
        ClientError::Status {
            status, message, ..
        } if status.as_u16() == 401 || (status.as_u16() == 403 && message.contains("API key")) => {
            ComputerError::Http {
                step,
                status: status.as_u16(),
                message,
            }
        }
        ClientError::Status {
            status, message, ..
        } if status.is_client_error() && status.as_u16() != 429 => {
            ComputerError::Refused { field, message }
        }
        ClientError::Status {
            status, message, ..
        } if status.as_u16() == 503 => ComputerError::Unavailable { step, message },
        ClientError::Status {
            status, message, ..
        } => ComputerError::Http {
            step,
            status: status.as_u16(),
            message,
        },
        ClientError::Failed { message, .. } => ComputerError::Refused {
            field: None,
            message,
        },
        ClientError::Transport { source, .. } => ComputerError::Transport {
            step,
            message: without_url(&source),
        },
        ClientError::Build(source) => ComputerError::Transport {
            step,
            message: without_url(&source),
        },
        other @ (ClientError::BaseUrl { .. }
        | ClientError::Decode { .. }
        | ClientError::TooLarge { .. }) => ComputerError::Protocol {
            step,
            message: other.to_string(),
        },
    }
}

/// A transport error without its URL (a proxy's URL can carry a token in its path).
fn without_url(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else if error.is_body() || error.is_decode() {
        "the answer was cut"
    } else {
        "request failed"
    };
    let mut message = kind.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// The wire form without its `null`s.
    fn sent(action: &DesktopAction, screenshot_id: Option<u64>) -> Value {
        let Value::Object(fields) = serde_json::to_value(wire_action(action, screenshot_id))
            .expect("wire actions serialize")
        else {
            panic!("an action is a JSON object");
        };
        Value::Object(fields.into_iter().filter(|(_, v)| !v.is_null()).collect())
    }

    #[test]
    fn every_action_goes_out_as_the_loop_wrote_it_with_the_screenshot_id_where_it_aims() {
        let cases = [
            json!({"action_type": "MOVE_TO", "x": 1.0, "y": 2.0}),
            json!({"action_type": "CLICK", "x": 1.0, "y": 2.0, "button": "right", "num_clicks": 2, "modifiers": ["ctrl"]}),
            json!({"action_type": "DOUBLE_CLICK", "x": 1.0, "y": 2.0}),
            json!({"action_type": "TRIPLE_CLICK", "x": 1.0, "y": 2.0}),
            json!({"action_type": "RIGHT_CLICK", "x": 1.0, "y": 2.0}),
            json!({"action_type": "DRAG_TO", "x": 1.0, "y": 2.0, "button": "middle"}),
            json!({"action_type": "DRAG_PATH", "path": [[1.0, 2.0], [3.0, 4.0]], "step_ms": 5}),
            json!({"action_type": "SCROLL", "x": 1.0, "y": 2.0, "dx": 0, "dy": 3}),
        ];
        for case in cases {
            let action: DesktopAction = serde_json::from_value(case.clone()).unwrap();
            let mut expected = case.clone();
            expected["screenshot_id"] = json!(7);
            assert_eq!(sent(&action, Some(7)), expected, "{case}");
            assert_eq!(sent(&action, None), case, "{case}");
        }
        // Actions without a point never carry the id.
        for case in [
            json!({"action_type": "MOUSE_DOWN", "button": "left"}),
            json!({"action_type": "MOUSE_UP"}),
            json!({"action_type": "TYPING", "text": "héllo", "use_clipboard": true}),
            json!({"action_type": "PRESS", "key": "ctrl+s"}),
            json!({"action_type": "HOTKEY", "keys": ["ctrl", "s"]}),
            json!({"action_type": "KEY_DOWN", "key": "shift"}),
            json!({"action_type": "KEY_UP", "key": "shift"}),
            json!({"action_type": "WAIT", "duration": 0.5}),
            json!({"action_type": "CURSOR_POSITION"}),
            json!({"action_type": "WAIT_SETTLED", "quiet_ms": 100, "timeout_ms": 3000}),
        ] {
            let action: DesktopAction = serde_json::from_value(case.clone()).unwrap();
            assert_eq!(sent(&action, Some(7)), case, "{case}");
        }
    }

    #[test]
    fn refusals_name_the_field_and_a_bad_key_is_not_a_refusal() {
        let status = |code: u16, message: &str, loc: Option<&[&str]>| ClientError::Status {
            operation: "test",
            status: reqwest::StatusCode::from_u16(code).unwrap(),
            message: message.into(),
            loc: loc.map(|l| l.iter().map(|s| s.to_string()).collect()),
        };
        assert_eq!(
            from_client("action", status(422, "bad", Some(&["body", "path"]))),
            ComputerError::Refused {
                field: Some("path".into()),
                message: "bad".into()
            }
        );
        assert!(matches!(
            from_client("read", status(403, "outside the allowed roots", None)),
            ComputerError::Refused { .. }
        ));
        assert!(matches!(
            from_client("read", status(401, "missing API key", None)),
            ComputerError::Http { status: 401, .. }
        ));
        assert!(matches!(
            from_client("read", status(429, "slow down", None)),
            ComputerError::Http { status: 429, .. }
        ));
        assert!(matches!(
            from_client("shot", status(503, "no display", None)),
            ComputerError::Unavailable { .. }
        ));
    }
}
