//! ISO-8601 durations (`PT2H`, `P1DT30M`, `PT0.5S`, `P2W`) for mission delays.
//!
//! Years and months are refused: their length depends on the calendar date, and a delay
//! must mean the same span whenever it starts.

use std::time::Duration;

/// Longest duration accepted (about 100 years), so arithmetic on instants cannot overflow.
const MAX_SECS: u64 = 100 * 366 * 24 * 3600;

/// Why a duration does not parse. One code: `invalid_duration`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an ISO-8601 duration such as PT2H or P1DT30M: {reason}")]
pub struct DurationError {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl DurationError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        "invalid_duration"
    }
}

/// Parse an ISO-8601 duration: `P[nW]` or `P[nD][T[nH][nM][n[.f]S]]`, components in that
/// order, at least one given, only the last one fractional (seconds to milliseconds).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let fail = |reason| DurationError { text: text.to_owned(), reason };
    let body = text.strip_prefix('P').ok_or_else(|| fail("it must start with P"))?;
    if body.is_empty() || body == "T" || body.ends_with('T') {
        return Err(fail("it has no components"));
    }
    let (date, time) = match body.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (body, None),
    };
    let mut millis: u128 = 0;
    let mut components = 0;
    let mut weeks = false;
    let parts = [
        (true, date, &[('W', 604_800u64), ('D', 86_400)][..]),
        (false, time.unwrap_or(""), &[('H', 3600), ('M', 60), ('S', 1)][..]),
    ];
    for (in_date, part, units) in parts {
        let mut rest = part;
        let mut allowed = units;
        while !rest.is_empty() {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(|| fail("a number lacks its unit"))?;
            let (number, tail) = rest.split_at(end);
            let unit = tail.chars().next().ok_or_else(|| fail("a number lacks its unit"))?;
            if unit == 'Y' || (unit == 'M' && in_date) {
                return Err(fail("years and months have no fixed length"));
            }
            let pos = allowed
                .iter()
                .position(|(u, _)| *u == unit)
                .ok_or_else(|| fail("units are out of order or unknown"))?;
            let secs = allowed[pos].1;
            if weeks || (unit == 'W' && (components > 0 || time.is_some())) {
                return Err(fail("weeks cannot be combined with other units"));
            }
            weeks = unit == 'W';
            allowed = &allowed[pos + 1..];
            rest = &tail[unit.len_utf8()..];
            let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
            if whole.is_empty() || (number.contains('.') && (frac.is_empty() || !rest.is_empty() || unit != 'S')) {
                return Err(fail("only a final seconds value may have a fraction"));
            }
            let whole: u128 = whole.parse().map_err(|_| fail("a number is too large"))?;
            let frac_ms: u128 = format!("{frac:0<3}")[..3].parse().map_err(|_| fail("a number is malformed"))?;
            millis = millis
                .checked_add(
                    whole.checked_mul(u128::from(secs) * 1000).ok_or_else(|| fail("it is too long"))? + frac_ms,
                )
                .ok_or_else(|| fail("it is too long"))?;
            components += 1;
        }
    }
    if components == 0 {
        return Err(fail("it has no components"));
    }
    if millis > u128::from(MAX_SECS) * 1000 {
        return Err(fail("it is longer than 100 years"));
    }
    Ok(Duration::from_millis(u64::try_from(millis).map_err(|_| fail("it is too long"))?))
}

/// The canonical form of a duration (`P1DT2H3M4.5S`, `PT0S` for zero), which parses back to it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let (days, rest) = (ms / 86_400_000, ms % 86_400_000);
    let (hours, rest) = (rest / 3_600_000, rest % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (secs, frac) = (rest / 1000, rest % 1000);
    let mut out = String::from("P");
    if days > 0 {
        out += &format!("{days}D");
    }
    if hours + minutes + secs + frac > 0 || days == 0 {
        out.push('T');
        if hours > 0 {
            out += &format!("{hours}H");
        }
        if minutes > 0 {
            out += &format!("{minutes}M");
        }
        if frac > 0 {
            out += format!("{secs}.{frac:03}").trim_end_matches('0');
            out.push('S');
        } else if secs > 0 || (days == 0 && hours == 0 && minutes == 0) {
            out += &format!("{secs}S");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn common_delays_parse() {
        let cases = [
            ("PT2H", 7_200_000),
            ("P1DT30M", 88_200_000),
            ("PT0.5S", 500),
            ("P2W", 1_209_600_000),
            ("PT90M", 5_400_000),
            ("P1D", 86_400_000),
            ("PT1H2M3.25S", 3_723_250),
            ("PT0S", 0),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(ms)), "{text}");
        }
    }

    #[test]
    fn malformed_and_calendar_durations_are_refused() {
        for bad in [
            "",
            "P",
            "PT",
            "2H",
            "P1Y",
            "P1M",
            "PT1.5H",
            "PT1H1H",
            "PT1M1H",
            "P1DT",
            "P1W2D",
            "P1WT1H",
            "PT.5S",
            "PT5.S",
            "PTH",
            "P1H",
            "pt1h",
            "PT99999999999999999999999H",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_duration", "{bad}");
        }
        assert!(parse_duration("P1Y").unwrap_err().reason.contains("years"));
    }

    proptest! {
        /// Every duration up to 100 years formats to a string that parses back to it.
        #[test]
        fn formatting_round_trips(ms in 0u64..(MAX_SECS * 1000)) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }

        /// Parsing never panics on arbitrary text.
        #[test]
        fn arbitrary_text_does_not_panic(s in "P[0-9WDTHMS.]{0,12}") {
            let _ = parse_duration(&s);
        }
    }
}
