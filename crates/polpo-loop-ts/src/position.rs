//! Where things are in a `.ts` loop: byte offsets as 1-based line and column, and the source
//! offset of every value of the compiled JSON, so a problem found later in the JSON (a shape or
//! graph rule) is shown at the line the user wrote.

use polpo_core::problem::Problem;
use std::collections::BTreeMap;

/// 1-based line and column (in characters) of byte `offset` of `source`.
pub fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.bytes().filter(|b| *b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// A problem at byte `offset` of the `.ts` file `file`.
pub fn problem_at(code: &str, message: impl Into<String>, file: &str, source: &str, offset: usize) -> Problem {
    let (line, column) = line_column(source, offset);
    Problem::new(code, message).in_file(file).at_line(line, column)
}

/// The source offset of each JSON pointer of a compiled loop. Offsets become lines and columns
/// only when a problem needs one, so recording stays linear in the file's size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions {
    source: String,
    offsets: BTreeMap<String, usize>,
}

impl Positions {
    /// No positions yet, for values compiled from `source`.
    pub(crate) fn new(source: &str) -> Self {
        Self { source: source.to_owned(), offsets: BTreeMap::new() }
    }

    /// Records where the value at `pointer` was written. The first writer wins: a helper call
    /// and its object argument land on the same pointer, and the call comes first.
    pub(crate) fn record(&mut self, pointer: &str, offset: u32) {
        self.offsets.entry(pointer.to_owned()).or_insert(offset as usize);
    }

    /// Line and column of the value at `pointer`, or of its nearest recorded parent.
    pub fn find(&self, pointer: &str) -> Option<(usize, usize)> {
        let mut here = pointer;
        loop {
            if let Some(offset) = self.offsets.get(here) {
                return Some(line_column(&self.source, *offset));
            }
            here = &here[..here.rfind('/')?];
        }
    }

    /// `problem` with the line and column of its pointer added, when it has none yet.
    pub fn locate(&self, mut problem: Problem) -> Problem {
        if problem.line.is_none()
            && let Some((line, column)) = problem.pointer.as_deref().and_then(|p| self.find(p))
        {
            problem = problem.at_line(line, column);
        }
        problem
    }
}
