//! The pure domain of Polpo.
//!
//! Everything that can be decided from data alone is decided here: the shapes of the
//! `.polpo/` configuration files and their validation, chat messages and tool calls as the
//! runtime sees them, the tool-policy algebra, and the stable error codes a user sees.
//!
//! This crate does no I/O, spawns no tasks and never reads the clock: time and ids are passed
//! in, so that every decision made here is reproducible in a plain unit or property test.

pub mod config;
pub mod embedding;
pub mod hooks;
pub mod loops;
pub mod message;
pub mod model;
pub mod policy;
pub mod problem;
pub mod prompt;
pub mod redact;
pub mod routing;
pub mod schedules;
pub mod tasks;
pub mod tool;
