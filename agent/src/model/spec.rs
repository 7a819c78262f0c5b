//! The model string (`anthropic:<model>`, `openai:<model>`, `openai-chat:<model>`,
//! `script:<path>`), the settings adapters are built with, and [`build_model`], which checks
//! everything that can be checked before a run starts: the prefix, the key, the base URL, the
//! script file. Every failure is a typed error naming the problem, so an API can answer 4xx.
//!
//! Environment (read by [`ModelOptions::from_env`]): `ANTHROPIC_API_KEY` /
//! `ANTHROPIC_API_KEY_FILE`, `ANTHROPIC_BASE_URL`; `OPENAI_API_KEY` / `OPENAI_API_KEY_FILE`,
//! `OPENAI_BASE_URL`; `OPENAI_CHAT_BASE_URL` (required for `openai-chat:`),
//! `OPENAI_CHAT_API_KEY` / `OPENAI_CHAT_API_KEY_FILE` (optional).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Model;
use super::anthropic::{AnthropicModel, AnthropicOptions};
use super::chat::ChatModel;
use super::openai::{OpenAiModel, OpenAiOptions};
use super::script::{ScriptError, ScriptModel};
use crate::gateway::{Gateway, GatewayError, HttpOptions};
use crate::secret::{KeyError, Secret, key_from_env};

/// A parsed model string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    Anthropic { model: String },
    OpenAi { model: String },
    OpenAiChat { model: String },
    Script { path: PathBuf },
}

/// A model string that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "model is empty; use anthropic:<model>, openai:<model>, openai-chat:<model> or script:<path>"
    )]
    Empty,
    #[error(
        "model {0:?} has no provider prefix; use anthropic:<model>, openai:<model>, openai-chat:<model> or script:<path>"
    )]
    NoPrefix(String),
    #[error("unknown model provider {prefix:?}; use anthropic:, openai:, openai-chat: or script:")]
    UnknownPrefix { prefix: String },
    #[error("model {0:?} names no model after the prefix")]
    MissingName(String),
}

impl ModelSpec {
    pub fn parse(text: &str) -> Result<Self, SpecError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SpecError::Empty);
        }
        let Some((prefix, name)) = text.split_once(':') else {
            return Err(SpecError::NoPrefix(text.to_string()));
        };
        let name = name.trim();
        let spec = match prefix.trim() {
            "anthropic" => ModelSpec::Anthropic {
                model: name.to_string(),
            },
            "openai" => ModelSpec::OpenAi {
                model: name.to_string(),
            },
            "openai-chat" => ModelSpec::OpenAiChat {
                model: name.to_string(),
            },
            "script" => ModelSpec::Script {
                path: PathBuf::from(name),
            },
            other => {
                return Err(SpecError::UnknownPrefix {
                    prefix: other.to_string(),
                });
            }
        };
        if name.is_empty() {
            return Err(SpecError::MissingName(text.to_string()));
        }
        Ok(spec)
    }

    /// `anthropic`, `openai`, `openai-chat` or `script`.
    pub fn provider(&self) -> &'static str {
        match self {
            ModelSpec::Anthropic { .. } => "anthropic",
            ModelSpec::OpenAi { .. } => "openai",
            ModelSpec::OpenAiChat { .. } => "openai-chat",
            ModelSpec::Script { .. } => "script",
        }
    }
}

impl std::fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSpec::Anthropic { model } => write!(f, "anthropic:{model}"),
            ModelSpec::OpenAi { model } => write!(f, "openai:{model}"),
            ModelSpec::OpenAiChat { model } => write!(f, "openai-chat:{model}"),
            ModelSpec::Script { path } => write!(f, "script:{}", path.display()),
        }
    }
}

impl std::str::FromStr for ModelSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A key as read from the environment: present, absent, or unreadable (reported only when the
/// provider that needs it is used).
pub type KeySlot = Result<Option<Secret>, Arc<KeyError>>;

/// Everything adapters are built with.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    pub anthropic_key: KeySlot,
    pub anthropic_base_url: String,
    pub anthropic: AnthropicOptions,
    pub openai_key: KeySlot,
    pub openai_base_url: String,
    pub openai: OpenAiOptions,
    pub chat_key: KeySlot,
    /// Base URL of the OpenAI-compatible server, including `/v1` (`http://localhost:8000/v1`).
    pub chat_base_url: Option<String>,
    /// Overrides the adapters' screenshot bounds for `openai-chat:` (open models differ).
    pub chat_observation_bounds: Option<(u32, u32)>,
    pub http: HttpOptions,
    /// When set, `script:` paths must resolve to a file under this directory.
    pub script_root: Option<PathBuf>,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            anthropic_key: Ok(None),
            anthropic_base_url: "https://api.anthropic.com".into(),
            anthropic: AnthropicOptions::default(),
            openai_key: Ok(None),
            openai_base_url: "https://api.openai.com/v1".into(),
            openai: OpenAiOptions::default(),
            chat_key: Ok(None),
            chat_base_url: None,
            chat_observation_bounds: None,
            http: HttpOptions::default(),
            script_root: None,
        }
    }
}

