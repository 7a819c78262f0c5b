//! When to try a model call again and how long to wait: exponential back-off with jitter,
//! never shorter than what the provider asked for in `retry-after` / `retry-after-ms`.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

/// Retry settings of a model gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    /// The back-off before the second attempt; doubled for each further one.
    pub base_delay: Duration,
    /// The longest back-off chosen by the policy itself.
    pub max_delay: Duration,
    /// The longest wait a `retry-after` may ask for; asking for more ends the retries.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The back-off before attempt `attempt + 1` (`attempt` counts from 1): half of the
    /// exponential delay plus a random part of the other half ("equal jitter"), so concurrent
    /// clients spread out but never retry at once.
    pub fn backoff(&self, attempt: u32, rng: &mut fastrand::Rng) -> Duration {
        let exponent = attempt.saturating_sub(1).min(20);
        let full = self
            .base_delay
            .saturating_mul(1u32 << exponent)
            .min(self.max_delay);
        let half = full / 2;
        let jitter_ms = rng.u64(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }

    /// The wait before the next attempt: the back-off, or `retry_after` if longer. `None` when
    /// `retry_after` is beyond [`RetryPolicy::max_retry_after`] (give up now).
    pub fn delay(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        rng: &mut fastrand::Rng,
    ) -> Option<Duration> {
        let backoff = self.backoff(attempt, rng);
        match retry_after {
            Some(asked) if asked > self.max_retry_after => None,
            Some(asked) => Some(asked.max(backoff)),
            None => Some(backoff),
        }
    }
}

/// What the provider asked for: `retry-after-ms` (milliseconds, OpenAI), else `retry-after` in
/// seconds or as an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // `try_from` refuses NaN, negative and overflowing values; a huge wait is "forever".
    let seconds = |value: f64| {
        (value >= 0.0).then(|| Duration::try_from_secs_f64(value).unwrap_or(Duration::MAX))
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && !ms.is_nan()
    {
        return seconds(ms / 1000.0);
    }
    let value = text("retry-after")?;
    if let Ok(value) = value.parse::<f64>() {
        return if value.is_nan() { None } else { seconds(value) };
    }
    let when = parse_http_date(value)?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form HTTP/1.1 senders must use.
fn parse_http_date(value: &str) -> Option<SystemTime> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    if parts.len() != 6 || parts[5] != "GMT" {
        return None;
    }
    let day: u64 = parts[1].parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == parts[2])? as u64
        + 1;
    let year: u64 = parts[3].parse().ok()?;
    let time: Vec<u64> = parts[4]
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    if time.len() != 3
        || time[0] > 23
        || time[1] > 59
        || time[2] > 60
        || !(1..=31).contains(&day)
        || !(1970..=9999).contains(&year)
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + time[0] * 3600 + time[1] * 60 + time[2];
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let m = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let policy = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(7);
        for attempt in 1..=10 {
            let full = policy
                .base_delay
                .saturating_mul(1 << (attempt - 1))
                .min(policy.max_delay);
            for _ in 0..50 {
                let d = policy.backoff(attempt, &mut rng);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
        let spread: std::collections::HashSet<_> =
            (0..20).map(|_| policy.backoff(3, &mut rng)).collect();
        assert!(spread.len() > 1, "jitter varies the delay");
    }

    #[test]
    fn retry_after_wins_when_longer_and_gives_up_when_too_long() {
        let policy = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(10)), &mut rng),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(3600)), &mut rng),
            None
        );
        assert!(policy.delay(1, None, &mut rng).is_some());
    }

    #[test]
    fn parses_every_retry_after_form() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(150)));

        let mut dated = HeaderMap::new();
        dated.insert(
            "retry-after",
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after(&dated), Some(Duration::ZERO));
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777))
        );

        assert_eq!(
            parse_http_date("Sun, 06 Nov 99999999999999 08:49:37 GMT"),
            None
        );
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 99:49:37 GMT"), None);
        let mut junk = HeaderMap::new();
        junk.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&junk), None);
        junk.insert("retry-after", HeaderValue::from_static("-5"));
        assert_eq!(retry_after(&junk), None);
        junk.insert("retry-after", HeaderValue::from_static("1e300"));
        assert_eq!(retry_after(&junk), Some(Duration::MAX));
        junk.insert("retry-after-ms", HeaderValue::from_static("NaN"));
        assert_eq!(retry_after(&junk), Some(Duration::MAX));
    }
}
