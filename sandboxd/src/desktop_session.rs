//! sandboxd's desktop: the connection to its X display (opened on first use, reopened when the
//! X server was restarted under it), the record of recent screenshots' image-to-screen
//! transforms, so an action can name the screenshot its coordinates were chosen on, taking
//! screenshots, and performing actions ([`action`]). Calls that block on the display run on
//! blocking threads.

mod action;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use desktop::{Desktop, DesktopError, EncodedImage, ImageFormat, fit_within};
use x11rb::errors::ReplyOrIdError;

pub use action::{Action, Checked, Performed, Point};

/// Why a desktop call was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A field of the request is out of bounds or names something unknown; `field` is its name
    /// as the API spells it.
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    /// The display refused or failed the call.
    #[error(transparent)]
    Desktop(#[from] DesktopError),
    /// The blocking thread running the call panicked or was cancelled.
    #[error("desktop call failed: {0}")]
    Interrupted(String),
}

/// A captured, encoded screenshot and the id its transform is remembered under.
pub struct Screenshot {
    pub image: EncodedImage,
    pub id: u64,
}

/// How many screenshots' transforms are remembered.
const REMEMBERED_SHOTS: usize = 64;

/// How a screenshot's pixels relate to the screen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShotTransform {
    pub id: u64,
    pub scale_x: f64,
    pub scale_y: f64,
    pub screen_width: u32,
    pub screen_height: u32,
}

impl ShotTransform {
    /// Maps a point on the image to the screen pixel under the centre of that image pixel.
    pub fn to_screen(&self, x: f64, y: f64) -> (f64, f64) {
        let map = |v: f64, scale: f64, limit: u32| {
            ((v + 0.5) * scale)
                .floor()
                .clamp(0.0, f64::from(limit.saturating_sub(1)))
        };
        (
            map(x, self.scale_x, self.screen_width),
            map(y, self.scale_y, self.screen_height),
        )
    }
}

/// The display connection and the screenshot record.
pub struct DesktopSession {
    display: String,
    connection: Mutex<Option<Arc<Desktop>>>,
    shots: Mutex<VecDeque<ShotTransform>>,
    next_shot: AtomicU64,
    /// The screen's fingerprint just before the last action, until a WAIT_SETTLED uses it.
    screen_before_action: Mutex<Option<u64>>,
    /// Whether anyone has asked for a WAIT_SETTLED here: only then do actions pay for a capture
    /// of the screen before them (a few milliseconds), which only such a wait reads.
    settle_waits_used: AtomicBool,
}

impl DesktopSession {
    pub fn new(display: impl Into<String>) -> Self {
        Self {
            display: display.into(),
            connection: Mutex::new(None),
            shots: Mutex::new(VecDeque::with_capacity(REMEMBERED_SHOTS)),
            next_shot: AtomicU64::new(1),
            screen_before_action: Mutex::new(None),
            settle_waits_used: AtomicBool::new(false),
        }
    }

    fn set_screen_before_action(&self, fingerprint: u64) {
        *self
            .screen_before_action
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fingerprint);
    }

    /// The fingerprint [`Self::set_screen_before_action`] left, once.
    fn take_screen_before_action(&self) -> Option<u64> {
        self.screen_before_action
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Runs `operation` on the display, connecting first if needed. If the connection turns out
    /// to be dead (the X server restarted), it is reopened and `operation` runs once more.
    /// Blocking: call it from `spawn_blocking`.
    pub fn with<T>(
        &self,
        operation: impl Fn(&Desktop) -> Result<T, DesktopError>,
    ) -> Result<T, DesktopError> {
        let desktop = self.connect()?;
        match operation(&desktop) {
            Err(error) if is_connection_lost(&error) => {
                tracing::info!(display = %self.display, %error, "X connection lost; reconnecting");
                self.forget(&desktop);
                let desktop = self.connect()?;
                operation(&desktop)
            }
            other => other,
        }
    }

    fn connect(&self) -> Result<Arc<Desktop>, DesktopError> {
        // The lock guards only the Option; a panic elsewhere cannot leave it inconsistent.
        let mut connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(desktop) = connection.as_ref() {
            return Ok(desktop.clone());
        }
        let desktop = Arc::new(Desktop::connect(&self.display)?);
        *connection = Some(desktop.clone());
        Ok(desktop)
    }

    fn forget(&self, dead: &Arc<Desktop>) {
        let mut connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        if connection.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead)) {
            *connection = None;
        }
    }

    /// Remembers a screenshot's transform and returns its id.
    pub fn record(&self, image: &EncodedImage) -> u64 {
        let id = self.next_shot.fetch_add(1, Ordering::Relaxed);
        let mut shots = self.shots.lock().unwrap_or_else(|e| e.into_inner());
        if shots.len() == REMEMBERED_SHOTS {
            shots.pop_front();
        }
        shots.push_back(ShotTransform {
            id,
            scale_x: image.scale_x,
            scale_y: image.scale_y,
            screen_width: image.screen_width,
            screen_height: image.screen_height,
        });
        id
    }

    /// The transform of a recent screenshot.
    pub fn transform(&self, id: u64) -> Option<ShotTransform> {
        let shots = self.shots.lock().unwrap_or_else(|e| e.into_inner());
        shots.iter().find(|s| s.id == id).copied()
    }

    /// Captures the screen and encodes it, downscaled to fit `bounds` (keeping the aspect
    /// ratio) when given, and remembers its transform under the returned id.
    pub async fn screenshot(
        self: &Arc<Self>,
        format: ImageFormat,
        bounds: Option<(u32, u32)>,
    ) -> Result<Screenshot, SessionError> {
        let image = self
            .blocking(move |desktop| {
                let target = match bounds {
                    Some(bounds) => Some(fit_within(desktop.screen_size()?, bounds)),
                    None => None,
                };
                desktop.screenshot(format, target)
            })
            .await?;
        let id = self.record(&image);
        Ok(Screenshot { image, id })
    }

    /// Runs `call` on the display (see [`DesktopSession::with`]) on a blocking thread.
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        call: impl Fn(&Desktop) -> Result<T, DesktopError> + Send + 'static,
    ) -> Result<T, SessionError> {
        let session = Arc::clone(self);
        match tokio::task::spawn_blocking(move || session.with(call)).await {
            Ok(result) => result.map_err(SessionError::Desktop),
            Err(error) => Err(SessionError::Interrupted(error.to_string())),
        }
    }
}

fn is_connection_lost(error: &DesktopError) -> bool {
    matches!(
        error,
        DesktopError::X11 {
            source: ReplyOrIdError::ConnectionError(_),
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transforms_map_image_points_to_the_screen() {
        let t = ShotTransform {
            id: 1,
            scale_x: 1.25,
            scale_y: 1.25,
            screen_width: 1280,
            screen_height: 800,
        };
        assert_eq!(t.to_screen(0.0, 0.0), (0.0, 0.0));
        assert_eq!(t.to_screen(512.0, 320.0), (640.0, 400.0));
        assert_eq!(t.to_screen(1023.0, 639.0), (1279.0, 799.0));
        assert_eq!(t.to_screen(5000.0, -10.0), (1279.0, 0.0));
    }
}
