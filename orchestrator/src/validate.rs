//! Every check of a field a client sends the orchestrator: a sandbox's create request and token
//! lifetimes, a run's task, limits, metadata, idempotency key and answers. Each refusal is an
//! [`Invalid`] naming the field (a dotted path into the body, or a header's name); the
//! lifecycle modules turn it into their own error and the API into a 422 with that location.
//!
//! **Invariant:** a leaf. It knows the bounds and the field names, nothing of the store, the
//! backend or HTTP, so both [`crate::sandboxes`] and [`crate::runs`] use it without depending on
//! each other. Defaults that come from configuration are applied by the caller, which then asks
//! here whether the result is acceptable.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::ops::RangeInclusive;

use agent::Limits;

/// A field a request may not carry as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{field}`: {message}")]
pub struct Invalid {
    /// Where the value is: `task`, `limits.max_steps`, `env.FOO`, `Idempotency-Key`.
    pub field: String,
    pub message: String,
}

/// A refusal of `field`.
pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Most environment variables a sandbox may be given, and the longest value.
pub const MAX_ENV_VARS: usize = 64;
pub const MAX_ENV_VALUE: usize = 8 * 1024;
/// Longest environment variable name.
const MAX_ENV_NAME: usize = 128;
/// Longest lifetime of a viewer token or share link.
pub const MAX_TOKEN_TTL_SECS: i64 = 24 * 3600;
/// Longest image reference.
const MAX_IMAGE: usize = 255;

/// Longest task text (and answer), in bytes.
pub const MAX_TASK_BYTES: usize = 64 * 1024;
/// Longest idempotency key.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;
/// Most input files a run may be given, and their total size.
pub const MAX_INPUT_FILES: usize = 20;
pub const MAX_INPUT_BYTES: usize = 8 * 1024 * 1024;
/// Longest input file name.
const MAX_INPUT_NAME: usize = 100;
/// Upper bounds of the limits a run may ask for.
const MAX_STEPS: u32 = 1000;
const MAX_SECONDS: u64 = 24 * 3600;
const MAX_IMAGES: usize = 50;

/// Most placement constraints and preferences a create request may carry, and the longest.
pub const MAX_PLACEMENT_RULES: usize = 8;
const MAX_PLACEMENT_RULE: usize = 200;

/// A node label's name or value as placement may name it: letters, digits, `.`, `_`, `-`.
fn placement_word(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `placement.constraints` and `placement.preferences`: constraints on node labels,
/// `node.labels.<name>==<value>` or `!=`, and spread preferences, `node.labels.<name>`. Only
/// node labels: a request places its sandbox by what the operator labelled nodes with, never by
/// a node's name, role or address.
pub fn placement(constraints: &[String], preferences: &[String]) -> Result<(), Invalid> {
    for (field, rules) in [
        ("placement.constraints", constraints),
        ("placement.preferences", preferences),
    ] {
        if rules.len() > MAX_PLACEMENT_RULES {
            return Err(invalid(
                field,
                format!("at most {MAX_PLACEMENT_RULES} entries"),
            ));
        }
    }
    for (index, rule) in constraints.iter().enumerate() {
        let field = format!("placement.constraints.{index}");
        let parsed = rule.strip_prefix("node.labels.").and_then(|rest| {
            rest.split_once("==")
                .or_else(|| rest.split_once("!="))
                .map(|(name, value)| (name.trim(), value.trim()))
        });
        match parsed {
            Some((name, value))
                if rule.len() <= MAX_PLACEMENT_RULE
                    && placement_word(name)
                    && placement_word(value) => {}
            _ => {
                return Err(invalid(
                    field,
                    format!(
                        "{rule:?} is not `node.labels.<name>==<value>` or `!=` (letters, digits,                          `.`, `_`, `-`; at most {MAX_PLACEMENT_RULE} bytes)"
                    ),
                ));
            }
        }
    }
    for (index, rule) in preferences.iter().enumerate() {
        match rule.strip_prefix("node.labels.") {
            Some(name) if rule.len() <= MAX_PLACEMENT_RULE && placement_word(name) => {}
            _ => {
                return Err(invalid(
                    format!("placement.preferences.{index}"),
                    format!("{rule:?} is not `node.labels.<name>` (spread over that label)"),
                ));
            }
        }
    }
    Ok(())
}

/// How large a string map (`metadata`) may be: entries, key bytes, value bytes.
#[derive(Debug, Clone, Copy)]
pub struct MapBounds {
    pub entries: usize,
    pub key: usize,
    pub value: usize,
}

/// A sandbox's metadata.
pub const SANDBOX_METADATA: MapBounds = MapBounds {
    entries: 32,
    key: 64,
    value: 512,
};

/// A run's metadata.
pub const RUN_METADATA: MapBounds = MapBounds {
    entries: 32,
    key: 256,
    value: 256,
};

/// `value` within `range`, or a refusal of `field` that states the range.
pub fn within<T: PartialOrd + Display + Copy>(
    field: &str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<T, Invalid> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(invalid(
            field,
            format!("must be between {} and {}", range.start(), range.end()),
        ))
    }
}

