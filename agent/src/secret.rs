//! API keys: a [`Secret`] whose `Debug` and `Display` say `[redacted]`, and [`key_from_env`],
//! which reads a key from `NAME` or from the file named by `NAME_FILE`.
//!
//! A secret is never serialised (it implements no `Serialize`), and error messages about keys
//! name the variable or the file, never the value.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Longest key file read: keys are short; anything bigger is the wrong file.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// A secret string (an API key). Cloning shares it; printing it prints `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(Arc::from(value.into()))
    }

    /// The value, for the one place that needs it: the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the secret in `text` by `[redacted]`, for provider error
    /// bodies that might echo it.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_string();
        }
        text.replace(&*self.0, "[redacted]")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why a key could not be read. Names the variable and the file, never the key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("both {var} and {var}_FILE are set; set only one")]
    BothSet { var: String },
    #[error("{var}_FILE names {path}, which cannot be read: {source}")]
    File {
        var: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{var}_FILE names {path}, which is larger than {MAX_KEY_FILE_BYTES} bytes")]
    FileTooLarge { var: String, path: PathBuf },
    #[error("{var}_FILE names {path}, which is empty")]
    FileEmpty { var: String, path: PathBuf },
}

/// Reads the key `var` from `lookup` (the environment, or a map in tests): the value of `var`,
/// or the trimmed contents of the file named by `{var}_FILE`. `Ok(None)` when neither is set
/// (an empty value counts as unset).
pub fn key_from_env(
    var: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, KeyError> {
    let direct = lookup(var).filter(|v| !v.trim().is_empty());
    let file_var = format!("{var}_FILE");
    let file = lookup(&file_var).filter(|v| !v.trim().is_empty());
    match (direct, file) {
        (Some(_), Some(_)) => Err(KeyError::BothSet { var: var.into() }),
        (Some(value), None) => Ok(Some(Secret::new(value.trim()))),
        (None, Some(path)) => read_key_file(var, PathBuf::from(path)).map(Some),
        (None, None) => Ok(None),
    }
}

fn read_key_file(var: &str, path: PathBuf) -> Result<Secret, KeyError> {
    let file_error = |source| KeyError::File {
        var: var.into(),
        path: path.clone(),
        source,
    };
    let metadata = std::fs::metadata(&path).map_err(file_error)?;
    if metadata.len() > MAX_KEY_FILE_BYTES {
        return Err(KeyError::FileTooLarge {
            var: var.into(),
            path,
        });
    }
    let text = std::fs::read_to_string(&path).map_err(file_error)?;
    let key = text.trim();
    if key.is_empty() {
        return Err(KeyError::FileEmpty {
            var: var.into(),
            path,
        });
    }
    Ok(Secret::new(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn debug_and_display_never_show_the_value() {
        let secret = Secret::new("sk-very-secret");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        assert_eq!(format!("{secret}"), "[redacted]");
        assert!(!format!("{:?}", Some(secret.clone())).contains("very"));
    }

    #[test]
    fn scrub_removes_every_occurrence() {
        let secret = Secret::new("sk-abc123");
        assert_eq!(
            secret.scrub("key sk-abc123 is bad; sk-abc123"),
            "key [redacted] is bad; [redacted]"
        );
    }

    #[test]
    fn key_comes_from_the_variable_or_the_file() -> anyhow::Result<()> {
        assert!(key_from_env("K", &env(&[]))?.is_none());
        assert!(key_from_env("K", &env(&[("K", "  ")]))?.is_none());
        let key = key_from_env("K", &env(&[("K", "abc\n")]))?;
        assert_eq!(key.map(|k| k.expose().to_string()).as_deref(), Some("abc"));

        let dir = tempfile::tempdir()?;
        let path = dir.path().join("key");
        std::fs::write(&path, "from-file\n")?;
        let path_text = path.to_string_lossy().to_string();
        let key = key_from_env("K", &env(&[("K_FILE", &path_text)]))?;
        assert_eq!(
            key.map(|k| k.expose().to_string()).as_deref(),
            Some("from-file")
        );

        let both = key_from_env("K", &env(&[("K", "a"), ("K_FILE", &path_text)]));
        assert!(matches!(both, Err(KeyError::BothSet { .. })));

        let missing = key_from_env("K", &env(&[("K_FILE", "/nonexistent/key")]));
        let message = missing.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("K_FILE names /nonexistent/key"),
            "{message}"
        );

        std::fs::write(&path, "\n")?;
        let empty = key_from_env("K", &env(&[("K_FILE", &path_text)]));
        assert!(matches!(empty, Err(KeyError::FileEmpty { .. })));
        Ok(())
    }
}
