//! [`DesktopError`]: what can go wrong while talking to the X server, each variant naming the
//! step that failed.

use x11rb::errors::{ConnectError, ReplyOrIdError};
use x11rb::x11_utils::X11Error;

use crate::keys::KeyNameError;

/// An error from a [`crate::Desktop`] operation. Messages name the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// The X display could not be reached.
    #[error("connecting to X display {display:?}")]
    Connect {
        display: String,
        #[source]
        source: ConnectError,
    },
    /// The connection's setup names a screen the server does not have.
    #[error("X display {display:?} has no screen {screen}")]
    NoScreen { display: String, screen: usize },
    /// The server lacks an extension this crate needs.
    #[error("the X server lacks the {0} extension")]
    MissingExtension(&'static str),
    /// A request failed (connection lost, or the server answered with an error).
    #[error("X request failed while {step}")]
    X11 {
        step: &'static str,
        #[source]
        source: ReplyOrIdError,
    },
    /// The server reported an error for a request whose reply we do not wait for (input
    /// injection); it was found while synchronising after `step`.
    #[error("the X server rejected a request while {step}: {error:?}")]
    Rejected { step: &'static str, error: X11Error },
    /// A coordinate lies outside the screen.
    #[error("{axis} coordinate {value} is outside the screen (valid: 0..{limit})")]
    OutOfRange {
        axis: &'static str,
        value: i64,
        limit: u32,
    },
    /// A key name (or one part of a combination) is not known.
    #[error(transparent)]
    KeyName(#[from] KeyNameError),
    /// A click count other than 1, 2 or 3.
    #[error("click count {0} is not 1 (single), 2 (double) or 3 (triple)")]
    ClickCount(u32),
    /// A scroll larger than [`crate::MAX_SCROLL_NOTCHES`] on one axis.
    #[error("scroll of {0} notches exceeds the limit of {max}", max = crate::MAX_SCROLL_NOTCHES)]
    ScrollTooLong(i32),
    /// A drag path with fewer than two points.
    #[error("a drag path needs at least two points, got {0}")]
    DragPathTooShort(usize),
    /// A character that is neither printable nor a newline or tab.
    #[error("character {0:?} cannot be typed (control character)")]
    Untypable(char),
    /// A keysym is not in the keyboard mapping and no spare keycode is left to map it to.
    #[error("keysym {keysym:#x} is not on the keyboard and no spare keycode is free to map it")]
    NoSpareKeycode { keysym: u32 },
    /// The keyboard mapping has no key for a keysym this crate needs (for example `Shift_L`).
    #[error("the keyboard mapping has no {0} key")]
    MissingKey(&'static str),
    /// The root window's pixels come in a layout this crate does not convert.
    #[error(
        "unsupported pixel format: depth {depth}, {bits_per_pixel} bits per pixel, masks \
         r={red_mask:#x} g={green_mask:#x} b={blue_mask:#x}"
    )]
    PixelFormat {
        depth: u8,
        bits_per_pixel: u8,
        red_mask: u32,
        green_mask: u32,
        blue_mask: u32,
    },
    /// The shared memory segment could not be read after the server filled it.
    #[error("reading the MIT-SHM segment")]
    ShmRead {
        #[source]
        source: std::io::Error,
    },
    /// The server returned less image data than the frame needs.
    #[error("captured image is {got} bytes, expected at least {expected}")]
    ShortImage { got: usize, expected: usize },
    /// Encoding a screenshot failed.
    #[error(transparent)]
    Encode(#[from] crate::encode::EncodeError),
    /// Text to put on the clipboard is larger than one X request can carry.
    #[error("clipboard text of {len} bytes exceeds the limit of {max} bytes")]
    ClipboardTooLarge { len: usize, max: usize },
    /// Another client kept the CLIPBOARD selection.
    #[error("could not take ownership of the CLIPBOARD selection")]
    ClipboardNotOwned,
    /// A helper thread (the clipboard owner, the remap restorer) could not be started.
    #[error("starting the {name} thread")]
    Thread {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Attaches the name of a step to an x11rb error.
pub(crate) trait StepExt<T> {
    fn step(self, step: &'static str) -> Result<T, DesktopError>;
}

impl<T, E: Into<ReplyOrIdError>> StepExt<T> for Result<T, E> {
    fn step(self, step: &'static str) -> Result<T, DesktopError> {
        self.map_err(|e| DesktopError::X11 {
            step,
            source: e.into(),
        })
    }
}
