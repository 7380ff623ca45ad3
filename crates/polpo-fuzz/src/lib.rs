//! Fuzzing of Polpo's untrusted-input parsers on the stable toolchain.
//!
//! Requests, provider streams, `.polpo/` files (loops and their guard expressions included), hook
//! packs and model-written tool arguments all come from outside; each parser must answer every input with a value or a clear error, never a
//! panic or a broken invariant. `cargo fuzz` needs nightly, so this is a small coverage-blind
//! fuzzer built on proptest's generators and shrinking:
//!
//! - inputs are bytes: valid seeds mutated (bit flips, interesting bytes, deletions,
//!   duplications, dictionary tokens, splices), JSON documents built from the target's own field
//!   names, and raw noise;
//! - each target runs for a time budget (`POLPO_FUZZ_SECONDS`, default 3 s), with a fresh seed
//!   each run (`POLPO_FUZZ_SEED=<n>` replays one);
//! - a failing input is shrunk, written to `regressions/<target>/<hash>.bin` beside this crate,
//!   and the test fails naming it; every input kept there is replayed first on every run, so a
//!   crash once found stays a regression test.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Number, Value};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Default time budget per target: enough for tens of thousands of inputs in a debug build,
/// small enough for every CI run.
const DEFAULT_SECONDS: u64 = 3;
/// Most shrink steps spent on one failure.
const MAX_SHRINK_STEPS: usize = 20_000;

/// What a fuzz target checks: `Err` (or a panic) is a failure, with a sentence saying which
/// invariant broke.
pub type Property<'a> = &'a dyn Fn(&[u8]) -> Result<(), String>;

/// Runs `property` on the stored regressions of `target`, then on generated inputs until the
/// budget is spent. Panics (failing the test) with the saved input's path on the first failure.
pub fn fuzz(target: &str, inputs: impl Strategy<Value = Vec<u8>>, property: Property<'_>) {
    let dir = regressions_dir(target);
    for (path, bytes) in stored_inputs(&dir) {
        if let Some(why) = failure(property, &bytes) {
            panic!("{target}: regression {} fails again: {why}", path.display());
        }
    }
    let seed = seed();
    let mut runner = TestRunner::new_with_rng(Config::default(), rng(seed));
    let deadline = Instant::now() + budget();
    let mut cases = 0u64;
    while Instant::now() < deadline {
        let Ok(mut tree) = inputs.new_tree(&mut runner) else {
            continue;
        };
        cases += 1;
        let input = tree.current();
        if let Some(why) = failure(property, &input) {
            let (smaller, why) = shrink(&mut tree, property, input, why);
            let (smallest, why) = drop_bytes(property, smaller, why);
            let saved = save(&dir, &smallest);
            panic!(
                "{target}: {why}\n  input ({} bytes, saved as {saved}): {:?}\n  replay with POLPO_FUZZ_SEED={seed}",
                smallest.len(),
                String::from_utf8_lossy(&smallest)
            );
        }
    }
    eprintln!("{target}: {cases} inputs, seed {seed}, no failure");
}

/// Why `property` rejects `input`, if it does (a panic counts, with its message).
fn failure(property: Property<'_>, input: &[u8]) -> Option<String> {
    match catch_unwind(AssertUnwindSafe(|| property(input))) {
        Ok(Ok(())) => None,
        Ok(Err(why)) => Some(why),
        Err(panic) => Some(format!(
            "panicked: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        )),
    }
}

/// Proptest's shrinking: simplify while the input still fails, step back when it passes.
fn shrink(
    tree: &mut impl ValueTree<Value = Vec<u8>>,
    property: Property<'_>,
    mut best: Vec<u8>,
    mut why: String,
) -> (Vec<u8>, String) {
    if !tree.simplify() {
        return (best, why);
    }
    for _ in 0..MAX_SHRINK_STEPS {
        let candidate = tree.current();
        let more = match failure(property, &candidate) {
            Some(reason) => {
                (best, why) = (candidate, reason);
                tree.simplify()
            }
            None => tree.complicate(),
        };
        if !more {
            break;
        }
    }
    (best, why)
}

/// Then drop one byte at a time while the input still fails: proptest simplifies the mutations
/// that made an input, so a failure found on a grown seed (a byte duplicated, say) can stop
/// above what fails; a saved regression is the smallest input no single deletion passes.
fn drop_bytes(property: Property<'_>, mut best: Vec<u8>, mut why: String) -> (Vec<u8>, String) {
    let mut at = 0;
    for _ in 0..MAX_SHRINK_STEPS {
        if at >= best.len() {
            break;
        }
        let mut candidate = best.clone();
        candidate.remove(at);
        match failure(property, &candidate) {
            Some(reason) => (best, why) = (candidate, reason),
            None => at += 1,
        }
    }
    (best, why)
}

fn budget() -> Duration {
    let seconds = std::env::var("POLPO_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SECONDS);
    Duration::from_secs(seconds)
}

fn seed() -> u64 {
    std::env::var("POLPO_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    })
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

fn regressions_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions").join(target)
}

fn stored_inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| Some((entry.path(), std::fs::read(entry.path()).ok()?)))
        .collect();
    found.sort();
    found
}

/// Keeps a failing input where the next run replays it; says where, or why it could not.
fn save(dir: &Path, input: &[u8]) -> String {
    // FNV-1a: a stable name, so the same crash found twice is one file.
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    let path = dir.join(format!("{hash:016x}.bin"));
    match std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, input)) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("nowhere ({}: {e})", path.display()),
    }
}

/// One edit of a seed. Positions are taken modulo the input's length, so every mutation
/// applies to any seed and shrinking can drop mutations one by one.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Delete { at: usize, len: usize },
    Duplicate { at: usize, len: usize },
    Insert { at: usize, token: usize },
    Splice { at: usize, seed: usize },
}

