//! Provider-safe tool names (seed 002): providers accept only `[A-Za-z0-9_-]{1,64}` as function
//! names, while our tools may have other names. [`ToolNames`] encodes each name once per
//! request and decodes the names the model sends back through the same table, so a model can
//! only call a tool it was offered.
//!
//! Encoding: a name already safe stays as it is (the model reads it); otherwise every other
//! character becomes `_` and, when that collides with another tool or is too long, the name
//! becomes `tool_<hex of the UTF-8 name>` (cut to 64 characters plus a disambiguating index).

use std::collections::HashMap;

/// Longest function name the providers accept.
pub const MAX_NAME: usize = 64;

/// Whether `name` is accepted as is.
pub fn is_safe(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Internal names and their provider names, both ways.
#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    to_provider: HashMap<String, String>,
    to_internal: HashMap<String, String>,
}

impl ToolNames {
    pub fn new<'a>(internal: impl IntoIterator<Item = &'a str>) -> Self {
        let mut names = Self::default();
        for name in internal {
            names.add(name);
        }
        names
    }

    fn add(&mut self, internal: &str) {
        if self.to_provider.contains_key(internal) {
            return;
        }
        let mut candidate = if is_safe(internal) {
            internal.to_string()
        } else {
            internal
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        if candidate.is_empty()
            || candidate.len() > MAX_NAME
            || self.to_internal.contains_key(&candidate)
        {
            let hex: String = internal.bytes().map(|b| format!("{b:02x}")).collect();
            candidate = format!("tool_{hex}");
            candidate.truncate(MAX_NAME);
            let mut index = 0;
            let base = candidate.clone();
            while self.to_internal.contains_key(&candidate) {
                index += 1;
                let suffix = format!("_{index}");
                let keep = base.len().min(MAX_NAME - suffix.len());
                candidate = format!("{}{suffix}", &base[..keep]);
            }
        }
        self.to_provider
            .insert(internal.to_string(), candidate.clone());
        self.to_internal.insert(candidate, internal.to_string());
    }

    /// The provider name of an offered tool.
    pub fn encode(&self, internal: &str) -> Option<&str> {
        self.to_provider.get(internal).map(String::as_str)
    }

    /// The internal name of a name the model sent, if it was offered.
    pub fn decode(&self, provider: &str) -> Option<&str> {
        self.to_internal.get(provider).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_names_stay_readable_and_round_trip() {
        let names = ToolNames::new(["request_human", "bash", "text_editor"]);
        assert_eq!(names.encode("request_human"), Some("request_human"));
        assert_eq!(names.decode("bash"), Some("bash"));
        assert_eq!(names.decode("rm_rf"), None);
    }

    #[test]
    fn unsafe_names_are_encoded_and_decoded() {
        let names = ToolNames::new(["workspace.read_text", "workspace_read_text", "工具"]);
        let dotted = names
            .encode("workspace.read_text")
            .unwrap_or_default()
            .to_string();
        let plain = names
            .encode("workspace_read_text")
            .unwrap_or_default()
            .to_string();
        let cjk = names.encode("工具").unwrap_or_default().to_string();
        for encoded in [&dotted, &plain, &cjk] {
            assert!(is_safe(encoded), "{encoded}");
        }
        assert_ne!(dotted, plain, "collisions are resolved");
        assert_eq!(names.decode(&dotted), Some("workspace.read_text"));
        assert_eq!(names.decode(&plain), Some("workspace_read_text"));
        assert_eq!(names.decode(&cjk), Some("工具"));
    }

    #[test]
    fn long_names_fit() {
        let long = "x.".repeat(50);
        let longer = format!("{long}y");
        let names = ToolNames::new([long.as_str(), longer.as_str()]);
        let a = names.encode(&long).unwrap_or_default().to_string();
        let b = names.encode(&longer).unwrap_or_default().to_string();
        assert!(is_safe(&a) && is_safe(&b), "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(names.decode(&a), Some(long.as_str()));
        assert_eq!(names.decode(&b), Some(longer.as_str()));
    }
}
