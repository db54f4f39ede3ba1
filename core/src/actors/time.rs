//! Timestamps on disk: written as RFC 3339 UTC with milliseconds; read in that form and in the
//! ISO 8601 basic form dev-centr/harness writes (`20261129T182011.805628Z`).

use crate::Wall;
use crate::calendar::{civil_from_days, days_from_civil};

/// Formats Unix-epoch milliseconds as `2026-11-29T18:20:11.805Z`.
pub fn format_rfc3339(at: Wall) -> String {
    let ms = at.as_ms();
    let secs = ms / 1000;
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Parses a timestamp into Unix-epoch milliseconds (fractions beyond milliseconds are
/// truncated). Accepts `YYYY-MM-DDTHH:MM:SS[.f+](Z|±HH:MM)` and `YYYYMMDDTHHMMSS[.f+](Z|±HH:MM)`.
/// Returns `None` for anything else (callers keep the original string).
pub fn parse_timestamp(s: &str) -> Option<Wall> {
    let b = s.as_bytes();
    let t = s.find('T')?;
    let (date, rest) = (&s[..t], &s[t + 1..]);
    let date: String = date.chars().filter(|c| *c != '-').collect();
    if date.len() != 8 || !date.bytes().all(|c| c.is_ascii_digit()) || b.len() < t + 7 {
        return None;
    }
    let y: i64 = date[0..4].parse().ok()?;
    let mo: u32 = date[4..6].parse().ok()?;
    let d: u32 = date[6..8].parse().ok()?;
    // Time: digits with optional ':' separators, then fraction, then zone.
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(zone_at);
    let (hms, frac) = match clock.find('.') {
        Some(i) => (&clock[..i], &clock[i + 1..]),
        None => (clock, ""),
    };
    let hms: String = hms.chars().filter(|c| *c != ':').collect();
    if hms.len() != 6 || !hms.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (h, mi, sec): (i64, i64, i64) = (
        hms[0..2].parse().ok()?,
        hms[2..4].parse().ok()?,
        hms[4..6].parse().ok()?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut millis: i64 = 0;
    for (i, c) in frac.bytes().take(3).enumerate() {
        millis += i64::from(c - b'0') * [100, 10, 1][i];
    }
    let offset_min: i64 = match zone {
        "Z" | "z" | "" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
            if digits.len() != 4 || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            sign * (digits[0..2].parse::<i64>().ok()? * 60 + digits[2..4].parse::<i64>().ok()?)
        }
    };
    let days = days_from_civil(y, i64::from(mo), i64::from(d));
    let total = ((days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60) * 1000) + millis;
    u64::try_from(total).ok().map(Wall::from_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_timestamp_forms_parse_to_the_same_instant() {
        let basic = parse_timestamp("20261129T182011.805628Z").unwrap();
        let ext = parse_timestamp("2026-11-29T18:20:11.805Z").unwrap();
        assert_eq!(basic, ext);
        assert_eq!(format_rfc3339(ext), "2026-11-29T18:20:11.805Z");
        assert_eq!(parse_timestamp("2026-11-29T19:20:11.805+01:00"), Some(ext));
        assert_eq!(parse_timestamp("20261129T182011Z"), Some(ext - 805));
        assert_eq!(format_rfc3339(Wall::ZERO), "1970-01-01T00:00:00.000Z");
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(Wall::ZERO));
        for bad in [
            "",
            "yesterday",
            "2026-13-01T00:00:00Z",
            "20261129T1820Z",
            "2026-11-29T18:20:11.x1Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn formatting_round_trips_across_leap_years() {
        for ms in [
            951_782_400_000u64,
            1_709_164_800_123,
            4_102_444_799_999,
            1_798_568_411_805,
        ] {
            let at = Wall::from_ms(ms);
            assert_eq!(parse_timestamp(&format_rfc3339(at)), Some(at), "{ms}");
        }
    }
}
