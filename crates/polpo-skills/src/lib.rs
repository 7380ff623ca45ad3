//! Agent Skills as the runtime and the CLI use them, above the bundle files that
//! `polpo-project` reads and writes:
//!
//! - [`tools`]: `skill_list` (the compact index of the agent's assigned skills) and
//!   `skill_read` (`SKILL.md` with the text files of `references/`, or one exact file), which
//!   the engine offers to agents that have skills;
//! - [`activation`]: `polpo.skills` on a request, the activated skills' `SKILL.md` for the
//!   prompt of that request only;
//! - [`source`]: fetching a source (a local folder, a local or remote git repository, or
//!   `owner/repo` on GitHub) through the `git` binary, and picking its bundles for
//!   `polpo skills add` and `update`.

pub mod activation;
pub mod source;
pub mod tools;

pub use activation::{ActivationError, MAX_ACTIVATED, activation_prompt};
pub use tools::{SKILL_LIST, SKILL_READ, SKILL_TOOLS, skill_tools};