/// Bytes that often sit on parser edges.
const INTERESTING: [u8; 14] = [0, b'"', b'\\', b'{', b'}', b'[', b']', b':', b',', b'\n', b'\r', 0x7f, 0xc3, 0xff];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), prop_oneof![any::<u8>(), proptest::sample::select(INTERESTING.to_vec())])
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
        (any::<usize>(), any::<usize>()).prop_map(|(at, token)| Mutation::Insert { at, token }),
        (any::<usize>(), any::<usize>()).prop_map(|(at, seed)| Mutation::Splice { at, seed }),
    ]
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation], seeds: &[Vec<u8>], dictionary: &[Vec<u8>]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len();
        let pos = |at: usize| if len == 0 { 0 } else { at % len };
        match *m {
            Mutation::Flip { at, bit } if len > 0 => bytes[pos(at)] ^= 1 << bit,
            Mutation::Set { at, byte } if len > 0 => bytes[pos(at)] = byte,
            Mutation::Delete { at, len: n } if len > 0 => {
                let start = pos(at);
                bytes.drain(start..(start + n).min(len));
            }
            Mutation::Duplicate { at, len: n } if len > 0 => {
                let start = pos(at);
                let piece = bytes[start..(start + n).min(len)].to_vec();
                bytes.splice(start..start, piece);
            }
            Mutation::Insert { at, token } if !dictionary.is_empty() => {
                let at = if len == 0 { 0 } else { at % (len + 1) };
                let token = &dictionary[token % dictionary.len()];
                bytes.splice(at..at, token.iter().copied());
            }
            Mutation::Splice { at, seed } if !seeds.is_empty() => {
                let other = &seeds[seed % seeds.len()];
                let cut = if len == 0 { 0 } else { at % len };
                let from = if other.is_empty() { 0 } else { at % other.len() };
                bytes.truncate(cut);
                bytes.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    bytes
}

/// A JSON value whose object keys and strings come from `words` (the target's own field names
/// and values) or are arbitrary, with numbers at the edges serde and validators must handle.
pub fn json_value(words: &[&str]) -> impl Strategy<Value = Value> + use<> {
    let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    let key = prop_oneof![4 => proptest::sample::select(words.clone()), 1 => ".{0,12}"];
    let text = prop_oneof![3 => proptest::sample::select(words), 1 => ".{0,40}"];
    let number = prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        proptest::num::f64::NORMAL.prop_filter_map("finite", Number::from_f64),
        proptest::sample::select(vec![0.0, -0.0, 1e308, -1e308, 5e-324, 0.5])
            .prop_filter_map("finite", Number::from_f64),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number.prop_map(Value::Number),
        text.prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, move |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(Value::Array),
            vec((key.clone(), inner), 0..8).prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// The usual input mix for a target: mutated `seeds` (most of the time), JSON built from
/// `words`, and raw bytes.
pub fn inputs(seeds: Vec<Vec<u8>>, words: &[&str]) -> impl Strategy<Value = Vec<u8>> + use<> {
    let dictionary: Vec<Vec<u8>> =
        words.iter().flat_map(|w| [w.as_bytes().to_vec(), format!("\"{w}\"").into_bytes()]).collect();
    let count = seeds.len().max(1);
    let mutated = (0..count, vec(mutation(), 0..8)).prop_map(move |(i, mutations)| {
        let seed = seeds.get(i).cloned().unwrap_or_default();
        apply(seed, &mutations, &seeds, &dictionary)
    });
    prop_oneof![
        6 => mutated,
        3 => json_value(words).prop_map(|v| v.to_string().into_bytes()),
        1 => vec(any::<u8>(), 0..256),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_property_is_shrunk_saved_and_then_replayed_first() {
        let target = format!("self-test-{}", std::process::id());
        let dir = regressions_dir(&target);
        let property: Property<'_> = &|input: &[u8]| {
            if input.windows(2).any(|w| w == b"{}") { Err("found {}".into()) } else { Ok(()) }
        };
        let seeds = vec![b"{\"a\": [1, 2, {}]}".to_vec()];
        let found = catch_unwind(AssertUnwindSafe(|| fuzz(&target, inputs(seeds.clone(), &["a"]), property)));
        let message = found.err().and_then(|p| p.downcast_ref::<String>().cloned()).unwrap_or_default();
        assert!(message.contains("found {}"), "{message}");
        let saved = stored_inputs(&dir);
        assert_eq!(saved.len(), 1, "one input kept");
        assert!(saved[0].1.len() <= seeds[0].len(), "the kept input is no larger than the seed");
        // The next run fails on the stored input before generating anything.
        let again = catch_unwind(AssertUnwindSafe(|| fuzz(&target, Just(Vec::new()), property)));
        let message = again.err().and_then(|p| p.downcast_ref::<String>().cloned()).unwrap_or_default();
        assert!(message.contains("regression"), "{message}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn mutations_apply_to_any_input_without_panicking() {
        let seeds = vec![Vec::new(), b"x".to_vec()];
        let all = [
            Mutation::Flip { at: 7, bit: 3 },
            Mutation::Set { at: 9, byte: 0 },
            Mutation::Delete { at: 3, len: 50 },
            Mutation::Duplicate { at: 1, len: 9 },
            Mutation::Insert { at: 99, token: 5 },
            Mutation::Splice { at: 4, seed: 1 },
        ];
        for seed in &seeds {
            let _ = apply(seed.clone(), &all, &seeds, &[b"tok".to_vec()]);
        }
        assert_eq!(apply(b"ab".to_vec(), &[Mutation::Insert { at: 1, token: 0 }], &seeds, &[b"Z".to_vec()]), b"aZb");
    }
}
