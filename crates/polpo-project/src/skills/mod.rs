//! Agent Skills bundles on disk: `.polpo/skills/<name>/` (`SKILL.md` with its front matter plus
//! any other files, text and binary) and `.polpo/skills.lock.json` (their provenance). Reading
//! never follows a symlink and stays inside a bundle, within fixed bounds; writing is a step of
//! a project [`crate::Edit`], atomic file by file and undone whole when the edit fails.

mod bundle;
mod error;
mod installed;
mod lock;
mod meta;

pub use bundle::{MAX_BUNDLE_BYTES, MAX_BUNDLE_FILE_BYTES, MAX_BUNDLE_FILES, SkillBundle, find_bundles, read_bundle};
pub use error::SkillError;
pub use installed::{
    REFERENCES_DIR, SKILLS_DIR, assigned_to, check, install, installed_names, read_meta, read_references, read_text,
    remove, set_assigned, skill_dir,
};
pub use lock::{LOCK_FILE, LockEntry, SkillsLock, read_lock};
pub use meta::{SKILL_MD, SkillMeta, check_name, parse_skill_md};
