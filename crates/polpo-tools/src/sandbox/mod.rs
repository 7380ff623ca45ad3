//! The sandbox every tool call runs in: file paths confined to the allowed roots minus the
//! protected ones, processes in their own session, group and PID namespace with bounded time
//! and output, no inherited descriptors and a scrubbed environment, and `bash` further confined
//! by Landlock (files, and no TCP connection to the server's own port), resource limits and
//! dropped privileges.

mod capped;
mod confine;
mod env;
mod fs_rules;
mod net_rules;
mod paths;
mod policy;
mod process;
mod service;

pub use capped::CappedOutput;
pub use env::{BASE_ENV_ALLOW, is_secret_name, scrubbed_env};
pub use net_rules::{denied_connect_ports, deny_connect_ports};
pub use paths::{PathRules, resolve_in_sandbox, resolve_real_path};
pub use policy::{
    Confinement, FORCE_UNAVAILABLE_ENV, ResourceLimits, SandboxNotice, SandboxPolicy, SandboxSupport, sandbox_support,
};
pub use process::{CommandOutcome, CommandSpec, Isolation, Program, SandboxError, Termination, run_command};
pub use service::{Service, spawn_service};
