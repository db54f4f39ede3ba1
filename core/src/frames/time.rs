//! UTC timestamps for frames and receipts, computed from host-supplied wall-clock milliseconds
//! (the core reads no clock).

use crate::calendar::{civil_from_days, days_from_civil};

use crate::Wall;

/// RFC 3339 UTC text with millisecond precision, e.g. `2026-09-19T17:58:34.261Z`.
pub fn rfc3339(at: Wall) -> String {
    let ms = at.as_ms();
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

/// Parses the text [`rfc3339`] writes (and any `...Z` / `+00:00` RFC 3339 UTC timestamp with
/// optional fraction) back to milliseconds.
pub fn parse_rfc3339(s: &str) -> Option<Wall> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let mut rest = &s[19..];
    let mut frac_ms = 0i64;
    if let Some(f) = rest.strip_prefix('.') {
        let digits: String = f.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            return None;
        }
        let padded = format!("{digits:0<3}");
        frac_ms = padded[..3].parse().ok()?;
        rest = &f[digits.len()..];
    }
    if !(rest == "Z" || rest == "z" || rest == "+00:00") {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    let t = ((days * 86_400 + h * 3600 + mi * 60 + se) * 1000) + frac_ms;
    u64::try_from(t).ok().map(Wall::from_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_known_instants() {
        let w = Wall::from_ms;
        assert_eq!(rfc3339(w(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(w(1_789_840_714_261)), "2026-09-19T17:58:34.261Z");
        assert_eq!(rfc3339(w(951_782_400_000)), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            parse_rfc3339("2026-09-19T17:58:34.261692Z"),
            Some(w(1_789_840_714_261))
        );
        for ms in [0, 1, 86_399_999, 951_782_400_000, 4_102_444_800_123] {
            assert_eq!(parse_rfc3339(&rfc3339(w(ms))), Some(w(ms)));
        }
        assert_eq!(parse_rfc3339("2026-09-19 17:58:34Z"), None);
    }
}
