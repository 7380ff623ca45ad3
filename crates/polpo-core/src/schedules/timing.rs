//! When a schedule fires: the next occurrence after a given instant, computed from data only
//! (the caller passes `now`; nothing here reads a clock).
//!
//! Cron expressions are matched against wall-clock time in the schedule's IANA time zone and
//! mapped to instants the way RFC 9557 / Temporal's `compatible` disambiguation does:
//! - a local time that a DST gap skips (02:30 on a spring-forward night) fires as if the clock
//!   had not jumped: shifted forward by the gap (03:30), so a daily job still runs that day;
//! - a local time that a DST fold repeats (02:30 on a fall-back night) fires once, at its first
//!   instant, unless the hour field is `*`: then it fires at both, so an every-15-minutes job
//!   keeps firing every 15 real minutes through the repeated hour.

use super::codes;
use super::cron::Cron;
use crate::problem::Problem;
use crate::tasks::duration::parse_duration;
use chrono::{DateTime, Duration, FixedOffset, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// The largest jump of a zone's UTC offset that the search below accounts for around `after`
/// (DST moves clocks by one hour, a few zones by two).
const OFFSET_MARGIN_HOURS: i64 = 3;

/// When it fires (`timing`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TimingConfig {
    /// A cron expression (5 fields, or 6 with seconds first) in a time zone (UTC when absent).
    Cron {
        /// The expression.
        expression: String,
        /// IANA zone name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
        /// No occurrence after this ISO-8601 instant.
        #[serde(default, rename = "endAt", skip_serializing_if = "Option::is_none")]
        end_at: Option<String>,
    },
    /// Once, at an ISO-8601 instant (wall-clock in `timezone` when it has no offset).
    Once {
        /// The instant.
        at: String,
        /// IANA zone name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
    /// Every ISO-8601 duration (`PT15M`), from `startAt` (the Unix epoch when absent).
    Interval {
        /// The period.
        every: String,
        /// The first occurrence.
        #[serde(default, rename = "startAt", skip_serializing_if = "Option::is_none")]
        start_at: Option<String>,
        /// No occurrence after this ISO-8601 instant.
        #[serde(default, rename = "endAt", skip_serializing_if = "Option::is_none")]
        end_at: Option<String>,
    },
}

/// A schedule's timing, checked and ready to compute occurrences.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// A cron expression in a time zone.
    Cron {
        /// The parsed expression.
        cron: Cron,
        /// Its time zone.
        zone: Tz,
        /// No occurrence after this instant.
        end: Option<DateTime<Utc>>,
    },
    /// One instant.
    Once {
        /// The instant.
        at: DateTime<Utc>,
    },
    /// Every `every`, counted from `anchor` (the Unix epoch when not given, so every server
    /// computes the same instants).
    Interval {
        /// The period (at least a second).
        every: Duration,
        /// The first occurrence (and every period after it).
        anchor: DateTime<Utc>,
        /// No occurrence after this instant.
        end: Option<DateTime<Utc>>,
    },
}

impl Timing {
    /// Check a `timing` object. Problems point below `/timing`.
    pub fn from_config(config: &TimingConfig) -> Result<Self, Box<Problem>> {
        let bad = |code: &str, message: String, field: &str| {
            Box::new(Problem::new(code, message).at(format!("/timing/{field}")))
        };
        match config {
            TimingConfig::Cron { expression, timezone, end_at } => {
                let cron = Cron::parse(expression).map_err(|e| bad(e.code(), e.to_string(), "expression"))?;
                let zone = zone(timezone.as_deref()).map_err(|m| bad(codes::INVALID_TIMEZONE, m, "timezone"))?;
                let end = end_at
                    .as_deref()
                    .map(|t| instant(t, zone))
                    .transpose()
                    .map_err(|m| bad(codes::INVALID_TIME, m, "endAt"))?;
                Ok(Self::Cron { cron, zone, end })
            }
            TimingConfig::Once { at, timezone } => {
                let zone = zone(timezone.as_deref()).map_err(|m| bad(codes::INVALID_TIMEZONE, m, "timezone"))?;
                let at = instant(at, zone).map_err(|m| bad(codes::INVALID_TIME, m, "at"))?;
                Ok(Self::Once { at })
            }
            TimingConfig::Interval { every, start_at, end_at } => {
                let period = parse_duration(every).map_err(|e| bad(e.code(), e.to_string(), "every"))?;
                let every = Duration::from_std(period)
                    .ok()
                    .filter(|d| *d >= Duration::seconds(1))
                    .ok_or_else(|| bad("invalid_duration", format!("`{every}` is shorter than one second"), "every"))?;
                let anchor = match start_at {
                    Some(t) => instant(t, Tz::UTC).map_err(|m| bad(codes::INVALID_TIME, m, "startAt"))?,
                    None => DateTime::UNIX_EPOCH,
                };
                let end = end_at
                    .as_deref()
                    .map(|t| instant(t, Tz::UTC))
                    .transpose()
                    .map_err(|m| bad(codes::INVALID_TIME, m, "endAt"))?;
                Ok(Self::Interval { every, anchor, end })
            }
        }
    }

