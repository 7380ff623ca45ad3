//! Stable problem codes of schedule files (besides the general ones in
//! [`crate::config::codes`] and `invalid_cron` / `invalid_duration` of the parsers).

/// `timezone` is not an IANA zone name.
pub const INVALID_TIMEZONE: &str = "invalid_timezone";
/// `at`, `startAt` or `endAt` is not an ISO-8601 date-time.
pub const INVALID_TIME: &str = "invalid_time";
/// A cron expression that matches no date (`0 0 31 2 *`): the schedule could never fire.
pub const SCHEDULE_NEVER_FIRES: &str = "schedule_never_fires";
/// A mission-shaped (legacy) schedule file, read as its v2 translation (a warning;
/// `polpo schedules migrate` rewrites it).
pub const LEGACY_SCHEDULE: &str = "legacy_schedule";
/// A webhook schedule's URL names a host `settings.schedules.webhookAllowlist` does not list.
pub const WEBHOOK_HOST_NOT_ALLOWED: &str = "webhook_host_not_allowed";