/// A string map within `bounds`: at most `entries`, keys non-empty.
pub fn metadata(map: &BTreeMap<String, String>, bounds: MapBounds) -> Result<(), Invalid> {
    if map.len() > bounds.entries {
        return Err(invalid(
            "metadata",
            format!("at most {} entries", bounds.entries),
        ));
    }
    for (key, value) in map {
        if key.is_empty() || key.len() > bounds.key {
            return Err(invalid(
                "metadata",
                format!("keys are 1 to {} bytes", bounds.key),
            ));
        }
        if value.len() > bounds.value {
            return Err(invalid(
                format!("metadata.{key}"),
                format!("values are at most {} bytes", bounds.value),
            ));
        }
    }
    Ok(())
}

/// The image a sandbox asks for: the default when absent, else one the server allows.
pub fn image(asked: Option<&str>, default: &str, allowed: &[String]) -> Result<String, Invalid> {
    match asked {
        None => Ok(default.to_string()),
        Some(image) if image.is_empty() || image.len() > MAX_IMAGE => Err(invalid(
            "image",
            format!("must be 1 to {MAX_IMAGE} characters"),
        )),
        Some(image) if image == default || allowed.iter().any(|a| a == image) => {
            Ok(image.to_string())
        }
        Some(image) => Err(invalid(
            "image",
            format!("image `{image}` is not allowed on this server (see --allow-image)"),
        )),
    }
}

/// Parses `WIDTHxHEIGHT` within sensible bounds.
pub fn resolution(text: &str) -> Result<(u32, u32), Invalid> {
    let bad = || {
        invalid(
            "resolution",
            "must be WIDTHxHEIGHT, e.g. 1280x800, between 320x200 and 3840x2160",
        )
    };
    let (w, h) = text.split_once(['x', 'X']).ok_or_else(bad)?;
    let w: u32 = w.trim().parse().map_err(|_| bad())?;
    let h: u32 = h.trim().parse().map_err(|_| bad())?;
    if !(320..=3840).contains(&w) || !(200..=2160).contains(&h) {
        return Err(bad());
    }
    Ok((w, h))
}

/// A token lifetime within 1 s and [`MAX_TOKEN_TTL_SECS`].
pub fn token_ttl(ttl_secs: i64) -> Result<i64, Invalid> {
    within("ttl_secs", ttl_secs, 1..=MAX_TOKEN_TTL_SECS)
}

/// Variables the orchestrator sets itself; a request may not override them.
fn reserved_env(name: &str) -> bool {
    name.starts_with("SANDBOX")
        || name.starts_with("SCREEN_")
        // Every dynamic-loader variable (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, ...): each can
        // run code inside sandboxd itself.
        || name.starts_with("LD_")
        || name.starts_with("GLIBC_TUNABLES")
        || matches!(name, "DISPLAY" | "HOME" | "USER" | "PATH")
}

