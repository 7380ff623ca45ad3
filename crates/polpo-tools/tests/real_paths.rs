//! `resolve_real_path` walks a path the way the kernel does. On random trees of directories,
//! files and symlinks (relative, absolute, dangling, looping) and random paths through them —
//! `.`, `..`, `//`, names that do not exist — it agrees with `realpath(3)` wherever that
//! resolves, and everywhere with the plain component-by-component walk it replaced (kept here
//! as the reference: the sandbox's verdicts must not move with an optimisation). A plain path
//! with no symlink on it is answered by one `openat2`, any other walked: both meet here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_tools::sandbox::resolve_real_path;
use proptest::prelude::*;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// What one name in the tree is.
#[derive(Debug, Clone)]
enum Node {
    Absent,
    File,
    Dir,
    /// A symlink to this target; `@` stands for the tree's root.
    Link(&'static str),
}

const NAMES: [&str; 3] = ["a", "b", "c"];
const TARGETS: [&str; 9] = ["a", "../b", "@/a/c", "@/b", "missing", "c/..", "..", "b/../a/c", "a/b/c"];
const PARTS: [&str; 7] = ["a", "b", "c", "..", ".", "", "missing"];

fn node() -> impl Strategy<Value = Node> {
    prop_oneof![
        Just(Node::Absent),
        Just(Node::File),
        Just(Node::Dir),
        Just(Node::Dir),
        proptest::sample::select(TARGETS.to_vec()).prop_map(Node::Link),
    ]
}

/// Top-level nodes `a b c`, and the same three inside each top-level one that is a directory.
fn tree() -> impl Strategy<Value = (Vec<Node>, Vec<Node>)> {
    (proptest::collection::vec(node(), 3), proptest::collection::vec(node(), 9))
}

fn build(root: &Path, at: &Path, node: &Node) {
    match node {
        Node::Absent => {}
        Node::File => std::fs::write(at, "x").unwrap(),
        Node::Dir => std::fs::create_dir_all(at).unwrap(),
        Node::Link(target) => {
            let target = target.replace('@', root.to_str().unwrap());
            std::os::unix::fs::symlink(target, at).unwrap();
        }
    }
}

/// The walk `resolve_real_path` replaced: components pushed on a stack, each joined onto the
/// resolved path and looked at with `lstat`.
fn reference(path: &Path) -> io::Result<PathBuf> {
    fn push(pending: &mut Vec<OsString>, path: &Path) {
        let parts: Vec<OsString> = path
            .components()
            .map(|c| match c {
                Component::RootDir | Component::Prefix(_) => OsString::from("/"),
                Component::CurDir => OsString::from("."),
                Component::ParentDir => OsString::from(".."),
                Component::Normal(name) => name.to_owned(),
            })
            .collect();
        pending.extend(parts.into_iter().rev());
    }
    let mut pending = Vec::new();
    push(&mut pending, path);
    let mut resolved = PathBuf::from("/");
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        match part.to_str() {
            Some("/") => resolved = PathBuf::from("/"),
            Some(".") => {}
            Some("..") => {
                resolved.pop();
            }
            _ => {
                let candidate = resolved.join(&part);
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        hops += 1;
                        if hops > 40 {
                            return Err(io::Error::other("loop"));
                        }
                        push(&mut pending, &std::fs::read_link(&candidate)?);
                    }
                    Ok(_) => resolved = candidate,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => resolved = candidate,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(resolved)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn resolving_agrees_with_realpath_and_with_the_component_walk(
        (top, inner) in tree(),
        parts in proptest::collection::vec(proptest::sample::select(PARTS.to_vec()), 0..7),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for (i, name) in NAMES.iter().enumerate() {
            build(&root, &root.join(name), &top[i]);
            if matches!(top[i], Node::Dir) {
                for (j, inner_name) in NAMES.iter().enumerate() {
                    build(&root, &root.join(name).join(inner_name), &inner[i * 3 + j]);
                }
            }
        }
        let query = PathBuf::from(format!("{}/{}", root.display(), parts.join("/")));
        let ours = resolve_real_path(&query);
        let expected = reference(&query);
        prop_assert_eq!(ours.is_ok(), expected.is_ok(), "{:?}: {:?} vs {:?}", query, ours, expected);
        if let (Ok(ours), Ok(expected)) = (&ours, &expected) {
            prop_assert_eq!(ours, expected, "{:?}", query);
        }
        if let Ok(real) = std::fs::canonicalize(&query) {
            prop_assert_eq!(ours.as_ref().ok(), Some(&real), "{:?}", query);
        }
    }
}
