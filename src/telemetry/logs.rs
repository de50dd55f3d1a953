//! Log lines: human-readable text for a terminal, or one JSON object per line for a log
//! pipeline. Either way each line carries its spans' fields, so the `request_id` of the HTTP
//! request that placed an order is on every line that order causes (see `http::request_span`).

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber, writing to stderr (stdout carries the listening line that
/// scripts read). `RUST_LOG` filters, `info` by default.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        // The span list puts the request's id (and the order's) on each line, flat enough
        // for `jq 'select(.spans[]?.request_id == "…")'`.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .init(),
    }
}
