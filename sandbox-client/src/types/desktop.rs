//! Desktop (computer-use) wire types: the screenshot query and the actions, AIO's 16 action
//! types plus the ones computer-use models need and AIO lacks.
//!
//! Coordinates are screen pixels, unless the action names the screenshot it was aimed at with
//! `screenshot_id`: then they are pixels of that (possibly downscaled) image and sandboxd maps
//! them back to the screen with the scale it recorded for that screenshot.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::names::name_enum;

name_enum! {
    /// An image encoding: `png` or `jpeg` (also `jpg`).
    pub enum ImageFormat, "format" {
        Png = "png",
        Jpeg = "jpeg" | "jpg",
    }
}

name_enum! {
    /// A mouse button of a desktop action (`wheel` is read as `middle`).
    pub enum DesktopButton, "button" {
        Left = "left",
        Middle = "middle" | "wheel",
        Right = "right",
        Back = "back",
        Forward = "forward",
    }
}

name_enum! {
    /// The unit of a desktop scroll: wheel clicks (`notches`, also `notch`).
    pub enum ScrollUnit, "unit" {
        Notches = "notches" | "notch",
    }
}

/// `GET /v1/browser/screenshot` query. With no parameters: the full screen as PNG.
#[derive(Debug, Default, Deserialize, Serialize, IntoParams, ToSchema, schemars::JsonSchema)]
#[into_params(parameter_in = Query)]
pub struct DesktopScreenshotQuery {
    /// Default `png`.
    #[param(inline)]
    pub format: Option<ImageFormat>,
    /// JPEG quality, 1-100 (default 80); PNG ignores it.
    #[param(minimum = 1, maximum = 100)]
    #[schema(minimum = 1, maximum = 100)]
    #[schemars(range(min = 1, max = 100))]
    pub quality: Option<i64>,
    /// Downscale (keeping the aspect ratio) to fit this width; the scale is reported.
    pub max_width: Option<u32>,
    /// Downscale (keeping the aspect ratio) to fit this height; the scale is reported.
    pub max_height: Option<u32>,
}

/// The headers of `GET /v1/browser/screenshot`, whose body is the image itself.
pub mod screenshot_headers {
    /// The screen's size in pixels.
    pub const SCREEN_WIDTH: &str = "x-screen-width";
    pub const SCREEN_HEIGHT: &str = "x-screen-height";
    /// The image's size in pixels (smaller than the screen when downscaled).
    pub const IMAGE_WIDTH: &str = "x-image-width";
    pub const IMAGE_HEIGHT: &str = "x-image-height";
    /// The id actions name in `screenshot_id` to aim in the image's pixels.
    pub const SCREENSHOT_ID: &str = "x-screenshot-id";
    /// Screen pixels per image pixel, with six decimals.
    pub const SCALE_X: &str = "x-scale-x";
    pub const SCALE_Y: &str = "x-scale-y";
}

/// What a desktop screenshot's headers say: its id, the screen and image sizes and the scale
/// between them. sandboxd writes it with [`headers`](Self::headers); clients read it with
/// [`from_headers`](Self::from_headers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScreenshotInfo {
    pub id: u64,
    pub screen_width: u32,
    pub screen_height: u32,
    pub image_width: u32,
    pub image_height: u32,
    /// Screen pixels per image pixel, horizontally.
    pub scale_x: f64,
    /// Screen pixels per image pixel, vertically.
    pub scale_y: f64,
}

/// A screenshot header that is missing or does not hold a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("screenshot header {name}: {problem}")]
pub struct InvalidHeader {
    pub name: &'static str,
    pub problem: String,
}

