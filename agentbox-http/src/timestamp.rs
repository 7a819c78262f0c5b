//! Timestamps on the wire: both servers write every instant the same way, RFC 3339 in UTC with
//! milliseconds (`2026-12-01T06:07:43.512Z`), so a client parses one format.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An instant as RFC 3339, UTC, with milliseconds.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// A timestamp in milliseconds since the Unix epoch (as the orchestrator stores them) as RFC
/// 3339, UTC, with milliseconds; an instant before the epoch is written as the epoch.
pub fn rfc3339_from_unix_ms(ms: i64) -> String {
    let since_epoch = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    rfc3339(UNIX_EPOCH + since_epoch)
}

/// Milliseconds since the Unix epoch of an RFC 3339 timestamp in UTC (`Z`), as written by
/// [`rfc3339`] or with any fraction; `None` for anything else (offsets included).
pub fn unix_ms_from_rfc3339(text: &str) -> Option<i64> {
    let time = humantime::parse_rfc3339(text.trim()).ok()?;
    let since_epoch = time.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps_are_read_back_to_milliseconds() {
        assert_eq!(
            unix_ms_from_rfc3339("1970-01-01T00:00:01.500Z"),
            Some(1_500)
        );
        assert_eq!(
            unix_ms_from_rfc3339(&rfc3339_from_unix_ms(1_764_569_263_512)),
            Some(1_764_569_263_512)
        );
        assert_eq!(
            unix_ms_from_rfc3339("2026-12-06T20:00:00Z"),
            Some(1_796_587_200_000)
        );
        for bad in ["yesterday", "2026-12-06", "2026-12-06T20:00:00+01:00", ""] {
            assert_eq!(unix_ms_from_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn instants_are_written_in_utc_with_milliseconds() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_micros(1_764_569_263_512_999)),
            "2025-12-01T06:07:43.512Z"
        );
        assert_eq!(rfc3339_from_unix_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_from_unix_ms(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(rfc3339_from_unix_ms(-5), "1970-01-01T00:00:00.000Z");
    }
}
