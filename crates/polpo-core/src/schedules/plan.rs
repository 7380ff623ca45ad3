//! Which occurrences fire and which are missed, given where the scheduler left off and the
//! time now: the misfire and catch-up rules, as data.

use super::config::{CatchUp, SchedulePolicy};
use super::timing::Timing;
use chrono::{DateTime, Duration, Utc};

/// Occurrences looked at in one pass; after a longer downtime the next pass goes on from there.
pub const MAX_SCANNED: usize = 100_000;
/// Late occurrences recorded one by one in a pass (the newest ones); older ones are counted.
pub const MAX_RECORDED: usize = 100;

/// One occurrence and what to do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Fire it.
    Fire(DateTime<Utc>),
    /// Record it `missed`: later than the grace, and the catch-up policy does not fire it.
    Missed(DateTime<Utc>),
}

/// The outcome of one pass over a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Oldest first.
    pub due: Vec<Due>,
    /// Missed occurrences too old to be recorded one by one (beyond [`MAX_RECORDED`]).
    pub unrecorded: usize,
    /// The last occurrence looked at: the next pass starts after it.
    pub cursor: DateTime<Utc>,
}

/// The occurrences in `(cursor, now]`: those within `misfireGraceSeconds` of `now` fire; the
/// later ones follow `catchUp` — `skip` fires none, `one` the newest, `all` the newest
/// `catchUpLimit` — and the rest are missed.
pub fn plan_due(timing: &Timing, policy: &SchedulePolicy, cursor: DateTime<Utc>, now: DateTime<Utc>) -> Plan {
    let occurrences = timing.occurrences(cursor, now, MAX_SCANNED);
    let next_cursor = occurrences.last().copied().unwrap_or(cursor);
    let grace = Duration::seconds(policy.misfire_grace_seconds().into());
    let split = occurrences.partition_point(|t| now - *t > grace);
    let (late, on_time) = occurrences.split_at(split);
    let catch_up = match (policy.catch_up(), on_time.is_empty()) {
        (CatchUp::All, _) => policy.catch_up_limit() as usize,
        // `one`: the newest late occurrence stands for the ones missed, unless one is on time.
        (CatchUp::One | CatchUp::Latest, true) => 1,
        _ => 0,
    };
    let fired_late = late.len().min(catch_up);
    let missed = &late[..late.len() - fired_late];
    let unrecorded = missed.len().saturating_sub(MAX_RECORDED);
    let due = missed[unrecorded..]
        .iter()
        .map(|t| Due::Missed(*t))
        .chain(late[late.len() - fired_late..].iter().chain(on_time).map(|t| Due::Fire(*t)))
        .collect();
    Plan { due, unrecorded, cursor: next_cursor }
}