impl ScreenshotInfo {
    /// The headers, as (name, value) pairs.
    pub fn headers(&self) -> [(&'static str, String); 7] {
        use screenshot_headers as h;
        [
            (h::SCREEN_WIDTH, self.screen_width.to_string()),
            (h::SCREEN_HEIGHT, self.screen_height.to_string()),
            (h::IMAGE_WIDTH, self.image_width.to_string()),
            (h::IMAGE_HEIGHT, self.image_height.to_string()),
            (h::SCREENSHOT_ID, self.id.to_string()),
            (h::SCALE_X, format!("{:.6}", self.scale_x)),
            (h::SCALE_Y, format!("{:.6}", self.scale_y)),
        ]
    }

    /// Reads the headers through `get` (a header's value by its lower-case name).
    pub fn from_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Self, InvalidHeader> {
        use screenshot_headers as h;
        fn number<T: std::str::FromStr>(
            name: &'static str,
            value: Option<&str>,
        ) -> Result<T, InvalidHeader> {
            let value = value.ok_or_else(|| InvalidHeader {
                name,
                problem: "missing".into(),
            })?;
            value.trim().parse().map_err(|_| InvalidHeader {
                name,
                problem: format!("{value:?} is not a number of the expected kind"),
            })
        }
        let scale = |name| {
            number::<f64>(name, get(name)).and_then(|scale| {
                if scale.is_finite() && scale > 0.0 {
                    Ok(scale)
                } else {
                    Err(InvalidHeader {
                        name,
                        problem: format!("{scale} is not a positive scale"),
                    })
                }
            })
        };
        Ok(Self {
            id: number(h::SCREENSHOT_ID, get(h::SCREENSHOT_ID))?,
            screen_width: number(h::SCREEN_WIDTH, get(h::SCREEN_WIDTH))?,
            screen_height: number(h::SCREEN_HEIGHT, get(h::SCREEN_HEIGHT))?,
            image_width: number(h::IMAGE_WIDTH, get(h::IMAGE_WIDTH))?,
            image_height: number(h::IMAGE_HEIGHT, get(h::IMAGE_HEIGHT))?,
            scale_x: scale(h::SCALE_X)?,
            scale_y: scale(h::SCALE_Y)?,
        })
    }
}

/// A point `[x, y]` of a drag path.
pub type PathPoint = [f64; 2];

/// One desktop action, tagged by `action_type`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, schemars::JsonSchema)]
#[serde(tag = "action_type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DesktopAction {
    /// Move the pointer to (x, y).
    MoveTo {
        x: f64,
        y: f64,
        screenshot_id: Option<u64>,
    },
    /// Move the pointer by an offset.
    MoveRel {
        x_offset: f64,
        y_offset: f64,
    },
    /// Click (at x, y if given, else where the pointer is). `num_clicks` 1-3; `modifiers` are
    /// key names held during the click (`ctrl`, `shift`, `alt`, `super`).
    Click {
        x: Option<f64>,
        y: Option<f64>,
        button: Option<DesktopButton>,
        num_clicks: Option<u32>,
        modifiers: Option<Vec<String>>,
        screenshot_id: Option<u64>,
    },
    MouseDown {
        button: Option<DesktopButton>,
    },
    MouseUp {
        button: Option<DesktopButton>,
    },
    RightClick {
        x: Option<f64>,
        y: Option<f64>,
        screenshot_id: Option<u64>,
    },
    DoubleClick {
        x: Option<f64>,
        y: Option<f64>,
        screenshot_id: Option<u64>,
    },
    TripleClick {
        x: Option<f64>,
        y: Option<f64>,
        screenshot_id: Option<u64>,
    },
    /// Press at the pointer, move to (x, y), release.
    DragTo {
        x: f64,
        y: f64,
        button: Option<DesktopButton>,
        screenshot_id: Option<u64>,
    },
    /// Press at the pointer, move by the offset, release.
    DragRel {
        x_offset: f64,
        y_offset: f64,
    },
    /// Move to the first point, press once, move through every point, release once at the last.
    DragPath {
        /// `[[x, y], ...]`, at least two points.
        #[schema(value_type = Vec<Vec<f64>>)]
        path: Vec<PathPoint>,
        button: Option<DesktopButton>,
        /// Pause after each point, in milliseconds (default 10), so applications see every
        /// point instead of coalescing them.
        step_ms: Option<u64>,
        screenshot_id: Option<u64>,
    },
    /// Scroll in wheel notches (`unit` must be `notches`, the default): positive `dy` scrolls
    /// down, positive `dx` right. At (x, y) if given.
    Scroll {
        dx: Option<i32>,
        dy: Option<i32>,
        x: Option<f64>,
        y: Option<f64>,
        unit: Option<ScrollUnit>,
        screenshot_id: Option<u64>,
    },
    /// Type text (any Unicode). `use_clipboard: true` pastes it with ctrl+v instead.
    Typing {
        text: String,
        use_clipboard: Option<bool>,
    },
    /// Press and release a key or a combination (`ctrl+shift+t`).
    Press {
        key: String,
    },
    KeyDown {
        key: String,
    },
    KeyUp {
        key: String,
    },
    /// Press keys together, in order, then release them in reverse.
    Hotkey {
        keys: Vec<String>,
    },
    /// Sleep for `duration` seconds (at most 60).
    Wait {
        duration: f64,
    },
    /// Report where the pointer is.
    CursorPosition {},
    /// Wait until the screen stops changing for `quiet_ms` (default 300), at most
    /// `timeout_ms` (default 5000, at most 60000). Right after another action whose effect is
    /// already on screen (the screen differs from just before that action), half of `quiet_ms`
    /// is enough: the answer's `settle.quiet_ms` says which applied. Actions take that "before"
    /// frame only once a wait has been asked for in this sandbox (clients that never wait do not
    /// pay for a capture), so the first wait applies the whole quiet period.
    WaitSettled {
        quiet_ms: Option<u64>,
        timeout_ms: Option<u64>,
    },
}

