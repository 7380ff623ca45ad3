//! Stable problem codes for project files. Scripts and tests match on these strings, so
//! they never change once published.

/// Both a legacy aggregate file and its directory-layout replacement exist.
pub const AMBIGUOUS_LAYOUT: &str = "ambiguous_layout";
/// Two ids are equal after NFKC normalisation and lowercasing.
pub const CASE_COLLISION: &str = "case_collision";
/// An id that can be mistaken for another one (homoglyphs such as a Cyrillic `е`), or that
/// mixes Latin, Greek and Cyrillic letters.
pub const ID_CONFUSABLE: &str = "id_confusable";
/// A file is not valid JSON (carries line and column).
pub const INVALID_JSON: &str = "invalid_json";
/// A file the layout requires is absent (`agent.json`, `instructions.md`, `project.json`).
pub const MISSING_AGENT_FILE: &str = "missing_agent_file";
/// The project manifest (`project.json` or legacy `polpo.json`) is absent.
pub const MISSING_PROJECT_FILE: &str = "missing_project_file";
/// A key the contract does not know.
pub const UNKNOWN_FIELD: &str = "unknown_field";
/// A value of the wrong type, out of range, or not one of the allowed names.
pub const INVALID_VALUE: &str = "invalid_value";
/// A key that exists elsewhere but must not appear in this file (`name` in `agent.json`).
pub const FORBIDDEN_FIELD: &str = "forbidden_field";
/// A legacy aggregate file whose structure is not the documented one.
pub const INVALID_LEGACY_LAYOUT: &str = "invalid_legacy_layout";
/// A name that should point at something that exists (agent, loop, profile) does not.
pub const INVALID_REFERENCE: &str = "invalid_reference";
/// `reportsTo` chains loop back on themselves.
pub const REPORTS_TO_CYCLE: &str = "reports_to_cycle";
/// A file is larger than any config file has reason to be.
pub const FILE_TOO_LARGE: &str = "file_too_large";
/// A file could not be read for a reason other than its absence.
pub const UNREADABLE_FILE: &str = "unreadable_file";
/// A field this runtime reads but does not act on yet (a warning in `polpo validate`; a
/// request that relies on one is refused with this code instead of being silently ignored).
pub const FEATURE_UNAVAILABLE: &str = "feature_unavailable";
