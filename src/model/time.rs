//! Timestamps: integer milliseconds inside, ISO 8601 (RFC 3339, UTC) on the wire.
//!
//! The core never reads a clock; callers pass a [`Timestamp`] in. This module
//! only converts between the integer form and the text form.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds since the Unix epoch, UTC.
///
/// Serialized as `2025-11-25T10:30:00Z`, with a `.mmm` fraction only when the
/// millisecond part is not zero, so timestamps read from the spec's examples
/// round-trip to the same text.
///
/// # Examples
///
/// ```
/// use subtask::model::Timestamp;
/// let t: Timestamp = "2025-11-25T10:30:00Z".parse().unwrap();
/// assert_eq!(t.to_string(), "2025-11-25T10:30:00Z");
/// assert_eq!(Timestamp::from_millis(t.as_millis() + 5).to_string(), "2025-11-25T10:30:00.005Z");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// A timestamp `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// This timestamp plus `ms` milliseconds, saturating.
    #[must_use]
    pub const fn saturating_add(self, ms: u64) -> Self {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn millis_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The current wall-clock time. Only shells call this; the core is given time.
    pub fn now() -> Self {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(d.as_millis() as u64)
    }
}

// Howard Hinnant's civil-from-days / days-from-civil algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

impl Timestamp {
    /// The wire text written into `buf` without the formatting machinery
    /// (every answer carries two timestamps); `None` for years past 9999,
    /// which `Display` writes.
    fn write_short(self, buf: &mut [u8; 24]) -> Option<&str> {
        let ms = (self.0 % 1000) as u32;
        let secs = (self.0 / 1000) as i64;
        let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
        if !(0..=9999).contains(&y) {
            return None;
        }
        let sod = secs.rem_euclid(86_400) as u32;
        let (h, mi, s) = (sod / 3600, (sod % 3600) / 60, sod % 60);
        let y = y as u32;
        let two = |b: &mut [u8], v: u32| {
            b[0] = b'0' + (v / 10) as u8;
            b[1] = b'0' + (v % 10) as u8;
        };
        two(&mut buf[0..2], y / 100);
        two(&mut buf[2..4], y % 100);
        buf[4] = b'-';
        two(&mut buf[5..7], mo);
        buf[7] = b'-';
        two(&mut buf[8..10], d);
        buf[10] = b'T';
        two(&mut buf[11..13], h);
        buf[13] = b':';
        two(&mut buf[14..16], mi);
        buf[16] = b':';
        two(&mut buf[17..19], s);
        let mut end = 19;
        if ms != 0 {
            buf[19] = b'.';
            buf[20] = b'0' + (ms / 100) as u8;
            two(&mut buf[21..23], ms % 100);
            end = 23;
        }
        buf[end] = b'Z';
        std::str::from_utf8(&buf[..=end]).ok()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = self.write_short(&mut [0; 24]) {
            return f.write_str(s);
        }
        let ms = self.0 % 1000;
        let secs = (self.0 / 1000) as i64;
        let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
        let sod = secs.rem_euclid(86_400);
        let (h, mi, s) = (sod / 3600, (sod % 3600) / 60, sod % 60);
        write!(f, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}")?;
        if ms != 0 {
            write!(f, ".{ms:03}")?;
        }
        f.write_str("Z")
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

/// Error returned for text that is not an RFC 3339 timestamp at or after 1970.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseTimestampError(&'static str);

impl fmt::Display for ParseTimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid ISO 8601 timestamp: {}", self.0)
    }
}

impl std::error::Error for ParseTimestampError {}

