//! Durations as people write them on a command line: `90s`, `30m`, `6h`,
//! `2d`, `1h30m`, or a bare number of seconds.

use std::time::Duration;

/// Parses `text`; `None` for anything else (no zero or negative, no
/// overflow, no garbage taken as zero).
pub fn parse(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|d| !d.is_zero());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(Duration::try_from_secs_f64(n * unit).ok()?)?;
    }
    Some(total).filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn the_forms_people_write() {
        assert_eq!(parse("6h"), Some(Duration::from_secs(6 * 3600)));
        assert_eq!(parse("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse("2d"), Some(Duration::from_secs(172_800)));
        for bad in ["", "0", "0s", "-5", "h", "5x", "nan", "1e400"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