    /// The first occurrence strictly after `after`, or `None` when there is none (a `once`
    /// in the past, an end reached, a cron expression that never matches).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let (next, end) = match self {
            Self::Once { at } => return (*at > after).then_some(*at),
            Self::Cron { cron, zone, end } => (next_cron(cron, *zone, after), end),
            Self::Interval { every, anchor, end } => (Some(next_interval(*every, *anchor, after)), end),
        };
        next.filter(|t| end.is_none_or(|end| *t <= end))
    }

    /// Up to `limit` occurrences in `(after, until]`, oldest first.
    pub fn occurrences(&self, after: DateTime<Utc>, until: DateTime<Utc>, limit: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(after), |t| self.next_after(*t))
            .take_while(|t| *t <= until)
            .take(limit)
            .collect()
    }

    /// The next `count` occurrences after `after`, for previews (`polpo schedules next`).
    pub fn preview(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(after), |t| self.next_after(*t)).take(count).collect()
    }

    /// The time zone occurrences are shown in (UTC for intervals and fixed instants).
    pub fn zone(&self) -> Tz {
        match self {
            Self::Cron { zone, .. } => *zone,
            _ => Tz::UTC,
        }
    }
}

/// An IANA zone name; UTC when absent.
fn zone(name: Option<&str>) -> Result<Tz, String> {
    match name {
        None => Ok(Tz::UTC),
        Some(n) => n.parse::<Tz>().map_err(|_| format!("`{n}` is not an IANA time zone such as Europe/Rome")),
    }
}

/// An ISO-8601 instant: with an offset (`2026-07-28T09:00:00+02:00`, `…Z`) as given, without
/// one as wall-clock time in `zone`.
fn instant(text: &str, zone: Tz) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M"))
        .map_err(|_| format!("`{text}` is not an ISO-8601 date-time such as 2026-07-28T09:00:00"))?;
    Ok(local_instants(zone, naive, false).first().copied().unwrap_or_else(|| naive.and_utc()))
}

fn next_interval(every: Duration, anchor: DateTime<Utc>, after: DateTime<Utc>) -> DateTime<Utc> {
    if after < anchor {
        return anchor;
    }
    let period = every.num_milliseconds();
    let elapsed = (after - anchor).num_milliseconds();
    anchor + Duration::milliseconds((elapsed / period + 1) * period)
}

fn offset_at(zone: Tz, at: DateTime<Utc>) -> FixedOffset {
    zone.offset_from_utc_datetime(&at.naive_utc()).fix()
}

/// The instants a wall-clock time names in `zone`, per the rules in this module's comment.
fn local_instants(zone: Tz, local: NaiveDateTime, both_in_fold: bool) -> Vec<DateTime<Utc>> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => vec![t.with_timezone(&Utc)],
        LocalResult::Ambiguous(first, second) if both_in_fold => {
            vec![first.with_timezone(&Utc), second.with_timezone(&Utc)]
        }
        LocalResult::Ambiguous(first, _) => vec![first.with_timezone(&Utc)],
        LocalResult::None => {
            // In a gap: read the wall-clock time with the offset in force before the jump.
            let before = offset_at(zone, (local - Duration::hours(OFFSET_MARGIN_HOURS * 2)).and_utc());
            vec![(local - Duration::seconds(before.local_minus_utc().into())).and_utc()]
        }
    }
}

/// The first cron occurrence after `after`. Local times are searched in order; because a fold
/// makes local time run backwards, the search starts early by the size of a fold ahead and
/// keeps the earliest instant found until no later local time can beat it.
fn next_cron(cron: &Cron, zone: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let margin = Duration::hours(OFFSET_MARGIN_HOURS);
    let fold = (offset_at(zone, after).local_minus_utc() - offset_at(zone, after + margin).local_minus_utc()).max(0);
    let fold = Duration::seconds(fold.into());
    let mut local = after.with_timezone(&zone).naive_local() - fold;
    let mut best: Option<DateTime<Utc>> = None;
    while let Some(candidate) = cron.next_local(local) {
        if let Some(b) = best
            && candidate > b.with_timezone(&zone).naive_local() + fold
        {
            break;
        }
        for t in local_instants(zone, candidate, cron.every_hour()) {
            if t > after && best.is_none_or(|b| t < b) {
                best = Some(t);
            }
        }
        local = candidate + Duration::seconds(1);
    }
    best
}
