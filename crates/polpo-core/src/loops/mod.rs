//! Project Loops: deterministic graphs of agent, tool, human, parallel and `while` steps,
//! kept in `.polpo/loops/<name>.json` and assigned to agents.
//!
//! This module holds what can be decided from data: the canonical `ProjectLoopConfig` shape
//! ([`config`]), the rules a loop must satisfy before anything runs it ([`validate`]), and the
//! safe expression language of its guards ([`expr`]), and what its permissions and policies
//! decide at a lifecycle point ([`governance`]), and how the execution router's answer is
//! read ([`router`]). Reading the files is `polpo-project`'s
//! job; running a loop is the executor's.

pub mod codes;
pub mod config;
pub mod expr;
pub mod governance;
pub mod router;
#[cfg(test)]
mod tests;
pub mod validate;

pub use config::{LOOP_FILE, Loop, LoopConfig, Step, StepBody, check_loop, parse_loop};
pub use validate::{loop_warnings, unknown_loop_tools, validate_loop, validate_loops};
