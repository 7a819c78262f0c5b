//! Field checks shared by the handlers, each defined once. A refusal is a 422 ([`ApiError`])
//! whose `loc` names the field and whose message says what the field accepts and what it got.
//!
//! Names (formats, buttons, `wait_until`...) are not checked here: they are enums of the wire
//! types (`sandbox-client`'s `name_enum!`), refused by the body extractor.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use super::error::ApiError;

/// What a field in seconds accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SecondsRange {
    /// The smallest value, or the bound every value must be above.
    pub min: f64,
    /// Whether `min` itself is accepted.
    pub min_included: bool,
    /// The largest value (accepted); finite.
    pub max: f64,
}

impl SecondsRange {
    /// From `min` to `max`, both accepted.
    pub const fn from_to(min: f64, max: f64) -> Self {
        Self {
            min,
            min_included: true,
            max,
        }
    }

    /// Above `min` (not accepted), at most `max`.
    pub const fn above(min: f64, max: f64) -> Self {
        Self {
            min,
            min_included: false,
            max,
        }
    }

    fn contains(&self, value: f64) -> bool {
        let above_min = if self.min_included {
            value >= self.min
        } else {
            value > self.min
        };
        value.is_finite() && above_min && value <= self.max
    }

    fn describe(&self) -> String {
        let (min, max) = (self.min, self.max);
        if self.min_included {
            format!("from {min} to {max}")
        } else {
            format!("above {min} and at most {max}")
        }
    }
}

/// A duration field in seconds, within `range`.
pub fn seconds(field: &str, value: f64, range: SecondsRange) -> Result<Duration, ApiError> {
    if !range.contains(value) || value < 0.0 {
        return Err(ApiError::invalid(
            field,
            format!(
                "`{field}` is in seconds and must be {}, got {value}",
                range.describe()
            ),
        ));
    }
    // Finite, not negative (`abs` turns -0 into 0) and at most `range.max`:
    // `from_secs_f64` cannot panic.
    Ok(Duration::from_secs_f64(value.abs()))
}

/// An optional duration field in seconds: absent stays absent, present must be within `range`.
pub fn optional_seconds(
    field: &str,
    value: Option<f64>,
    range: SecondsRange,
) -> Result<Option<Duration>, ApiError> {
    value.map(|v| seconds(field, v, range)).transpose()
}

/// A number within `range` (both ends accepted; an infinite end is no bound). `what` says what
/// the number is (`"a coordinate in CSS pixels"`).
pub fn number(
    field: &str,
    value: f64,
    range: RangeInclusive<f64>,
    what: &str,
) -> Result<f64, ApiError> {
    if value.is_finite() && range.contains(&value) {
        return Ok(value);
    }
    let (min, max) = (*range.start(), *range.end());
    let accepted = match (min.is_finite(), max.is_finite()) {
        (true, true) => format!("from {min} to {max}"),
        (true, false) => format!("at least {min}"),
        (false, true) => format!("at most {max}"),
        (false, false) => "finite".to_string(),
    };
    Err(ApiError::invalid(
        field,
        format!("`{field}` must be {what}, {accepted}, got {value}"),
    ))
}

/// A whole number within `range` that may arrive as a float (`1.0`); `default` when absent.
pub fn whole_number(
    field: &str,
    value: Option<f64>,
    default: i64,
    range: RangeInclusive<i64>,
) -> Result<i64, ApiError> {
    let Some(value) = value else {
        return Ok(default);
    };
    let (min, max) = (*range.start(), *range.end());
    if value.fract() != 0.0 || !(min as f64..=max as f64).contains(&value) {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must be a whole number from {min} to {max}, got {value}"),
        ));
    }
    // Whole and within an `i64` range: the conversion is exact.
    Ok(value as i64)
}

/// A text field that must be present and hold more than whitespace; trimmed.
pub fn required_text<'a>(field: &str, value: &'a Option<String>) -> Result<&'a str, ApiError> {
    match value.as_deref().map(str::trim) {
        Some(text) if !text.is_empty() => Ok(text),
        _ => Err(ApiError::invalid(field, format!("`{field}` is required"))),
    }
}

/// A text field that must hold more than whitespace.
pub fn not_blank(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not be empty"),
        ));
    }
    Ok(())
}

