//! Observations: screenshots with an id and the transform from their pixels to the screen.
//!
//! An [`Observation`] is what the model sees. Its image may be downscaled from the screen
//! (`image_width <= screen_width`); every action names the observation it was planned on and
//! its coordinates are image pixels of that observation. [`ObservationMeta::to_screen`] maps
//! them with the same rule sandboxd applies (the screen pixel under the centre of the image
//! pixel), so events can show where an action landed.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// How screenshots are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "lowercase")]
pub enum ImageFormat {
    Png,
    Jpeg { quality: u8 },
}

impl ImageFormat {
    pub fn mime(&self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg { .. } => "image/jpeg",
        }
    }
}

/// What to capture: the whole screen, downscaled (keeping the aspect ratio) to fit within
/// `max_width` x `max_height` when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObserveRequest {
    pub max_width: Option<u32>,
    pub max_height: Option<u32>,
    pub format: ImageFormat,
}

impl ObserveRequest {
    /// The full screen as PNG.
    pub fn full() -> Self {
        Self {
            max_width: None,
            max_height: None,
            format: ImageFormat::Png,
        }
    }

    /// Fitting within `bounds` (when given), as `format`.
    pub fn within(bounds: Option<(u32, u32)>, format: ImageFormat) -> Self {
        Self {
            max_width: bounds.map(|b| b.0),
            max_height: bounds.map(|b| b.1),
            format,
        }
    }
}

/// A screenshot and where it came from.
#[derive(Clone, PartialEq)]
pub struct Observation {
    /// Unique within the sandbox (sandboxd's `x-screenshot-id`); actions name it.
    pub id: String,
    pub image: Bytes,
    pub mime: String,
    pub image_width: u32,
    pub image_height: u32,
    pub screen_width: u32,
    pub screen_height: u32,
    pub taken_at: SystemTime,
}

impl std::fmt::Debug for Observation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observation")
            .field("id", &self.id)
            .field("bytes", &self.image.len())
            .field("mime", &self.mime)
            .field("image", &(self.image_width, self.image_height))
            .field("screen", &(self.screen_width, self.screen_height))
            .finish()
    }
}

impl Observation {
    /// Everything but the bytes.
    pub fn meta(&self) -> ObservationMeta {
        ObservationMeta {
            id: self.id.clone(),
            mime: self.mime.clone(),
            image_width: self.image_width,
            image_height: self.image_height,
            screen_width: self.screen_width,
            screen_height: self.screen_height,
            taken_at_ms: self
                .taken_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        }
    }
}

/// An observation without its image: what events and checkpoints carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservationMeta {
    pub id: String,
    pub mime: String,
    pub image_width: u32,
    pub image_height: u32,
    pub screen_width: u32,
    pub screen_height: u32,
    /// Milliseconds since the Unix epoch.
    pub taken_at_ms: u64,
}

impl ObservationMeta {
    /// Screen pixels per image pixel, horizontally.
    pub fn scale_x(&self) -> f64 {
        f64::from(self.screen_width) / f64::from(self.image_width.max(1))
    }

    /// Screen pixels per image pixel, vertically.
    pub fn scale_y(&self) -> f64 {
        f64::from(self.screen_height) / f64::from(self.image_height.max(1))
    }

    /// Whether (x, y) is a pixel of the image.
    pub fn contains(&self, x: f64, y: f64) -> bool {
        x.is_finite()
            && y.is_finite()
            && x >= 0.0
            && y >= 0.0
            && x < f64::from(self.image_width)
            && y < f64::from(self.image_height)
    }

    /// The screen pixel under the centre of image pixel (x, y) (sandboxd's rule).
    pub fn to_screen(&self, x: f64, y: f64) -> (i32, i32) {
        let map = |v: f64, scale: f64, limit: u32| {
            ((v + 0.5) * scale)
                .floor()
                .clamp(0.0, f64::from(limit.saturating_sub(1))) as i32
        };
        (
            map(x, self.scale_x(), self.screen_width),
            map(y, self.scale_y(), self.screen_height),
        )
    }

    /// The image pixel showing screen pixel (x, y).
    pub fn from_screen(&self, x: i32, y: i32) -> (i32, i32) {
        (
            (f64::from(x) / self.scale_x()).floor() as i32,
            (f64::from(y) / self.scale_y()).floor() as i32,
        )
    }
}

/// A size that fits within `bounds` keeping the aspect ratio of `size` (never upscaled), as
/// sandboxd computes it for `max_width`/`max_height`.
pub fn fit_within(size: (u32, u32), bounds: (u32, u32)) -> (u32, u32) {
    let (w, h) = (size.0.max(1), size.1.max(1));
    if w <= bounds.0 && h <= bounds.1 {
        return (w, h);
    }
    let scale = (f64::from(bounds.0) / f64::from(w)).min(f64::from(bounds.1) / f64::from(h));
    (
        ((f64::from(w) * scale).round() as u32).max(1),
        ((f64::from(h) * scale).round() as u32).max(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(image: (u32, u32), screen: (u32, u32)) -> ObservationMeta {
        ObservationMeta {
            id: "1".into(),
            mime: "image/png".into(),
            image_width: image.0,
            image_height: image.1,
            screen_width: screen.0,
            screen_height: screen.1,
            taken_at_ms: 0,
        }
    }

    #[test]
    fn maps_image_pixels_to_screen_pixels() {
        let m = meta((640, 400), (1280, 800));
        assert_eq!(m.to_screen(0.0, 0.0), (1, 1));
        assert_eq!(m.to_screen(320.0, 200.0), (641, 401));
        assert_eq!(m.to_screen(639.0, 399.0), (1279, 799));
        assert_eq!(m.from_screen(641, 401), (320, 200));
        let same = meta((1280, 800), (1280, 800));
        assert_eq!(same.to_screen(100.0, 50.0), (100, 50));
    }

    #[test]
    fn contains_is_strict_at_the_far_edges() {
        let m = meta((640, 400), (1280, 800));
        assert!(m.contains(0.0, 0.0));
        assert!(m.contains(639.9, 399.0));
        assert!(!m.contains(640.0, 10.0));
        assert!(!m.contains(-1.0, 10.0));
        assert!(!m.contains(f64::NAN, 10.0));
    }

    #[test]
    fn fit_keeps_the_aspect_ratio() {
        assert_eq!(fit_within((1280, 800), (1280, 800)), (1280, 800));
        assert_eq!(fit_within((1920, 1080), (1280, 800)), (1280, 720));
        assert_eq!(fit_within((1280, 800), (1024, 768)), (1024, 640));
        assert_eq!(fit_within((800, 600), (1280, 800)), (800, 600));
    }
}
