//! What every part of the document parses alike: durations, and the core's messages reworded
//! for a policy field.

use std::time::Duration;

use rl_core::parse::parse_duration;

use super::{invalid, PolicyError};

/// A duration exactly as the module parses it, so a policy unit means what a command unit means.
pub(super) fn duration(
    path: &str,
    text: &str,
    max_us: u64,
    max_text: &'static str,
) -> Result<Duration, PolicyError> {
    parse_duration(text.as_bytes(), "duration", max_us, max_text)
        .map(Duration::from_micros)
        .map_err(|e| invalid(path, core_message(&e)))
}

/// The core's error text without its `ERR <arg> ` prefix, which names a command argument
/// rather than the policy field the path already names.
pub(super) fn core_message(e: &rl_core::error::Error) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("ERR ").unwrap_or(&text);
    for arg in ["duration ", "limit ", "period ", "BURST ", "COST "] {
        if let Some(rest) = text.strip_prefix(arg) {
            return rest.to_string();
        }
    }
    text.to_string()
}
