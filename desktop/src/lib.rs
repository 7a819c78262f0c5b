//! The X11 desktop, in-process, for computer-use agents: screen capture (MIT-SHM with a
//! GetImage fallback), PNG/JPEG encoding with optional resizing, waiting for the screen to
//! settle, and input injection through XTEST (pointer, keys by name, typing any Unicode text on
//! any layout, pasting through the clipboard). No process is spawned: no xdotool, no scrot.
//!
//! **Invariant:** this crate knows nothing of HTTP or JSON; sandboxd's API layer calls it.
//!
//! ```no_run
//! use desktop::{Button, Desktop, ImageFormat};
//! use std::time::Duration;
//!
//! let desktop = Desktop::connect(":1")?;
//! desktop.move_to(640, 400)?;
//! desktop.click(Button::Left, 1, &["ctrl"])?;
//! desktop.type_text("héllo 世界\n")?;
//! desktop.wait_until_settled(Duration::from_millis(300), Duration::from_secs(3))?;
//! let png = desktop.screenshot(ImageFormat::Png, Some((1024, 640)))?;
//! let (x, y) = png.to_screen(512.0, 320.0); // a point on the image, back on the screen
//! # Ok::<(), desktop::DesktopError>(())
//! ```
//!
//! # Layout
//! - [`desktop`](Desktop): the connection, shared by everything else; `Send + Sync`.
//! - `capture`: [`Frame`] and [`Desktop::capture`] (MIT-SHM segment reuse, GetImage fallback).
//! - `encode`: [`encode`], [`ImageFormat`], [`EncodedImage`] with the image-to-screen scale.
//! - `scale`: the triangle-filter resizer behind `encode`.
//! - `settle`: [`Desktop::wait_until_settled`] and [`SettleReport`].
//! - `input`: XTEST primitives, the held-keys state, synchronising with the server.
//! - `pointer`: [`Button`], moving, clicking, scrolling (in wheel notches), dragging (along a
//!   path, or in a straight line from the pointer).
//! - `keyboard`: keys and chords by name, held keys, typing any text.
//! - `keymap`: the keyboard mapping snapshot: keysym to keycode and Shift level, spare keycodes.
//! - `remap`: spare keycodes mapped to missing keysyms, and the thread that restores them.
//! - [`keys`]: key names (X keysyms, xdotool, Anthropic, OpenAI CUA, AIO aliases) to keysyms.
//! - `keysym_names`: the generated table of X keysym names.
//! - `clipboard`: the in-process CLIPBOARD owner and [`Desktop::paste_text`].
//! - `error`: [`DesktopError`], naming the step that failed.

mod capture;
mod clipboard;
mod desktop;
mod encode;
mod error;
mod input;
mod keyboard;
mod keymap;
pub mod keys;
mod keysym_names;
mod pointer;
mod remap;
mod scale;
mod settle;

pub use capture::Frame;
pub use desktop::Desktop;
pub use encode::{EncodeError, EncodedImage, ImageFormat, MAX_IMAGE_SIDE, encode, fit_within};
pub use error::DesktopError;
pub use keys::{KeyNameError, Keysym};
pub use pointer::{Button, MAX_SCROLL_NOTCHES};
pub use remap::REMAP_LINGER;
pub use settle::SettleReport;
