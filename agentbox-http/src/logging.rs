//! Structured logs through `tracing`: JSON lines in production (with the fields of the current
//! span: request id, sandbox id, run id), plain text for people.

use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LogFormat {
    #[default]
    Json,
    Text,
}

/// A log format name that is neither `json` nor `text`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown log format {0:?}: expected json or text")]
pub struct UnknownLogFormat(pub String);

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "json" => Ok(Self::Json),
            "text" => Ok(Self::Text),
            other => Err(UnknownLogFormat(other.to_owned())),
        }
    }
}

/// Installs the global subscriber, writing to stderr. The filter comes from `RUST_LOG`, else
/// `default_filter` (for example `info,sqlx=warn`). A second call changes nothing and says so.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if let Err(error) = result {
        eprintln!("logging already initialised: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse_by_name() {
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!(
            "yaml".parse::<LogFormat>(),
            Err(UnknownLogFormat("yaml".into()))
        );
    }
}