/// A sandbox's extra environment: bounded, well-formed names, none the orchestrator owns.
pub fn env(env: &BTreeMap<String, String>) -> Result<(), Invalid> {
    if env.len() > MAX_ENV_VARS {
        return Err(invalid("env", format!("at most {MAX_ENV_VARS} variables")));
    }
    for (name, value) in env {
        let field = format!("env.{name}");
        let valid_name = !name.is_empty()
            && name.len() <= MAX_ENV_NAME
            && name
                .chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if !valid_name {
            return Err(invalid(
                field,
                "names are letters, digits and _, not starting with a digit",
            ));
        }
        if reserved_env(name) {
            return Err(invalid(
                field,
                "is set by the orchestrator or reserved (SANDBOX*, SCREEN_*, DISPLAY, HOME, USER, PATH, LD_*, GLIBC_TUNABLES)",
            ));
        }
        if value.len() > MAX_ENV_VALUE || value.contains('\0') {
            return Err(invalid(
                field,
                format!("values are at most {MAX_ENV_VALUE} bytes, without NUL"),
            ));
        }
    }
    Ok(())
}

/// Text a person or client writes to a run (`task`, an answer's `text`): not blank, at most
/// [`MAX_TASK_BYTES`].
pub fn run_text(field: &str, text: &str) -> Result<(), Invalid> {
    if text.trim().is_empty() {
        return Err(invalid(field, "is empty"));
    }
    if text.len() > MAX_TASK_BYTES {
        return Err(invalid(
            field,
            format!("{} bytes is over the limit of {MAX_TASK_BYTES}", text.len()),
        ));
    }
    Ok(())
}

/// A run's limits: what was asked, defaults for the rest, each within its bounds.
pub fn run_limits(
    max_steps: Option<u32>,
    max_seconds: Option<u64>,
    max_images: Option<usize>,
) -> Result<Limits, Invalid> {
    let defaults = Limits::default();
    Ok(Limits {
        max_steps: within(
            "limits.max_steps",
            max_steps.unwrap_or(defaults.max_steps),
            1..=MAX_STEPS,
        )?,
        max_seconds: within(
            "limits.max_seconds",
            max_seconds.unwrap_or(defaults.max_seconds),
            1..=MAX_SECONDS,
        )?,
        max_images: within(
            "limits.max_images",
            max_images.unwrap_or(defaults.max_images),
            1..=MAX_IMAGES,
        )?,
    })
}

/// A run's input files, as (name, size): at most [`MAX_INPUT_FILES`] of at most
/// [`MAX_INPUT_BYTES`] together, each name a plain file name (no folder, not hidden), no two
/// alike.
pub fn run_inputs<'a>(files: impl IntoIterator<Item = (&'a str, usize)>) -> Result<(), Invalid> {
    let mut names = std::collections::BTreeSet::new();
    let mut total = 0usize;
    for (name, size) in files {
        let plain = !name.is_empty()
            && name.len() <= MAX_INPUT_NAME
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ' '));
        if !plain {
            return Err(invalid(
                "inputs",
                format!(
                    "{name:?}: a file name of 1 to {MAX_INPUT_NAME} letters, digits, spaces, \
                     '.', '_' or '-', not starting with '.'"
                ),
            ));
        }
        if !names.insert(name) {
            return Err(invalid("inputs", format!("{name:?} is given twice")));
        }
        total = total.saturating_add(size);
    }
    if names.len() > MAX_INPUT_FILES || total > MAX_INPUT_BYTES {
        return Err(invalid(
            "inputs",
            format!("at most {MAX_INPUT_FILES} files of {MAX_INPUT_BYTES} bytes together"),
        ));
    }
    Ok(())
}