impl DesktopAction {
    /// The action's `action_type`, as sent.
    pub fn name(&self) -> &'static str {
        match self {
            DesktopAction::MoveTo { .. } => "MOVE_TO",
            DesktopAction::MoveRel { .. } => "MOVE_REL",
            DesktopAction::Click { .. } => "CLICK",
            DesktopAction::MouseDown { .. } => "MOUSE_DOWN",
            DesktopAction::MouseUp { .. } => "MOUSE_UP",
            DesktopAction::RightClick { .. } => "RIGHT_CLICK",
            DesktopAction::DoubleClick { .. } => "DOUBLE_CLICK",
            DesktopAction::TripleClick { .. } => "TRIPLE_CLICK",
            DesktopAction::DragTo { .. } => "DRAG_TO",
            DesktopAction::DragRel { .. } => "DRAG_REL",
            DesktopAction::DragPath { .. } => "DRAG_PATH",
            DesktopAction::Scroll { .. } => "SCROLL",
            DesktopAction::Typing { .. } => "TYPING",
            DesktopAction::Press { .. } => "PRESS",
            DesktopAction::KeyDown { .. } => "KEY_DOWN",
            DesktopAction::KeyUp { .. } => "KEY_UP",
            DesktopAction::Hotkey { .. } => "HOTKEY",
            DesktopAction::Wait { .. } => "WAIT",
            DesktopAction::CursorPosition {} => "CURSOR_POSITION",
            DesktopAction::WaitSettled { .. } => "WAIT_SETTLED",
        }
    }
}

/// What an action did. `status` is always `"success"` (AIO's SDK accepts no other value);
/// failures are error answers instead.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ActionData {
    pub status: String,
    pub action_performed: String,
    /// The pointer position after the action, in screen pixels.
    pub cursor: Option<CursorPosition>,
    /// For `WAIT_SETTLED`.
    pub settle: Option<SettleInfo>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
