//! Byte sizes written the way people and ripgrep write them: `1048576`, `500K`, `1M`, `2G`,
//! `10MiB` (binary multiples; case-insensitive).

/// Parses a size such as `1M` into bytes. `None` when the text is not a size or overflows.
pub fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let number: u64 = digits.parse().ok()?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_byte_size("0"), Some(0));
        assert_eq!(parse_byte_size("1024"), Some(1024));
        assert_eq!(parse_byte_size("500K"), Some(500 * 1024));
        assert_eq!(parse_byte_size("1M"), Some(1 << 20));
        assert_eq!(parse_byte_size("1m"), Some(1 << 20));
        assert_eq!(parse_byte_size("10MiB"), Some(10 << 20));
        assert_eq!(parse_byte_size(" 2G "), Some(2 << 30));
        assert_eq!(parse_byte_size("M"), None);
        assert_eq!(parse_byte_size("1.5M"), None);
        assert_eq!(parse_byte_size("-1"), None);
        assert_eq!(parse_byte_size("1X"), None);
        assert_eq!(parse_byte_size("99999999999999999999"), None);
        assert_eq!(parse_byte_size("99999999999T"), None);
    }
}
