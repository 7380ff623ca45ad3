//! The sandbox every tool call runs in: file paths confined to the allowed roots, processes in
//! their own group with bounded time and output and a scrubbed environment.

mod capped;
mod env;
mod paths;
mod process;

pub use capped::CappedOutput;
pub use env::{BASE_ENV_ALLOW, is_secret_name, scrubbed_env};
pub use paths::{PathRules, resolve_in_sandbox, resolve_real_path};
pub use process::{CommandOutcome, CommandSpec, Program, SandboxError, Termination, run_command};