/// An `Idempotency-Key` header's value: 1 to [`MAX_IDEMPOTENCY_KEY`] bytes.
pub fn idempotency_key(key: &str) -> Result<(), Invalid> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(invalid(
            "Idempotency-Key",
            format!("between 1 and {MAX_IDEMPOTENCY_KEY} bytes"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolutions_are_bounded() {
        assert_eq!(resolution("1280x800").unwrap(), (1280, 800));
        assert_eq!(resolution("1024X768").unwrap(), (1024, 768));
        for bad in [
            "",
            "1280",
            "x800",
            "10x10",
            "99999x800",
            "axb",
            "1280x800x2",
        ] {
            assert_eq!(resolution(bad).unwrap_err().field, "resolution", "{bad}");
        }
    }

    #[test]
    fn env_names_and_reserved_variables_are_checked() {
        let ok = BTreeMap::from([("FOO_1".to_string(), "bar".to_string())]);
        assert!(env(&ok).is_ok());
        for name in [
            "1FOO",
            "FOO-BAR",
            "",
            "SANDBOX_API_KEY",
            "SANDBOXD_IDLE_EXIT_SECS",
            "DISPLAY",
            "LD_PRELOAD",
            "LD_AUDIT",
            "LD_ANYTHING",
            "GLIBC_TUNABLES",
        ] {
            let vars = BTreeMap::from([(name.to_string(), "x".to_string())]);
            assert_eq!(env(&vars).unwrap_err().field, format!("env.{name}"));
        }
        let nul = BTreeMap::from([("A".to_string(), "x\0y".to_string())]);
        assert!(env(&nul).is_err());
    }

    #[test]
    fn metadata_is_bounded_by_its_owner() {
        let too_many: BTreeMap<String, String> =
            (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(metadata(&too_many, SANDBOX_METADATA).is_err());
        assert!(metadata(&too_many, RUN_METADATA).is_err());
        let long = BTreeMap::from([("k".to_string(), "v".repeat(300))]);
        assert!(metadata(&long, SANDBOX_METADATA).is_ok());
        assert_eq!(
            metadata(&long, RUN_METADATA).unwrap_err().field,
            "metadata.k"
        );
        let empty_key = BTreeMap::from([(String::new(), "v".to_string())]);
        assert_eq!(
            metadata(&empty_key, RUN_METADATA).unwrap_err().field,
            "metadata"
        );
    }

    #[test]
    fn run_fields_name_themselves() {
        assert_eq!(run_text("task", "  ").unwrap_err().field, "task");
        let long = "a".repeat(MAX_TASK_BYTES + 1);
        assert_eq!(run_text("text", &long).unwrap_err().field, "text");
        assert_eq!(
            run_limits(Some(0), None, None).unwrap_err().field,
            "limits.max_steps"
        );
        assert_eq!(
            run_limits(None, None, Some(51)).unwrap_err().field,
            "limits.max_images"
        );
        let limits = run_limits(Some(5), None, None).unwrap();
        assert_eq!(limits.max_steps, 5);
        assert_eq!(limits.max_seconds, Limits::default().max_seconds);
        assert!(run_inputs([("notes.txt", 10), ("data 1.csv", 10)]).is_ok());
        for bad in ["", "../x", "a/b", ".hidden"] {
            assert_eq!(
                run_inputs([(bad, 1)]).unwrap_err().field,
                "inputs",
                "{bad:?}"
            );
        }
        assert!(run_inputs([("a", 1), ("a", 1)]).is_err());
        assert!(run_inputs([("a", MAX_INPUT_BYTES + 1)]).is_err());
        assert!(idempotency_key("").is_err());
        assert!(idempotency_key(&"k".repeat(256)).is_err());
        assert_eq!(token_ttl(0).unwrap_err().field, "ttl_secs");
        assert!(image(Some("other:1"), "agentbox/sandbox:latest", &[]).is_err());
        assert_eq!(
            image(Some("other:1"), "d", &["other:1".to_string()]).unwrap(),
            "other:1"
        );
    }

    #[test]
    fn placement_names_node_labels_only() {
        let ok = |c: &[&str], p: &[&str]| {
            placement(
                &c.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                &p.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        };
        assert!(
            ok(
                &["node.labels.zone==eu-1", "node.labels.gpu!=yes"],
                &["node.labels.zone"]
            )
            .is_ok()
        );
        for (bad, field) in [
            ("node.hostname==n1", "placement.constraints.0"),
            ("node.labels.zone", "placement.constraints.0"),
            ("node.labels.zone==", "placement.constraints.0"),
            ("node.labels.a b==c", "placement.constraints.0"),
        ] {
            assert_eq!(ok(&[bad], &[]).unwrap_err().field, field, "{bad}");
        }
        assert_eq!(
            ok(&[], &["node.labels.zone", "spread=node.role"])
                .unwrap_err()
                .field,
            "placement.preferences.1"
        );
        let many: Vec<&str> = vec!["node.labels.a==b"; MAX_PLACEMENT_RULES + 1];
        assert_eq!(ok(&many, &[]).unwrap_err().field, "placement.constraints");
    }
}