/// A text field of at most `limit` characters.
pub fn at_most_chars<'a>(field: &str, text: &'a str, limit: usize) -> Result<&'a str, ApiError> {
    if text.chars().count() > limit {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` is longer than {limit} characters"),
        ));
    }
    Ok(text)
}

/// A text field of at most `limit` bytes.
pub fn at_most_bytes<'a>(field: &str, text: &'a str, limit: usize) -> Result<&'a str, ApiError> {
    if text.len() > limit {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` is longer than {limit} bytes"),
        ));
    }
    Ok(text)
}

/// Text with no NUL character (what a program's source or a C string cannot hold).
pub fn no_nul(field: &str, text: &str) -> Result<(), ApiError> {
    if text.contains('\0') {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not contain NUL characters (write one as an escape, \\x00)"),
        ));
    }
    Ok(())
}

/// An absolute path with no NUL character.
pub fn absolute_path(field: &str, path: String) -> Result<PathBuf, ApiError> {
    if path.contains('\0') {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not contain NUL characters"),
        ));
    }
    let path = PathBuf::from(path);
    if !path.is_absolute() {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must be an absolute path, got {}", path.display()),
        ));
    }
    Ok(path)
}

/// A name chosen by the client (a session or terminal id): 1 to `max_chars` characters, no
/// control characters.
pub fn identifier(field: &str, id: String, max_chars: usize) -> Result<String, ApiError> {
    if id.is_empty() || id.chars().count() > max_chars {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must be 1 to {max_chars} characters long"),
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            format!("`{field}` must not contain control characters"),
        ));
    }
    Ok(id)
}

/// JPEG quality when a screenshot asks for none.
pub const DEFAULT_JPEG_QUALITY: u8 = 80;

/// The one rule for the `quality` query parameter of both screenshot routes (the desktop's and
/// the browser page's): when given, whatever the format, from 1 to 100; absent, 80.
pub fn jpeg_quality(quality: Option<i64>) -> Result<u8, ApiError> {
    let Some(quality) = quality else {
        return Ok(DEFAULT_JPEG_QUALITY);
    };
    u8::try_from(quality)
        .ok()
        .filter(|q| (1..=100).contains(q))
        .ok_or_else(|| {
            ApiError::invalid_at(
                vec!["query".into(), "quality".into()],
                format!("quality must be from 1 to 100, got {quality}"),
            )
        })
}