pub struct CursorPosition {
    pub x: i32,
    pub y: i32,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct SettleInfo {
    /// False when the timeout passed with the screen still changing.
    pub settled: bool,
    pub waited_ms: u64,
    /// Frames captured and compared.
    pub frames: u32,
    /// When the last change was seen, in ms from the start of the wait; absent when the screen
    /// did not change while waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_ms: Option<u64>,
    /// The quiet period applied: the one asked for, or half of it when the last action's effect
    /// was already on screen as the wait began (the screen differed from just before it).
    #[serde(default)]
    pub quiet_ms: u64,
}

/// `POST /v1/browser/actions` answer: AIO's envelope plus its legacy top-level fields.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct ActionResponse {
    pub success: bool,
    pub message: String,
    pub data: ActionData,
    pub status: String,
    pub action_performed: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
        serde_json::from_value(serde_json::json!(text)).ok()
    }

    /// Each name sandboxd accepted before these fields were enums still parses to the same
    /// value, in any case.
    #[test]
    fn image_format_names() {
        for (text, expected) in [
            ("png", ImageFormat::Png),
            ("PNG", ImageFormat::Png),
            ("jpeg", ImageFormat::Jpeg),
            ("JPEG", ImageFormat::Jpeg),
            ("jpg", ImageFormat::Jpeg),
            ("Jpg", ImageFormat::Jpeg),
        ] {
            assert_eq!(parse::<ImageFormat>(text), Some(expected), "{text}");
        }
        for text in ["gif", "webp", ""] {
            assert_eq!(parse::<ImageFormat>(text), None, "{text}");
        }
        assert_eq!(serde_json::to_value(ImageFormat::Jpeg).unwrap(), "jpeg");
    }

    #[test]
    fn desktop_button_names() {
        for (text, expected) in [
            ("left", DesktopButton::Left),
            (" LEFT ", DesktopButton::Left),
            ("middle", DesktopButton::Middle),
            ("wheel", DesktopButton::Middle),
            ("right", DesktopButton::Right),
            ("Right", DesktopButton::Right),
            ("back", DesktopButton::Back),
            ("forward", DesktopButton::Forward),
        ] {
            assert_eq!(parse::<DesktopButton>(text), Some(expected), "{text}");
        }
        for text in ["thumb", "top", "1"] {
            assert_eq!(parse::<DesktopButton>(text), None, "{text}");
        }
    }

    #[test]
    fn scroll_unit_names() {
        for text in ["notches", "notch", "NOTCHES"] {
            assert_eq!(
                parse::<ScrollUnit>(text),
                Some(ScrollUnit::Notches),
                "{text}"
            );
        }
        for text in ["pixels", "lines"] {
            assert_eq!(parse::<ScrollUnit>(text), None, "{text}");
        }
    }

    #[test]
    fn screenshot_headers_round_trip() {
        let info = ScreenshotInfo {
            id: 42,
            screen_width: 1920,
            screen_height: 1080,
            image_width: 1280,
            image_height: 720,
            scale_x: 1.5,
            scale_y: 1.5,
        };
        let headers = info.headers();
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(ScreenshotInfo::from_headers(get), Ok(info));
        assert_eq!(get("x-scale-x"), Some("1.500000"));
        let missing = ScreenshotInfo::from_headers(|name| {
            (name != screenshot_headers::SCREENSHOT_ID)
                .then(|| get(name))
                .flatten()
        });
        assert_eq!(missing.unwrap_err().name, "x-screenshot-id");
        let bad_scale = ScreenshotInfo::from_headers(|name| {
            if name == screenshot_headers::SCALE_Y {
                Some("0")
            } else {
                get(name)
            }
        });
        assert_eq!(bad_scale.unwrap_err().name, "x-scale-y");
    }

    #[test]
    fn a_bad_button_in_an_action_is_refused_naming_it() {
        let error = serde_json::from_value::<DesktopAction>(serde_json::json!({
            "action_type": "CLICK", "x": 1, "y": 2, "button": "thumb"
        }))
        .unwrap_err()
        .to_string();
        assert!(error.contains("unknown button \"thumb\""), "{error}");
        // Every button that is accepted is listed: left, middle (or wheel), right, back, forward.
        assert_eq!(DesktopButton::NAMES.len(), 6);
        for name in DesktopButton::NAMES {
            assert!(
                error.contains(name),
                "{name} is accepted but not listed: {error}"
            );
        }
        let action: DesktopAction = serde_json::from_value(serde_json::json!({
            "action_type": "DRAG_TO", "x": 1, "y": 2, "button": "Wheel"
        }))
        .unwrap();
        assert!(matches!(
            action,
            DesktopAction::DragTo {
                button: Some(DesktopButton::Middle),
                ..
            }
        ));
    }
}
