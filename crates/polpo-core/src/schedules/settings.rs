//! `settings.schedules` in `project.json`: project-wide rules for schedules. Today one:
//! `webhookAllowlist`, the only hosts a `webhook` schedule may POST to, checked by `polpo
//! validate` against every webhook schedule and by the scheduler's SSRF guard on every hop
//! when it fires (a redirect elsewhere is refused).

use super::config::Invocation;
use crate::config::codes as config_codes;
use crate::config::schema::{Field, STRINGS, Shape};
use crate::config::{Project, Settings};
use crate::hooks::validate::url_host;
use crate::problem::Problem;
use serde::{Deserialize, Serialize};

/// `settings.schedules`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSettings {
    /// The only hosts (exact names or IPv4 literals, no scheme, port or path; case-insensitive)
    /// webhook schedules may target. Absent: any public https host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_allowlist: Option<Vec<String>>,
}

/// The shape of `settings.schedules`.
pub static SCHEDULE_SETTINGS: Shape = Shape::Object(&[&[Field::optional("webhookAllowlist", STRINGS)]]);

/// The webhook host allowlist in force, if the project sets one.
pub fn webhook_allowlist(settings: &Settings) -> Option<&[String]> {
    settings.schedules.as_ref()?.webhook_allowlist.as_deref()
}

/// Whether `host` (as in a URL) is on `allowlist`.
pub fn host_allowed(allowlist: &[String], host: &str) -> bool {
    allowlist.iter().any(|allowed| allowed.eq_ignore_ascii_case(host))
}

/// Problems of the allowlist itself (an entry that is not a bare host: `invalid_value` at
/// `/settings/schedules/webhookAllowlist/<i>`) and every webhook schedule whose URL's host is
/// not on it (`webhook_host_not_allowed` at the schedule's `/invocation/url`).
pub fn validate_webhook_allowlist(project: &Project) -> Vec<Problem> {
    let Some(allowlist) = webhook_allowlist(project.settings()) else { return Vec::new() };
    let mut out = Vec::new();
    for (i, entry) in allowlist.iter().enumerate() {
        if !is_bare_host(entry) {
            out.push(project.manifest_source.problem(
                config_codes::INVALID_VALUE,
                format!("`{entry}` is not a bare host name (no scheme, port, path, wildcard or IPv6)"),
                &format!("/settings/schedules/webhookAllowlist/{i}"),
            ));
        }
    }
    for s in project.schedules.values() {
        let Invocation::Webhook { url, .. } = &s.config.invocation else { continue };
        let host = url_host(url);
        if !host_allowed(allowlist, host) {
            out.push(s.source.problem(
                super::codes::WEBHOOK_HOST_NOT_ALLOWED,
                format!(
                    "schedule `{}` posts to host `{host}`, which settings.schedules.webhookAllowlist does not list",
                    s.id
                ),
                "/invocation/url",
            ));
        }
    }
    out
}

/// A host name or IPv4 literal: letters, digits, `-`, `.` and `_`, as a URL's host reads.
fn is_bare_host(entry: &str) -> bool {
    !entry.is_empty()
        && entry.len() <= 253
        && entry.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}
