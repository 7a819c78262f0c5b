//! The checks of what a client asks of the sandbox lifecycle (a create request, a token's
//! lifetime), each refusal a [`SandboxError::Invalid`] naming the field.

use std::collections::BTreeMap;

use super::{
    CreateSpec, MAX_ENV_VALUE, MAX_ENV_VARS, MAX_METADATA, MAX_METADATA_KEY, MAX_METADATA_VALUE,
    MAX_TOKEN_TTL_SECS, SandboxError, Settings,
};

pub(super) fn invalid(field: &str, message: impl Into<String>) -> SandboxError {
    SandboxError::Invalid {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Checks a request and fills in defaults; returns (image, idle, lifetime).
pub(super) fn check_spec(
    settings: &Settings,
    spec: &CreateSpec,
) -> Result<(String, i64, i64), SandboxError> {
    let image = match &spec.image {
        None => settings.image.clone(),
        Some(image) if image.is_empty() || image.len() > 255 => {
            return Err(invalid("image", "must be 1 to 255 characters"));
        }
        Some(image) => {
            if !settings.allowed_images.iter().any(|a| a == image) && *image != settings.image {
                return Err(invalid(
                    "image",
                    format!("image `{image}` is not allowed on this server (see --allow-image)"),
                ));
            }
            image.clone()
        }
    };
    if let Some(resolution) = &spec.resolution {
        parse_resolution(resolution)?;
    }
    let cap = settings.lifetime_cap_secs;
    let idle = spec.idle_timeout_secs.unwrap_or(settings.idle_timeout_secs);
    if !(1..=cap).contains(&idle) {
        return Err(invalid(
            "idle_timeout_secs",
            format!("must be between 1 and {cap}"),
        ));
    }
    let lifetime = spec.max_lifetime_secs.unwrap_or(settings.max_lifetime_secs);
    if !(1..=cap).contains(&lifetime) {
        return Err(invalid(
            "max_lifetime_secs",
            format!("must be between 1 and {cap}"),
        ));
    }
    validate_env(&spec.env)?;
    validate_metadata(&spec.metadata)?;
    Ok((image, idle, lifetime))
}

/// A token lifetime within 1 s and [`MAX_TOKEN_TTL_SECS`].
pub(super) fn check_ttl(ttl_secs: i64) -> Result<(), SandboxError> {
    if (1..=MAX_TOKEN_TTL_SECS).contains(&ttl_secs) {
        Ok(())
    } else {
        Err(invalid(
            "ttl_secs",
            format!("must be between 1 and {MAX_TOKEN_TTL_SECS}"),
        ))
    }
}

/// Parses `WIDTHxHEIGHT` within sensible bounds.
pub fn parse_resolution(text: &str) -> Result<(u32, u32), SandboxError> {
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

fn validate_env(env: &BTreeMap<String, String>) -> Result<(), SandboxError> {
    if env.len() > MAX_ENV_VARS {
        return Err(invalid("env", format!("at most {MAX_ENV_VARS} variables")));
    }
    for (name, value) in env {
        let field = format!("env.{name}");
        let valid_name = !name.is_empty()
            && name.len() <= 128
            && name
                .chars()
                .enumerate()
                .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if !valid_name {
            return Err(invalid(
                &field,
                "names are letters, digits and _, not starting with a digit",
            ));
        }
        if reserved_env(name) {
            return Err(invalid(
                &field,
                "is set by the orchestrator or reserved (SANDBOX*, SCREEN_*, DISPLAY, HOME, USER, PATH, LD_*, GLIBC_TUNABLES)",
            ));
        }
        if value.len() > MAX_ENV_VALUE || value.contains('\0') {
            return Err(invalid(
                &field,
                format!("values are at most {MAX_ENV_VALUE} bytes, without NUL"),
            ));
        }
    }
    Ok(())
}

fn validate_metadata(metadata: &BTreeMap<String, String>) -> Result<(), SandboxError> {
    if metadata.len() > MAX_METADATA {
        return Err(invalid(
            "metadata",
            format!("at most {MAX_METADATA} entries"),
        ));
    }
    for (key, value) in metadata {
        if key.is_empty() || key.len() > MAX_METADATA_KEY {
            return Err(invalid(
                "metadata",
                format!("keys are 1 to {MAX_METADATA_KEY} bytes"),
            ));
        }
        if value.len() > MAX_METADATA_VALUE {
            return Err(invalid(
                &format!("metadata.{key}"),
                format!("values are at most {MAX_METADATA_VALUE} bytes"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolutions_are_bounded() {
        assert_eq!(parse_resolution("1280x800").unwrap(), (1280, 800));
        assert_eq!(parse_resolution("1024X768").unwrap(), (1024, 768));
        for bad in [
            "",
            "1280",
            "x800",
            "10x10",
            "99999x800",
            "axb",
            "1280x800x2",
        ] {
            assert!(parse_resolution(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_names_and_reserved_variables_are_checked() {
        let ok = BTreeMap::from([("FOO_1".to_string(), "bar".to_string())]);
        assert!(validate_env(&ok).is_ok());
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
            let env = BTreeMap::from([(name.to_string(), "x".to_string())]);
            assert!(validate_env(&env).is_err(), "{name}");
        }
        let nul = BTreeMap::from([("A".to_string(), "x\0y".to_string())]);
        assert!(validate_env(&nul).is_err());
    }

    #[test]
    fn metadata_is_bounded() {
        let too_many: BTreeMap<String, String> =
            (0..33).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(validate_metadata(&too_many).is_err());
        let long = BTreeMap::from([("k".to_string(), "v".repeat(513))]);
        assert!(validate_metadata(&long).is_err());
    }
}
