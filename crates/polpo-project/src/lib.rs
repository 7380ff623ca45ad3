//! The `.polpo/` folder on disk.
//!
//! One loader reads a project (directory layout or legacy aggregate files) into a validated
//! [`polpo_core`] value, collecting every problem with its file and JSON pointer. Every write
//! goes through [`fsx::write_atomic`] (temp file, fsync, rename, fsync dir), so a crash never
//! leaves a half-written config file, and every edit through [`ProjectEditor::edit`], so a
//! change is served whole (the project it leaves loads) or put back file by file.

pub mod agents;
pub mod create;
mod edit;
mod error;
pub mod fsx;
pub mod hooks;
mod load;
pub mod loops;
pub mod migrate;
pub mod paths;
mod read;
pub mod schedules;
pub mod skills;
pub mod teams;

pub use agents::{AgentSnapshot, Revision, delete_agent, read_agent, write_agent};
pub use create::{NewAgent, create_project};
pub use edit::{Edit, ProjectEditor};
pub use error::ProjectError;
pub use load::{DEFAULT_TEAM, load_project, load_project_checking_tools};
pub use migrate::{MigrationPlan, PlannedWrite, migrate};
