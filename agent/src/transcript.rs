//! The conversation, kept provider-neutral by the loop and rendered by each adapter into its
//! provider's wire format on every turn.
//!
//! The model's own turns are kept as the provider sent them ([`Item::Assistant`]'s `raw`
//! items, thinking blocks with their signatures and encrypted reasoning included), because
//! providers want them back unchanged. Images are referred to by observation id
//! ([`ImageRef`]); their bytes live beside the transcript, so a checkpoint carries the text of
//! every turn but no image. Old images are dropped first ([`trim_images`]): the reference stays,
//! marked `dropped`, and adapters render a short text (or, where the provider demands an image,
//! a 1x1 placeholder) instead.

use serde::{Deserialize, Serialize};

/// A screenshot shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    pub observation_id: String,
    pub mime: String,
    pub width: u32,
    pub height: u32,
    /// Dropped from the conversation to respect the image limit.
    #[serde(default)]
    pub dropped: bool,
}

/// A safety check raised by the provider on a tool call (OpenAI's `pending_safety_checks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SafetyCheck {
    pub id: String,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// The answer to one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    /// How the call came in (`tool_use`, `computer_call`, `function_call`, `function`,
    /// `script`), so the adapter answers in the matching shape.
    pub channel: String,
    pub text: String,
    #[serde(default)]
    pub image: Option<ImageRef>,
    #[serde(default)]
    pub is_error: bool,
    /// Safety checks the person acknowledged for this call.
    #[serde(default)]
    pub acknowledged_safety_checks: Vec<SafetyCheck>,
}

/// One entry of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Item {
    /// From the user side: the task, a note after a hand-back or a restart.
    User {
        text: String,
        #[serde(default)]
        image: Option<ImageRef>,
    },
    /// The model's turn, as the provider sent it.
    Assistant {
        provider: String,
        raw: Vec<serde_json::Value>,
        #[serde(default)]
        text: Option<String>,
        /// The ids of the tool calls in it, in order.
        #[serde(default)]
        call_ids: Vec<String>,
    },
    ToolResult(ToolResult),
}

impl Item {
    fn image_mut(&mut self) -> Option<&mut ImageRef> {
        match self {
            Item::User { image, .. } => image.as_mut(),
            Item::ToolResult(result) => result.image.as_mut(),
            Item::Assistant { .. } => None,
        }
    }
}

/// Marks all but the newest `keep` images as dropped; returns how many were dropped now.
pub fn trim_images(items: &mut [Item], keep: usize) -> usize {
    let mut kept = 0;
    let mut dropped = 0;
    for item in items.iter_mut().rev() {
        let Some(image) = item.image_mut() else {
            continue;
        };
        if image.dropped {
            continue;
        }
        if kept < keep {
            kept += 1;
        } else {
            image.dropped = true;
            dropped += 1;
        }
    }
    dropped
}

/// Images still shown to the model.
pub fn live_images(items: &[Item]) -> usize {
    items
        .iter()
        .filter_map(|item| match item {
            Item::User { image, .. } => image.as_ref(),
            Item::ToolResult(result) => result.image.as_ref(),
            Item::Assistant { .. } => None,
        })
        .filter(|image| !image.dropped)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str) -> Option<ImageRef> {
        Some(ImageRef {
            observation_id: id.into(),
            mime: "image/png".into(),
            width: 10,
            height: 10,
            dropped: false,
        })
    }

    #[test]
    fn oldest_images_go_first_and_text_stays() {
        let mut items = vec![
            Item::User {
                text: "task".into(),
                image: image("1"),
            },
            Item::ToolResult(ToolResult {
                call_id: "a".into(),
                channel: "tool_use".into(),
                text: "done".into(),
                image: image("2"),
                is_error: false,
                acknowledged_safety_checks: vec![],
            }),
            Item::User {
                text: "note".into(),
                image: image("3"),
            },
        ];
        assert_eq!(trim_images(&mut items, 2), 1);
        assert_eq!(live_images(&items), 2);
        assert!(
            matches!(&items[0], Item::User { text, image: Some(i) } if text == "task" && i.dropped)
        );
        assert_eq!(trim_images(&mut items, 2), 0);
        assert_eq!(trim_images(&mut items, 0), 2);
        assert_eq!(live_images(&items), 0);
    }
}
