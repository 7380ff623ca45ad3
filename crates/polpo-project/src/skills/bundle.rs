//! A skill bundle read from disk: `SKILL.md` and every other file of its folder, text and
//! binary, without ever following a symbolic link, within fixed bounds, with a content hash
//! that the lock file records. The same reader serves a source being installed and an
//! installed bundle being checked or read by the skill tools.

use super::error::SkillError;
use super::meta::{SKILL_MD, SkillMeta, parse_skill_md};
use crate::fsx;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Most files in one bundle.
pub const MAX_BUNDLE_FILES: usize = 1000;
/// Largest single file of a bundle.
pub const MAX_BUNDLE_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Largest bundle, all files together.
pub const MAX_BUNDLE_BYTES: u64 = 32 * 1024 * 1024;
/// Deepest folder nesting inside a bundle (and searched in a source).
pub const MAX_DEPTH: usize = 12;
/// Most folders visited when searching a source for bundles.
const MAX_SEARCHED_DIRS: usize = 10_000;

/// A whole bundle in memory: its identity and its files by bundle-relative `/` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillBundle {
    /// From the front matter of `SKILL.md`.
    pub meta: SkillMeta,
    /// Every file (hidden entries such as `.git` excluded), by relative path.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl SkillBundle {
    /// `sha256:<hex>` over every file's path and bytes, in path order: equal bundles, equal hash.
    pub fn hash(&self) -> String {
        let mut hash = Sha256::new();
        for (path, bytes) in &self.files {
            hash.update((path.len() as u64).to_be_bytes());
            hash.update(path.as_bytes());
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        }
        format!("sha256:{}", hex::encode(hash.finalize()))
    }
}

/// Read the bundle in `dir` (which must hold `SKILL.md`). Symlinks anywhere are refused;
/// hidden entries (`.git`, editor files, interrupted temp files) are not part of a bundle.
pub fn read_bundle(dir: &Path) -> Result<SkillBundle, SkillError> {
    let files = read_tree(dir)?;
    let shown = dir.join(SKILL_MD).display().to_string();
    let skill_md = files.get(SKILL_MD).ok_or_else(|| SkillError::invalid(&shown, "the bundle has no SKILL.md"))?;
    let text = std::str::from_utf8(skill_md).map_err(|_| SkillError::NotText(shown.clone()))?;
    let meta = parse_skill_md(text, &shown)?;
    Ok(SkillBundle { meta, files })
}

/// Every non-hidden file under `dir` by relative `/` path, within the bundle bounds; a symlink
/// anywhere (`dir` itself included) is refused.
pub fn read_tree(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>, SkillError> {
    if fs::symlink_metadata(dir).map_err(SkillError::io("inspect", dir))?.file_type().is_symlink() {
        return Err(SkillError::Symlink(dir.display().to_string()));
    }
    let mut files = BTreeMap::new();
    let mut total = 0;
    collect(dir, "", 0, &mut files, &mut total)?;
    Ok(files)
}

fn collect(
    dir: &Path,
    prefix: &str,
    depth: usize,
    files: &mut BTreeMap<String, Vec<u8>>,
    total: &mut u64,
) -> Result<(), SkillError> {
    if depth > MAX_DEPTH {
        return Err(SkillError::TooLarge(format!("{} is nested deeper than {MAX_DEPTH} folders", dir.display())));
    }
    for entry in fs::read_dir(dir).map_err(SkillError::io("list", dir))? {
        let entry = entry.map_err(SkillError::io("list", dir))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            return Err(SkillError::invalid(dir.display().to_string(), "a file name is not UTF-8"));
        };
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let kind = fs::symlink_metadata(&path).map_err(SkillError::io("inspect", &path))?;
        if kind.file_type().is_symlink() {
            return Err(SkillError::Symlink(rel));
        } else if kind.is_dir() {
            collect(&path, &rel, depth + 1, files, total)?;
        } else if kind.is_file() {
            if files.len() >= MAX_BUNDLE_FILES {
                return Err(SkillError::TooLarge(format!("a bundle holds at most {MAX_BUNDLE_FILES} files")));
            }
            let bytes = read_file(&path, &rel)?;
            *total += bytes.len() as u64;
            if *total > MAX_BUNDLE_BYTES {
                return Err(SkillError::TooLarge(format!("a bundle holds at most {MAX_BUNDLE_BYTES} bytes")));
            }
            files.insert(rel, bytes);
        }
    }
    Ok(())
}

fn read_file(path: &Path, rel: &str) -> Result<Vec<u8>, SkillError> {
    fsx::read_bounded(path, MAX_BUNDLE_FILE_BYTES).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => {
            SkillError::TooLarge(format!("{rel} is larger than {MAX_BUNDLE_FILE_BYTES} bytes"))
        }
        _ => SkillError::io("read", path)(e),
    })
}

