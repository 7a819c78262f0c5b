//! [`RunBackend`]: what drives a run, read from its `model` field. A computer-use model drives
//! a sandbox's desktop through the `agent` crate's loop; the conformance executor answers
//! deterministically without a sandbox (a testing aid for A2A conformance kits, off unless the
//! server enables it); a remote A2A agent (`a2a:<card URL>`) is handed the task.

use std::fmt;

use agent::ModelSpec;

use super::RunSettings;
use crate::validate::{Invalid, invalid};

/// The `model` value that selects the conformance executor.
pub const CONFORMANCE: &str = "conformance";

/// What drives a run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunBackend {
    /// A model driving a sandbox (`anthropic:...`, `openai:...`, `script:...`).
    Computer(ModelSpec),
    /// The deterministic A2A conformance executor ([`super::conformance`]).
    Conformance,
    /// A remote A2A agent, by its card's URL ([`super::remote`]).
    Remote(reqwest::Url),
}

impl RunBackend {
    /// The backend a run's `model` names, if this server offers it.
    pub fn parse(model: &str, settings: &RunSettings) -> Result<Self, Invalid> {
        if model.trim() == CONFORMANCE {
            return if settings.conformance {
                Ok(Self::Conformance)
            } else {
                Err(invalid(
                    "model",
                    "the conformance executor is off on this server (serve --a2a-conformance)",
                ))
            };
        }
        if let Some(card_url) = super::remote::parse_model(model) {
            return card_url
                .map(Self::Remote)
                .map_err(|message| invalid("model", message));
        }
        ModelSpec::parse(model)
            .map(Self::Computer)
            .map_err(|e| invalid("model", e.to_string()))
    }

    /// Whether it drives a sandbox (and so takes one).
    pub fn needs_sandbox(&self) -> bool {
        matches!(self, Self::Computer(_))
    }
}

impl fmt::Display for RunBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Computer(spec) => spec.fmt(f),
            Self::Conformance => f.write_str(CONFORMANCE),
            Self::Remote(card_url) => write!(f, "{}{card_url}", super::remote::PREFIX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conformance_executor_is_offered_only_when_enabled() {
        let off = RunSettings::default();
        let refused = RunBackend::parse("conformance", &off).unwrap_err();
        assert_eq!(refused.field, "model");
        let on = RunSettings {
            conformance: true,
            ..RunSettings::default()
        };
        assert_eq!(
            RunBackend::parse("conformance", &on).unwrap(),
            RunBackend::Conformance
        );
        let computer = RunBackend::parse("script:/tmp/x.json", &on).unwrap();
        assert!(computer.needs_sandbox());
        assert_eq!(computer.to_string(), "script:/tmp/x.json");
        assert!(RunBackend::parse("nonsense", &on).is_err());
    }
}
