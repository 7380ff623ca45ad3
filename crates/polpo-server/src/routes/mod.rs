//! One module per group of routes; each handler translates HTTP into one runtime call.

pub mod agents;
pub mod approvals;
pub mod chat;
pub mod dashboard;
pub mod events;
pub mod health;
pub mod loop_runs;
pub mod loops;
pub mod mcp;
pub mod memory;
pub mod memory_candidates;
pub mod missions;
pub mod models;
pub mod openapi;
pub mod runs;
pub mod schedules;
pub mod sessions;
pub mod skills;
pub mod tasks;
pub mod teams;
pub mod vault;
