//! Structured logs through `tracing`: JSON lines in production, plain text for people.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. The filter comes from `RUST_LOG` (default `info`, with
/// chromiumoxide's per-message protocol warnings silenced).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,chromiumoxide=error"));
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
        eprintln!("sandboxd: logging already initialised: {error}");
    }
}