impl FromStr for Timestamp {
    type Err = ParseTimestampError;

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`. Fractions finer
    /// than a millisecond are truncated.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b = s.as_bytes();
        let num = |range: std::ops::Range<usize>, what: &'static str| -> Result<u32, ParseTimestampError> {
            let part = b.get(range).ok_or(ParseTimestampError(what))?;
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
                return Err(ParseTimestampError(what));
            }
            Ok(part.iter().fold(0u32, |acc, c| acc * 10 + u32::from(c - b'0')))
        };
        let expect = |i: usize, c: &[u8], what: &'static str| -> Result<(), ParseTimestampError> {
            match b.get(i) {
                Some(x) if c.contains(x) => Ok(()),
                _ => Err(ParseTimestampError(what)),
            }
        };
        let year = num(0..4, "year")? as i64;
        expect(4, b"-", "expected '-' after year")?;
        let month = num(5..7, "month")?;
        expect(7, b"-", "expected '-' after month")?;
        let day = num(8..10, "day")?;
        expect(10, b"Tt ", "expected 'T' between date and time")?;
        let hour = num(11..13, "hour")?;
        expect(13, b":", "expected ':' after hour")?;
        let minute = num(14..16, "minute")?;
        expect(16, b":", "expected ':' after minute")?;
        let second = num(17..19, "second")?;
        if !(1..=12).contains(&month) {
            return Err(ParseTimestampError("month out of range"));
        }
        if day == 0 || day > days_in_month(year, month) {
            return Err(ParseTimestampError("day out of range"));
        }
        if hour > 23 || minute > 59 || second > 60 {
            return Err(ParseTimestampError("time of day out of range"));
        }
        let mut i = 19;
        let mut millis = 0u64;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                if i - start < 3 {
                    millis = millis * 10 + u64::from(b[i] - b'0');
                }
                i += 1;
            }
            if i == start {
                return Err(ParseTimestampError("empty fraction"));
            }
            for _ in (i - start)..3 {
                millis *= 10;
            }
        }
        let offset_secs: i64 = match b.get(i) {
            Some(b'Z' | b'z') if i + 1 == b.len() => 0,
            Some(sign @ (b'+' | b'-')) if i + 6 == b.len() => {
                let oh = num(i + 1..i + 3, "offset hour")? as i64;
                expect(i + 3, b":", "expected ':' in offset")?;
                let om = num(i + 4..i + 6, "offset minute")? as i64;
                if oh > 23 || om > 59 {
                    return Err(ParseTimestampError("offset out of range"));
                }
                let off = oh * 3600 + om * 60;
                if *sign == b'+' { off } else { -off }
            }
            _ => return Err(ParseTimestampError("expected 'Z' or a ±HH:MM offset at the end")),
        };
        let days = days_from_civil(year, month, day);
        let secs =
            days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second.min(59))
                - offset_secs;
        if secs < 0 {
            return Err(ParseTimestampError("before 1970"));
        }
        Ok(Timestamp(secs as u64 * 1000 + millis))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.write_short(&mut [0; 24]) {
            Some(s) => serializer.serialize_str(s),
            None => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an ISO 8601 timestamp string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
                v.parse().map_err(|e| E::custom(format_args!("{e} in {v:?}")))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_round_trips() {
        let t: Timestamp = "2025-11-25T10:30:00Z".parse().unwrap();
        assert_eq!(t.as_millis(), 1_764_066_600_000);
        assert_eq!(t.to_string(), "2025-11-25T10:30:00Z");
    }

    #[test]
    fn fractions_and_offsets() {
        let t: Timestamp = "2025-11-25T12:30:00.5+02:00".parse().unwrap();
        assert_eq!(t.to_string(), "2025-11-25T10:30:00.500Z");
        let t: Timestamp = "2025-11-25T10:30:00.123456Z".parse().unwrap();
        assert_eq!(t.as_millis() % 1000, 123);
    }

    #[test]
    fn every_day_formats_and_parses_back() {
        let mut ms = 0u64;
        while ms < 200 * 365 * 86_400_000 {
            let t = Timestamp::from_millis(ms);
            assert_eq!(t.to_string().parse::<Timestamp>().unwrap(), t);
            ms += 86_400_000 * 7 + 3_600_123;
        }
    }

    #[test]
    fn the_short_form_is_the_formatted_form() {
        let long = |t: Timestamp| {
            let ms = t.0 % 1000;
            let secs = (t.0 / 1000) as i64;
            let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
            let sod = secs.rem_euclid(86_400);
            let (h, mi, s) = (sod / 3600, (sod % 3600) / 60, sod % 60);
            let frac = if ms != 0 {
                format!(".{ms:03}")
            } else {
                String::new()
            };
            format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}Z")
        };
        let mut ms = 0u64;
        while ms < 10_000 * 366 * 86_400_000 {
            let t = Timestamp::from_millis(ms);
            assert_eq!(t.to_string(), long(t));
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{}\"", long(t)));
            ms += 86_400_000 * 97 + 3_600_123 + ms % 7_919;
        }
        // Past year 9999 the formatted path writes the wider year.
        let far = Timestamp::from_millis(253_402_300_800_000 + 1);
        assert_eq!(far.to_string(), "10000-01-01T00:00:00.001Z");
        assert_eq!(
            serde_json::to_string(&far).unwrap(),
            "\"10000-01-01T00:00:00.001Z\""
        );
        for t in [
            Timestamp::EPOCH,
            Timestamp::from_millis(999),
            Timestamp::from_millis(253_402_300_799_999),
        ] {
            assert_eq!(t.to_string(), long(t));
        }
    }

    #[test]
    fn malformed_timestamps_give_reasons() {
        for bad in [
            "",
            "2025-11-25",
            "2025-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2025-11-25T24:00:00Z",
            "2025-11-25T10:30:00",
            "2025-11-25T10:30:00.Z",
            "1969-12-31T23:59:59Z",
            "2025-11-25T10:30:00Zjunk",
            "２025-11-25T10:30:00Z",
        ] {
            let err = bad.parse::<Timestamp>().unwrap_err();
            assert!(
                err.to_string().starts_with("invalid ISO 8601 timestamp"),
                "{bad}: {err}"
            );
        }
        assert!("2024-02-29T00:00:00Z".parse::<Timestamp>().is_ok());
    }
}