/// A query parameter bounding an image side (`max_width`, `max_height`): from 16 to
/// [`desktop::MAX_IMAGE_SIDE`] pixels when given.
pub fn image_side(name: &str, value: Option<u32>) -> Result<Option<u32>, ApiError> {
    match value {
        Some(side) if !(16..=desktop::MAX_IMAGE_SIDE).contains(&side) => Err(ApiError::invalid_at(
            vec!["query".into(), name.into()],
            format!(
                "{name} must be between 16 and {}, got {side}",
                desktop::MAX_IMAGE_SIDE
            ),
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(error: ApiError) -> Vec<String> {
        assert_eq!(error.status, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        error.loc.unwrap_or_default()
    }

    #[test]
    fn seconds_are_checked_against_their_range() {
        let browser = SecondsRange::from_to(0.001, 300.0);
        assert_eq!(
            seconds("timeout", 30.0, browser).ok(),
            Some(Duration::from_secs(30))
        );
        assert!(seconds("timeout", 0.001, browser).is_ok());
        // Positive but too small to be met: refused, not a certain 504.
        let error = seconds("timeout", 3.9e-140, browser).unwrap_err();
        assert!(
            error.message.contains("from 0.001 to 300"),
            "{}",
            error.message
        );
        assert_eq!(loc(error), ["body", "timeout"]);
        for bad in [0.0, 300.5, 30000.0, f64::NAN, f64::INFINITY, -1.0] {
            assert!(seconds("timeout", bad, browser).is_err(), "{bad}");
        }

        let positive = SecondsRange::above(0.0, 60.0);
        assert!(seconds("duration", 0.0, positive).is_err());
        assert!(seconds("duration", 1e-9, positive).is_ok());
        assert!(seconds("duration", 60.0, positive).is_ok());
        let error = seconds("duration", 61.0, positive).unwrap_err();
        assert_eq!(
            error.message,
            "`duration` is in seconds and must be above 0 and at most 60, got 61"
        );

        let from_zero = SecondsRange::from_to(0.0, 10.0);
        assert_eq!(
            seconds("seconds", 0.0, from_zero).ok(),
            Some(Duration::ZERO)
        );
        assert!(seconds("seconds", -0.5, from_zero).is_err());
        assert_eq!(
            seconds("seconds", -0.0, from_zero).ok(),
            Some(Duration::ZERO)
        );
        assert_eq!(
            optional_seconds("seconds", None, from_zero).ok(),
            Some(None)
        );
        assert_eq!(
            loc(optional_seconds("seconds", Some(-3.0), from_zero).unwrap_err()),
            ["body", "seconds"]
        );
    }

    #[test]
    fn numbers_say_what_they_accept() {
        assert_eq!(number("x", 5.0, 0.0..=10.0, "a coordinate").ok(), Some(5.0));
        let error = number("x", 11.0, 0.0..=10.0, "a coordinate").unwrap_err();
        assert_eq!(
            error.message,
            "`x` must be a coordinate, from 0 to 10, got 11"
        );
        let error = number("y", -1.0, 0.0..=f64::INFINITY, "a position").unwrap_err();
        assert_eq!(error.message, "`y` must be a position, at least 0, got -1");
        assert_eq!(loc(error), ["body", "y"]);
        assert!(number("y", f64::NAN, 0.0..=f64::INFINITY, "a position").is_err());
        assert!(number("y", 1e300, 0.0..=f64::INFINITY, "a position").is_ok());
    }

    #[test]
    fn whole_numbers_may_come_as_floats() {
        assert_eq!(whole_number("click_count", None, 1, 1..=3).ok(), Some(1));
        assert_eq!(
            whole_number("click_count", Some(2.0), 1, 1..=3).ok(),
            Some(2)
        );
        for bad in [1.5, 0.0, 4.0, f64::NAN, f64::INFINITY] {
            let error = whole_number("click_count", Some(bad), 1, 1..=3).unwrap_err();
            assert_eq!(loc(error), ["body", "click_count"], "{bad}");
        }
    }

    #[test]
    fn text_fields() {
        assert_eq!(
            required_text("selector", &Some(" #a ".into())).ok(),
            Some("#a")
        );
        for missing in [None, Some(String::new()), Some("  ".into())] {
            let error = required_text("selector", &missing).unwrap_err();
            assert_eq!(loc(error), ["body", "selector"]);
        }
        assert!(not_blank("url", "about:blank").is_ok());
        assert_eq!(loc(not_blank("url", " \n").unwrap_err()), ["body", "url"]);
        assert!(at_most_chars("text", "ééé", 3).is_ok());
        assert!(at_most_chars("text", "éééé", 3).is_err());
        assert!(at_most_bytes("input", "ééé", 3).is_err());
        assert!(at_most_bytes("input", "abc", 3).is_ok());
    }

    #[test]
    fn paths_and_identifiers() {
        assert_eq!(
            absolute_path("exec_dir", "/tmp".into()).ok(),
            Some(PathBuf::from("/tmp"))
        );
        for bad in ["tmp", "", "/a\0b"] {
            let error = absolute_path("exec_dir", bad.into()).unwrap_err();
            assert_eq!(loc(error), ["body", "exec_dir"], "{bad:?}");
        }
        assert_eq!(
            identifier("id", "a/b".into(), 4).ok().as_deref(),
            Some("a/b")
        );
        for bad in ["", "abcde", "a\nb"] {
            let error = identifier("id", bad.into(), 4).unwrap_err();
            assert_eq!(loc(error), ["body", "id"], "{bad:?}");
        }
    }

    #[test]
    fn jpeg_quality_is_1_to_100_and_80_by_default() {
        assert_eq!(jpeg_quality(None).ok(), Some(DEFAULT_JPEG_QUALITY));
        assert_eq!(jpeg_quality(Some(1)).ok(), Some(1));
        assert_eq!(jpeg_quality(Some(100)).ok(), Some(100));
        for bad in [0, 101, 256, 257, -1, i64::MAX] {
            let error = jpeg_quality(Some(bad)).expect_err("refused");
            assert!(
                error.message.ends_with(&format!("got {bad}")),
                "{}",
                error.message
            );
            assert_eq!(loc(error), ["query", "quality"]);
        }
    }

    #[test]
    fn image_sides_are_16_to_the_largest_image() {
        assert_eq!(image_side("max_width", None).ok(), Some(None));
        assert_eq!(image_side("max_width", Some(16)).ok(), Some(Some(16)));
        let error = image_side("max_height", Some(15)).unwrap_err();
        assert_eq!(loc(error), ["query", "max_height"]);
        assert!(image_side("max_width", Some(desktop::MAX_IMAGE_SIDE + 1)).is_err());
    }
}
