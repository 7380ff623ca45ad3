//! Cron expressions: five fields (`minute hour day-of-month month day-of-week`) or six with a
//! leading `second`, and the `@hourly`-style macros.
//!
//! This file knows wall-clock (naive) times only: which local times match. Turning a local
//! time into an instant in a time zone, with its DST gaps and folds, is the job of the `timing` module beside this one.

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

/// Years searched for a match before an expression is declared never to fire (a 29 February
/// that is also a given weekday can be 28 years away).
const SEARCH_YEARS: i32 = 30;

/// Why an expression does not parse. One code: `invalid_cron`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{expression}` is not a cron expression: {reason}")]
pub struct CronError {
    /// The expression given.
    pub expression: String,
    /// What is wrong with it.
    pub reason: String,
}

impl CronError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        "invalid_cron"
    }
}

/// A parsed expression: the accepted values of each field as bit sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Day-of-month was `*`: then only the weekday restricts the day (and vice versa); when
    /// both are restricted, a day matching either fires (the classic cron rule).
    any_day: bool,
    any_weekday: bool,
}

struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const SECOND: FieldSpec = FieldSpec { name: "second", min: 0, max: 59, names: &[] };
const MINUTE: FieldSpec = FieldSpec { name: "minute", min: 0, max: 59, names: &[] };
const HOUR: FieldSpec = FieldSpec { name: "hour", min: 0, max: 23, names: &[] };
const DAY: FieldSpec = FieldSpec { name: "day of month", min: 1, max: 31, names: &[] };
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
};
// 7 is Sunday too; names start at 0 = Sunday.
const WEEKDAY: FieldSpec =
    FieldSpec { name: "day of week", min: 0, max: 7, names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"] };

impl Cron {
    /// Parse five or six space-separated fields, or a macro (`@yearly`, `@annually`,
    /// `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`). Each field is a list of `*`,
    /// `n`, `a-b`, each optionally `/step`; months and weekdays also by English prefix (`jan`,
    /// `mon`).
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        let fail = |reason: String| CronError { expression: expression.to_owned(), reason };
        let text = match expression.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => return Err(fail(format!("unknown macro `{other}`"))),
            other => other,
        };
        let fields: Vec<&str> = text.split_whitespace().collect();
        let (second, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => return Err(fail(format!("expected 5 or 6 fields, found {n}"))),
        };
        let seconds = field(second, &SECOND).map_err(&fail)?;
        let minutes = field(rest[0], &MINUTE).map_err(&fail)?;
        let hours = field(rest[1], &HOUR).map_err(&fail)?;
        let days = field(rest[2], &DAY).map_err(&fail)?;
        let months = field(rest[3], &MONTH).map_err(&fail)?;
        let mut weekdays = field(rest[4], &WEEKDAY).map_err(&fail)?;
        if weekdays & (1 << 7) != 0 {
            weekdays |= 1;
        }
        Ok(Self {
            seconds,
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: (weekdays & 0x7f) as u8,
            any_day: rest[2].starts_with('*'),
            any_weekday: rest[4].starts_with('*'),
        })
    }

    /// True when the hour field accepts every hour: then a local time that a DST fold repeats
    /// fires at both instants (an hourly-or-finer job keeps its rhythm), otherwise once.
    pub fn every_hour(&self) -> bool {
        self.hours == (1 << 24) - 1
    }

    /// The first local time at or after `from` (whole seconds) that matches, within
    /// [`SEARCH_YEARS`]; `None` when the expression never matches (`0 0 31 2 *`).
    pub fn next_local(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        let limit = from.year() + SEARCH_YEARS;
        let mut t = from.with_nanosecond(0)?;
        if t < from {
            t += Duration::seconds(1);
        }
        while t.year() <= limit {
            if self.months & (1 << t.month()) == 0 {
                let (y, m) = if t.month() == 12 { (t.year() + 1, 1) } else { (t.year(), t.month() + 1) };
                t = NaiveDate::from_ymd_opt(y, m, 1)?.and_time(NaiveTime::MIN);
            } else if !self.day_matches(t.date()) {
                t = t.date().succ_opt()?.and_time(NaiveTime::MIN);
            } else if self.hours & (1 << t.hour()) == 0 {
                t = t.date().and_hms_opt(t.hour(), 0, 0)? + Duration::hours(1);
            } else if self.minutes & (1 << t.minute()) == 0 {
                t = t.date().and_hms_opt(t.hour(), t.minute(), 0)? + Duration::minutes(1);
            } else if self.seconds & (1 << t.second()) == 0 {
                t += Duration::seconds(1);
            } else {
                return Some(t);
            }
        }
        None
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        let by_day = self.days & (1 << date.day()) != 0;
        let by_weekday = self.weekdays & (1 << date.weekday().num_days_from_sunday()) != 0;
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (true, false) => by_weekday,
            (false, true) => by_day,
            (false, false) => by_day || by_weekday,
        }
    }
}

/// One field's accepted values as a bit set (bit n = value n).
fn field(text: &str, spec: &FieldSpec) -> Result<u64, String> {
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| format!("{}: step `{s}` is not a number", spec.name))?;
                if step == 0 {
                    return Err(format!("{}: a step must be at least 1", spec.name));
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = match range {
            "*" => (spec.min, spec.max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a, spec)?, value(b, spec)?),
                // `5/15` means from 5 to the end, every 15.
                None if step > 1 => (value(r, spec)?, spec.max),
                None => {
                    let v = value(r, spec)?;
                    (v, v)
                }
            },
        };
        if lo > hi {
            return Err(format!("{}: range `{range}` runs backwards", spec.name));
        }
        bits |= (lo..=hi).step_by(step as usize).fold(0u64, |acc, v| acc | (1 << v));
    }
    Ok(bits)
}

fn value(text: &str, spec: &FieldSpec) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    let v = match spec.names.iter().position(|n| *n == lower) {
        Some(i) => i as u32 + spec.min,
        None => text.parse::<u32>().map_err(|_| format!("{}: `{text}` is not a value", spec.name))?,
    };
    if !(spec.min..=spec.max).contains(&v) {
        return Err(format!("{}: {v} is outside {}-{}", spec.name, spec.min, spec.max));
    }
    Ok(v)
}
