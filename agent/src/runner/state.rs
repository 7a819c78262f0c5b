//! The loop's state between steps ([`State`]): the conversation, the images it still holds,
//! the latest observation, the step count and usage, the driving clock, repeat tracking.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::model::Usage;
use crate::observation::ObservationMeta;
use crate::transcript::{ImageRef, Item};

/// Consecutive identical actions without a change on the screen.
#[derive(Debug, Default)]
pub(super) struct RepeatTracker {
    pub(super) signature: Option<String>,
    pub(super) count: u32,
}

/// The loop's state.
pub(super) struct State {
    pub(super) transcript: Vec<Item>,
    pub(super) images: HashMap<String, Bytes>,
    /// The latest observation shown (or about to be shown) to the model.
    pub(super) latest: Option<ObservationMeta>,
    pub(super) latest_hash: u64,
    /// How long taking `latest` took.
    pub(super) capture_ms: u64,
    pub(super) step: u32,
    pub(super) usage: Usage,
    pub(super) active_before: Duration,
    pub(super) active_since: Option<Instant>,
    pub(super) images_dropped: u64,
    pub(super) repeat: RepeatTracker,
    /// A note for the model, sent with the latest screenshot after the current results.
    pub(super) note: Option<String>,
    pub(super) input_seq: u32,
    /// Hand-backs so far (to know whether one happened during a step).
    pub(super) handbacks: u32,
}

impl State {
    pub(super) fn new() -> Self {
        Self {
            transcript: Vec::new(),
            images: HashMap::new(),
            latest: None,
            latest_hash: 0,
            capture_ms: 0,
            step: 0,
            usage: Usage::default(),
            active_before: Duration::ZERO,
            active_since: Some(Instant::now()),
            images_dropped: 0,
            repeat: RepeatTracker::default(),
            note: None,
            input_seq: 0,
            handbacks: 0,
        }
    }

    pub(super) fn active(&self) -> Duration {
        self.active_before + self.active_since.map(|s| s.elapsed()).unwrap_or_default()
    }

    pub(super) fn stop_clock(&mut self) {
        if let Some(since) = self.active_since.take() {
            self.active_before += since.elapsed();
        }
    }

    pub(super) fn start_clock(&mut self) {
        if self.active_since.is_none() {
            self.active_since = Some(Instant::now());
        }
    }

    pub(super) fn latest_image(&self) -> Option<ImageRef> {
        self.latest.as_ref().map(image_ref)
    }
}

pub(super) fn image_ref(meta: &ObservationMeta) -> ImageRef {
    ImageRef {
        observation_id: meta.id.clone(),
        mime: meta.mime.clone(),
        width: meta.image_width,
        height: meta.image_height,
        dropped: false,
    }
}

pub(super) fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

pub(super) fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}