/// The folders under `root` (itself included) that hold a `SKILL.md`, shallowest first,
/// without following symlinks or entering hidden folders. A bundle's own subfolders are not
/// searched.
pub fn find_bundles(root: &Path) -> Result<Vec<PathBuf>, SkillError> {
    let mut found = Vec::new();
    let mut queue = vec![(root.to_path_buf(), 0)];
    let mut visited = 0;
    while let Some((dir, depth)) = queue.pop() {
        visited += 1;
        if visited > MAX_SEARCHED_DIRS {
            return Err(SkillError::TooLarge(format!("the source has more than {MAX_SEARCHED_DIRS} folders")));
        }
        if fs::symlink_metadata(dir.join(SKILL_MD)).is_ok_and(|m| m.is_file()) {
            found.push(dir);
            continue;
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        for entry in fs::read_dir(&dir).map_err(SkillError::io("list", &dir))?.flatten() {
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if !hidden && entry.file_type().is_ok_and(|t| t.is_dir()) {
                queue.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort_by_key(|d| (d.components().count(), d.clone()));
    Ok(found)
}

/// Read file `rel` of the bundle in `dir`: `rel` must be a plain relative path (no `..`, no
/// hidden or absolute part) and no part of it may be a symlink.
pub fn read_bundle_file(dir: &Path, rel: &str) -> Result<Vec<u8>, SkillError> {
    let outside = || SkillError::PathOutsideBundle(rel.to_owned());
    let parts: Vec<&str> = Path::new(rel)
        .components()
        .map(|c| match c {
            Component::Normal(p) => p.to_str().filter(|p| !p.starts_with('.')).ok_or_else(outside),
            _ => Err(outside()),
        })
        .collect::<Result<_, _>>()?;
    if parts.is_empty() {
        return Err(outside());
    }
    let mut path = dir.to_path_buf();
    for part in &parts {
        path.push(part);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => return Err(SkillError::Symlink(rel.to_owned())),
            Ok(_) => {}
            Err(_) => return Err(SkillError::NotFound(format!("file `{rel}`"))),
        }
    }
    if !path.is_file() {
        return Err(SkillError::NotFound(format!("file `{rel}`")));
    }
    read_file(&path, rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(dir: &Path, name: &str) {
        fs::create_dir_all(dir.join("references")).unwrap();
        fs::write(dir.join(SKILL_MD), format!("---\nname: {name}\ndescription: Does {name}.\n---\nUse it.\n")).unwrap();
        fs::write(dir.join("references/guide.md"), "guide").unwrap();
        fs::write(dir.join("logo.png"), [0u8, 159, 146, 150]).unwrap();
    }

    #[test]
    fn a_bundle_keeps_text_and_binary_files_and_hashes_them() {
        let dir = tempfile::tempdir().unwrap();
        skill(dir.path(), "demo");
        fs::create_dir(dir.path().join(".git")).unwrap();
        let bundle = read_bundle(dir.path()).unwrap();
        assert_eq!(bundle.meta.name, "demo");
        assert_eq!(bundle.files.keys().collect::<Vec<_>>(), ["SKILL.md", "logo.png", "references/guide.md"]);
        let before = bundle.hash();
        fs::write(dir.path().join("references/guide.md"), "changed").unwrap();
        assert_ne!(read_bundle(dir.path()).unwrap().hash(), before);
    }

    #[test]
    fn symlinks_and_traversal_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        skill(dir.path(), "demo");
        assert_eq!(read_bundle_file(dir.path(), "../x").unwrap_err().code(), "path_outside_bundle");
        assert_eq!(read_bundle_file(dir.path(), "/etc/passwd").unwrap_err().code(), "path_outside_bundle");
        assert_eq!(read_bundle_file(dir.path(), "references/guide.md").unwrap(), b"guide");
        std::os::unix::fs::symlink("/etc", dir.path().join("references/etc")).unwrap();
        assert_eq!(read_bundle_file(dir.path(), "references/etc/passwd").unwrap_err().code(), "skill_symlink_refused");
        assert_eq!(read_bundle(dir.path()).unwrap_err().code(), "skill_symlink_refused");
    }

    #[test]
    fn sources_are_searched_for_bundles() {
        let dir = tempfile::tempdir().unwrap();
        skill(&dir.path().join("skills/a"), "a");
        skill(&dir.path().join("skills/b"), "b");
        let found = find_bundles(dir.path()).unwrap();
        assert_eq!(found, vec![dir.path().join("skills/a"), dir.path().join("skills/b")]);
    }
}
