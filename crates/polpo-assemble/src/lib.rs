//! Assembling a project's [`Runtime`](polpo_engine::Runtime) from its folder: model providers
//! (the project's entries over the built-ins, the offline model when installed), the store its
//! settings name, custom tools, Connections, MCP servers, vault redaction and typed memory.
//!
//! Every host that runs agents needs the same runtime — `polpo serve`/`dev`, `polpo run`,
//! `polpo mcp`, and a program embedding the orchestrator (`Orchestrator::open`) — so the
//! assembly lives here, once, rather than in the binary. The crate is named for that one job:
//! it knows the project file's shapes and every runtime part, and builds nothing else (no
//! server, no command line), so the orchestrator can depend on it without a cycle.

mod connections;
mod providers;
mod runtime;
mod tools;

pub use connections::project_connections;
pub use providers::{
    LOCAL_DEFAULT_MODEL, LOCAL_PROVIDER, MODELS_DIR_ENV, coded, installed_local_default, local_model_name, models_dir,
    providers,
};
pub use runtime::{MCP, derive, open, open_with_memory, project_memory};
pub use tools::project_tools;
