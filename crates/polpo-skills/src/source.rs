//! Where `polpo skills add` and `update` get bundles: a local folder, a local or remote git
//! repository (cloned shallow by the `git` binary, bounded in time, never prompting), or
//! `owner/repo`, which means `https://github.com/owner/repo`. A source may hold one bundle at
//! its root or several below it (`skills/<name>/SKILL.md`, …); `--skill` picks by name.

use polpo_project::skills::{LockEntry, SkillBundle, SkillError, find_bundles, read_bundle};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a `git` command may take before it is killed.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(300);

/// A source as the user named it, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A plain local folder (its content hash is its revision).
    Folder(PathBuf),
    /// A git repository: a URL, or the absolute path of a local repository.
    Git(String),
}

impl Source {
    /// Resolve `spec` (relative paths against `cwd`): an existing folder (a git repository when
    /// it has `.git`), a URL, or `owner/repo` on GitHub.
    pub fn parse(spec: &str, cwd: &Path) -> Result<Self, SkillError> {
        let path = cwd.join(spec);
        if path.is_dir() {
            let path = path.canonicalize().map_err(SkillError::io("resolve", &path))?;
            return Ok(if path.join(".git").exists() {
                Self::Git(path.display().to_string())
            } else {
                Self::Folder(path)
            });
        }
        if spec.contains("://") || spec.starts_with("git@") {
            return Ok(Self::Git(spec.to_owned()));
        }
        let part = |p: &str| {
            !p.is_empty() && !p.starts_with('.') && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        match spec.split_once('/') {
            Some((owner, repo)) if part(owner) && part(repo) => Ok(Self::Git(format!("https://github.com/{spec}"))),
            _ => Err(SkillError::Source(format!(
                "`{spec}` is not a folder, a git URL or owner/repo (a GitHub repository)"
            ))),
        }
    }

    /// The source as the lock records it (and `update` parses again).
    pub fn recorded(&self) -> String {
        match self {
            Self::Folder(path) => path.display().to_string(),
            Self::Git(url) => url.clone(),
        }
    }
}

/// A source on disk: the folder to search, and the git commit when it is a repository.
#[derive(Debug)]
pub struct Checkout {
    /// The clone (removed when the checkout is dropped); `None` for a plain folder.
    _clone: Option<tempfile::TempDir>,
    /// Where its files are.
    pub root: PathBuf,
    /// The commit checked out (`None` for a plain folder).
    pub commit: Option<String>,
}

/// Make `source` readable on disk: a folder as it is; a repository cloned shallow into a
/// temporary folder.
pub fn checkout(source: &Source) -> Result<Checkout, SkillError> {
    let url = match source {
        Source::Folder(path) => return Ok(Checkout { _clone: None, root: path.clone(), commit: None }),
        // A local path is cloned through file://, which honours --depth.
        Source::Git(url) if url.starts_with('/') => format!("file://{url}"),
        Source::Git(url) => url.clone(),
    };
    let tmp = tempfile::tempdir().map_err(|e| SkillError::Source(format!("cannot make a temporary folder: {e}")))?;
    let root = tmp.path().join("repo");
    let dest = root.display().to_string();
    git(&["clone", "--depth", "1", "--quiet", "--", &url, &dest], None)?;
    let commit = git(&["rev-parse", "HEAD"], Some(&root))?.trim().to_owned();
    Ok(Checkout { _clone: Some(tmp), root, commit: Some(commit) })
}

/// One bundle found in a checkout.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its folder relative to the source root (`None`: the root itself).
    pub path: Option<String>,
    /// The bundle.
    pub bundle: SkillBundle,
}

impl Found {
    /// The lock entry recording where this bundle came from.
    pub fn lock_entry(&self, source: &Source, checkout: &Checkout) -> LockEntry {
        let hash = self.bundle.hash();
        LockEntry {
            source: source.recorded(),
            path: self.path.clone(),
            revision: checkout.commit.clone().unwrap_or_else(|| hash.clone()),
            hash,
        }
    }
}

/// The bundles of `checkout`, only those named in `wanted` when it is not empty (each must be
/// there). A bundle that does not read (a symlink, bad front matter) fails the whole pick.
pub fn pick(checkout: &Checkout, wanted: &[String]) -> Result<Vec<Found>, SkillError> {
    let mut found = Vec::new();
    for dir in find_bundles(&checkout.root)? {
        let rel = dir.strip_prefix(&checkout.root).unwrap_or(&dir).to_string_lossy().into_owned();
        let name_of_dir = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        // Only read what was asked for, so one broken bundle does not block picking another.
        if !wanted.is_empty() && !name_of_dir.as_ref().is_some_and(|n| wanted.contains(n)) && !rel.is_empty() {
            continue;
        }
        let bundle = read_bundle(&dir)?;
        if wanted.is_empty() || wanted.contains(&bundle.meta.name) {
            found.push(Found { path: (!rel.is_empty()).then_some(rel), bundle });
        }
    }
    if let Some(missing) = wanted.iter().find(|w| !found.iter().any(|f| f.bundle.meta.name == **w)) {
        return Err(SkillError::NotFound(format!("skill `{missing}` in the source")));
    }
    if found.is_empty() {
        return Err(SkillError::NotFound("a SKILL.md in the source".into()));
    }
    Ok(found)
}

/// Fetch again the bundle `name` that `entry` records, for `update`: its lock entry as it
/// would be now, and the bundle.
pub fn refetch(name: &str, entry: &LockEntry) -> Result<(LockEntry, Found), SkillError> {
    let source = if Path::new(&entry.source).is_absolute() {
        Source::parse(&entry.source, Path::new("/"))?
    } else {
        Source::Git(entry.source.clone())
    };
    let checkout = checkout(&source)?;
    let dir = match &entry.path {
        Some(rel) => checkout.root.join(rel),
        None => checkout.root.clone(),
    };
    let bundle = read_bundle(&dir)?;
    if bundle.meta.name != name {
        return Err(SkillError::Source(format!(
            "the source now holds skill `{}` where `{name}` was",
            bundle.meta.name
        )));
    }
    let found = Found { path: entry.path.clone(), bundle };
    Ok((found.lock_entry(&source, &checkout), found))
}

/// Run `git` with `args` (in `dir`), never prompting, killed after [`GIT_TIMEOUT`]; its
/// standard output on success, its error output in the error otherwise.
fn git(args: &[&str], dir: Option<&Path>) -> Result<String, SkillError> {
    let fail = |e: std::io::Error| SkillError::Source(format!("cannot run git: {e}"));
    let out = tempfile::tempfile().map_err(fail)?;
    let err = tempfile::tempfile().map_err(fail)?;
    let mut command = Command::new("git");
    command
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(fail)?)
        .stderr(err.try_clone().map_err(fail)?);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command.spawn().map_err(fail)?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(fail)? {
            break status;
        }
        if started.elapsed() > GIT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SkillError::Source(format!("git {} took longer than {GIT_TIMEOUT:?}", args[0])));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |mut f: std::fs::File| {
        use std::io::{Read, Seek};
        let mut text = String::new();
        let _ = f.rewind().and_then(|()| f.take(64 * 1024).read_to_string(&mut text));
        text
    };
    if status.success() {
        Ok(read(out))
    } else {
        Err(SkillError::Source(format!("git {} failed: {}", args[0], read(err).trim())))
    }
}