impl ModelOptions {
    /// Reads keys and base URLs from the process environment.
    pub fn from_env() -> Self {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Reads keys and base URLs through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Self {
        let slot = |var: &str| key_from_env(var, lookup).map_err(Arc::new);
        let url = |var: &str| {
            lookup(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let defaults = Self::default();
        Self {
            anthropic_key: slot("ANTHROPIC_API_KEY"),
            anthropic_base_url: url("ANTHROPIC_BASE_URL").unwrap_or(defaults.anthropic_base_url),
            openai_key: slot("OPENAI_API_KEY"),
            openai_base_url: url("OPENAI_BASE_URL").unwrap_or(defaults.openai_base_url),
            chat_key: slot("OPENAI_CHAT_API_KEY"),
            chat_base_url: url("OPENAI_CHAT_BASE_URL"),
            ..defaults
        }
    }
}

/// Why a model cannot be set up. Each names what to fix.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("{provider}: no API key; set {var} or {var}_FILE")]
    MissingKey {
        provider: &'static str,
        var: &'static str,
    },
    #[error("{0}")]
    Key(Arc<KeyError>),
    #[error(
        "openai-chat: no server; set OPENAI_CHAT_BASE_URL (for example http://localhost:8000/v1)"
    )]
    MissingBaseUrl,
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    #[error(transparent)]
    Script(#[from] ScriptError),
}

fn required_key(
    slot: &KeySlot,
    provider: &'static str,
    var: &'static str,
) -> Result<Secret, SetupError> {
    match slot {
        Ok(Some(key)) => Ok(key.clone()),
        Ok(None) => Err(SetupError::MissingKey { provider, var }),
        Err(error) => Err(SetupError::Key(error.clone())),
    }
}

/// Builds the adapter `spec` names, checking keys, URLs and script files first.
pub fn build_model(spec: &ModelSpec, options: &ModelOptions) -> Result<Arc<dyn Model>, SetupError> {
    match spec {
        ModelSpec::Anthropic { model } => {
            let key = required_key(&options.anthropic_key, "anthropic", "ANTHROPIC_API_KEY")?;
            Gateway::check_url(&options.anthropic_base_url)?;
            Ok(Arc::new(AnthropicModel::new(
                model,
                key,
                &options.anthropic_base_url,
                options.anthropic.clone(),
                options.http,
            )?))
        }
        ModelSpec::OpenAi { model } => {
            let key = required_key(&options.openai_key, "openai", "OPENAI_API_KEY")?;
            Gateway::check_url(&options.openai_base_url)?;
            Ok(Arc::new(OpenAiModel::new(
                model,
                key,
                &options.openai_base_url,
                options.openai.clone(),
                options.http,
            )?))
        }
        ModelSpec::OpenAiChat { model } => {
            let base = options
                .chat_base_url
                .as_deref()
                .ok_or(SetupError::MissingBaseUrl)?;
            Gateway::check_url(base)?;
            let key = match &options.chat_key {
                Ok(key) => key.clone(),
                Err(error) => return Err(SetupError::Key(error.clone())),
            };
            Ok(Arc::new(ChatModel::new(
                model,
                key,
                base,
                options.chat_observation_bounds,
                options.http,
            )?))
        }
        ModelSpec::Script { path } => {
            let path = confine(path, options.script_root.as_deref())?;
            Ok(Arc::new(ScriptModel::load(&path)?))
        }
    }
}

/// The script `path` names under `root` (relative to it, or absolute inside it). A missing file
/// and one outside the root get the same error: a caller learns nothing about the host's files.
fn confine(path: &Path, root: Option<&Path>) -> Result<PathBuf, ScriptError> {
    let Some(root) = root else {
        return Ok(path.to_path_buf());
    };
    let root = root.canonicalize().map_err(|e| ScriptError::Read {
        path: root.to_path_buf(),
        message: format!("the script directory cannot be resolved: {e}"),
    })?;
    let not_in_root = || ScriptError::NotInRoot {
        path: path.to_path_buf(),
    };
    let resolved = root.join(path).canonicalize().map_err(|_| not_in_root())?;
    if !resolved.starts_with(&root) {
        return Err(not_in_root());
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn parses_every_prefix_and_names_bad_ones() {
        assert_eq!(
            ModelSpec::parse("anthropic:claude-sonnet-4-5"),
            Ok(ModelSpec::Anthropic {
                model: "claude-sonnet-4-5".into()
            })
        );
        assert_eq!(
            ModelSpec::parse("openai-chat:Qwen/Qwen2.5-VL-7B-Instruct").map(|s| s.provider()),
            Ok("openai-chat")
        );
        assert_eq!(
            ModelSpec::parse("script:examples/draw-red-triangle.json"),
            Ok(ModelSpec::Script {
                path: "examples/draw-red-triangle.json".into()
            })
        );
        assert_eq!(ModelSpec::parse(" "), Err(SpecError::Empty));
        assert_eq!(
            ModelSpec::parse("gemini:pro"),
            Err(SpecError::UnknownPrefix {
                prefix: "gemini".into()
            })
        );
        assert!(matches!(
            ModelSpec::parse("gpt-4o"),
            Err(SpecError::NoPrefix(_))
        ));
        assert!(matches!(
            ModelSpec::parse("openai:"),
            Err(SpecError::MissingName(_))
        ));
        let message = ModelSpec::parse("gemini:pro")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(message.contains("\"gemini\""), "{message}");
    }

    fn options(pairs: &[(&str, &str)]) -> ModelOptions {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ModelOptions::from_lookup(&move |name| map.get(name).cloned())
    }

    #[test]
    fn missing_keys_and_urls_are_named_before_a_run() {
        let none = options(&[]);
        let error = build_model(
            &ModelSpec::parse("anthropic:claude-opus-4-5")
                .unwrap_or(ModelSpec::Anthropic { model: "x".into() }),
            &none,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("ANTHROPIC_API_KEY"), "{error}");
        let error = build_model(
            &ModelSpec::OpenAi {
                model: "computer-use-preview".into(),
            },
            &none,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("OPENAI_API_KEY"), "{error}");
        let error = build_model(
            &ModelSpec::OpenAiChat {
                model: "qwen".into(),
            },
            &none,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("OPENAI_CHAT_BASE_URL"), "{error}");
        // A broken key file of another provider does not matter.
        let chat = options(&[
            ("OPENAI_CHAT_BASE_URL", "http://127.0.0.1:9/v1"),
            ("ANTHROPIC_API_KEY_FILE", "/nonexistent"),
        ]);
        assert!(
            build_model(
                &ModelSpec::OpenAiChat {
                    model: "qwen".into()
                },
                &chat
            )
            .is_ok()
        );
        let error = build_model(&ModelSpec::Anthropic { model: "c".into() }, &chat)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("ANTHROPIC_API_KEY_FILE"), "{error}");
        assert!(!error.contains("sk-"), "{error}");
    }

    #[test]
    fn script_paths_stay_under_the_root() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(
            dir.path().join("ok.json"),
            r#"[{"action": "FINAL", "answer": "done"}]"#,
        )?;
        let mut opts = ModelOptions {
            script_root: Some(dir.path().to_path_buf()),
            ..ModelOptions::default()
        };
        assert!(
            build_model(
                &ModelSpec::Script {
                    path: "ok.json".into()
                },
                &opts
            )
            .is_ok()
        );
        let outside = build_model(
            &ModelSpec::Script {
                path: "../../etc/passwd".into(),
            },
            &opts,
        );
        assert!(outside.is_err());
        // Issue 28: outside the root, a file that exists and one that does not get one answer.
        let message = |path: &str| {
            build_model(&ModelSpec::Script { path: path.into() }, &opts)
                .err()
                .map(|e| e.to_string().replace(path, "<path>"))
                .unwrap_or_default()
        };
        let elsewhere = tempfile::tempdir()?;
        let existing = elsewhere.path().join("elsewhere.json");
        std::fs::write(&existing, r#"[{"action": "FINAL", "answer": "x"}]"#)?;
        let name = elsewhere
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let absolute = existing.to_string_lossy().into_owned();
        assert!(
            message(&absolute).contains("no such script"),
            "{}",
            message(&absolute)
        );
        assert_eq!(message(&absolute), message("/nonexistent/elsewhere.json"));
        let relative = format!("../{name}/elsewhere.json");
        assert_eq!(message(&relative), message("../nonexistent/elsewhere.json"));
        assert_eq!(message("missing.json"), message(&relative));
        opts.script_root = None;
        let missing = build_model(
            &ModelSpec::Script {
                path: "/nonexistent.json".into(),
            },
            &opts,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(missing.contains("/nonexistent.json"), "{missing}");
        Ok(())
    }
}
