//! `teams/<id>.json`: team metadata. Membership is not stored here: each agent names its
//! team in `agent.json`, so moving an agent is one edit in one file.

use super::schema::{Field, Shape};
use serde::{Deserialize, Serialize};

/// The authored part of a team.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TeamConfig {
    /// What the team does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

static TEAM_FIELDS: &[Field] = &[Field::optional("description", Shape::String)];

/// The shape of `teams/<id>.json`.
pub static TEAM_FILE: Shape = Shape::Object(&[
    TEAM_FIELDS,
    &[
        Field::forbidden("name", "`name` must not appear in a team file: the file name is the team id"),
        Field::forbidden("agents", "`agents` must not appear in a team file: set `team` in each agent.json"),
    ],
]);

/// The shape of one team in a legacy `teams.json`.
pub static LEGACY_TEAM: Shape = Shape::Object(&[TEAM_FIELDS, &[Field::required("name", Shape::String)]]);
