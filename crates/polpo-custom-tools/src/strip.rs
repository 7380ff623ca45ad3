//! A tool's source made runnable by Node: TypeScript types stripped in Rust (oxc), imports
//! checked and rewritten. Only relative imports that stay inside the tool folder (no
//! symlinks) and the two bridged packages (`@polpo-ai/tools`, `@sinclair/typebox`) are
//! allowed; `import(...)` is refused, so nothing is loaded that was not checked here.

use crate::CustomToolError;
use oxc_allocator::Allocator;
use oxc_codegen::Codegen;
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;
use oxc_transformer::{TransformOptions, Transformer};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Packages the bridge provides, and the module each import is pointed at.
pub const BRIDGED: [(&str, &str); 2] =
    [("@polpo-ai/tools", "__polpo_tools.mjs"), ("@sinclair/typebox", "__polpo_typebox.mjs")];
/// Most source files one tool may import.
const MAX_FILES: usize = 64;
/// Largest source file.
const MAX_SOURCE_BYTES: u64 = 1024 * 1024;

fn invalid(message: String) -> CustomToolError {
    CustomToolError::Source(message)
}

/// Compile `entry` (inside `dir`) and every file it imports into `out` as `.mjs` modules with
/// the same relative layout; returns the entry's output path.
pub fn compile_tree(dir: &Path, entry: &Path, out: &Path) -> Result<PathBuf, CustomToolError> {
    let root = dir.canonicalize().map_err(|e| invalid(format!("tool folder: {e}")))?;
    let mut pending = vec![entry.to_path_buf()];
    let mut done = BTreeSet::new();
    while let Some(file) = pending.pop() {
        let real = checked(&root, &file)?;
        if !done.insert(real.clone()) {
            continue;
        }
        if done.len() > MAX_FILES {
            return Err(invalid(format!("a tool may import at most {MAX_FILES} files")));
        }
        let source = polpo_project::fsx::read_bounded(&real, MAX_SOURCE_BYTES)
            .map_err(|e| invalid(format!("{}: {e}", display(&root, &real))))
            .and_then(|b| {
                String::from_utf8(b).map_err(|_| invalid(format!("{} is not UTF-8", display(&root, &real))))
            })?;
        let relative = real.strip_prefix(&root).map_err(|_| invalid("outside the tool folder".into()))?;
        let depth = relative.components().count().saturating_sub(1);
        let (code, imports) = compile(&real, &source, depth)?;
        for import in imports {
            pending.push(resolve(real.parent().unwrap_or(&root), &import)?);
        }
        let target = out.join(relative).with_extension("mjs");
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| CustomToolError::Io(e.to_string()))?;
        }
        std::fs::write(&target, code).map_err(|e| CustomToolError::Io(e.to_string()))?;
    }
    let relative = checked(&root, entry)?.strip_prefix(&root).map(Path::to_path_buf).unwrap_or_default();
    Ok(out.join(relative).with_extension("mjs"))
}

/// The real path of `file`, which must be a regular file (not a symlink) inside `root`.
fn checked(root: &Path, file: &Path) -> Result<PathBuf, CustomToolError> {
    let meta = std::fs::symlink_metadata(file).map_err(|_| invalid(format!("{} does not exist", file.display())))?;
    if meta.file_type().is_symlink() || !meta.is_file() {
        return Err(invalid(format!("{} is a symlink or not a file", file.display())));
    }
    let real = file.canonicalize().map_err(|e| invalid(e.to_string()))?;
    if !real.starts_with(root) {
        return Err(invalid(format!("{} is outside the tool folder", file.display())));
    }
    Ok(real)
}

/// The file a relative specifier names: as written, or with `.ts`, `.js` or `.mjs` added.
fn resolve(from: &Path, specifier: &str) -> Result<PathBuf, CustomToolError> {
    let base = from.join(specifier);
    ["", ".ts", ".js", ".mjs"]
        .iter()
        .map(|ext| PathBuf::from(format!("{}{ext}", base.display())))
        .find(|p| p.is_file())
        .ok_or_else(|| invalid(format!("import `{specifier}` names no file of the tool folder")))
}

fn display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// One file: imports checked and rewritten, then types stripped. Returns the code and the
/// relative specifiers it imports. `depth` is how deep the file sits in the tool folder (the
/// bridged modules live at its top).
pub fn compile(path: &Path, source: &str, depth: usize) -> Result<(String, Vec<String>), CustomToolError> {
    let source_type =
        SourceType::from_path(path).map_err(|_| invalid(format!("{}: unknown extension", path.display())))?;
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, source, source_type).parse();
    if let Some(error) = parsed.diagnostics.errors().next() {
        return Err(invalid(format!("{}: {error}", path.display())));
    }
    if !parsed.module_record.dynamic_imports.is_empty() {
        return Err(invalid(format!("{}: import(...) is not allowed; use a static import", path.display())));
    }
    let up = "../".repeat(depth);
    let mut edits = Vec::new();
    let mut relative = Vec::new();
    for (specifier, requests) in &parsed.module_record.requested_modules {
        let specifier = specifier.as_str();
        let target = if let Some((_, module)) = BRIDGED.iter().find(|(name, _)| *name == specifier) {
            format!("./{up}{module}")
        } else if specifier.starts_with("./") || specifier.starts_with("../") {
            relative.push(specifier.to_string());
            let stem = ["ts", "js", "mjs"]
                .iter()
                .find_map(|ext| specifier.strip_suffix(&format!(".{ext}")))
                .unwrap_or(specifier);
            format!("{stem}.mjs")
        } else {
            return Err(invalid(format!(
                "{}: import of `{specifier}`: only files of the tool folder, @polpo-ai/tools and @sinclair/typebox can be imported",
                path.display()
            )));
        };
        for request in requests {
            edits.push((request.span.start as usize, request.span.end as usize, format!("\"{target}\"")));
        }
    }
    edits.sort_by_key(|(start, _, _)| std::cmp::Reverse(*start));
    let mut rewritten = source.to_string();
    for (start, end, text) in edits {
        rewritten.replace_range(start..end, &text);
    }
    Ok((strip_types(path, &rewritten, source_type)?, relative))
}

/// `source` without TypeScript syntax, as plain ES module code.
fn strip_types(path: &Path, source: &str, source_type: SourceType) -> Result<String, CustomToolError> {
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, source, source_type).parse();
    if let Some(error) = parsed.diagnostics.errors().next() {
        return Err(invalid(format!("{}: {error}", path.display())));
    }
    let mut program = parsed.program;
    let scoping = SemanticBuilder::new().with_enum_eval(true).build(&program).semantic.into_scoping();
    let options = TransformOptions::from_target("esnext").map_err(invalid)?;
    let transformed = Transformer::new(&allocator, path, &options).build_with_scoping(scoping, &mut program);
    if let Some(error) = transformed.diagnostics.errors().next() {
        return Err(invalid(format!("{}: {error}", path.display())));
    }
    Ok(Codegen::new().build(&program).code)
}
