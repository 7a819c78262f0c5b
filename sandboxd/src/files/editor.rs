//! The `str_replace_editor` tool (Anthropic's text editor tool, as AIO serves it): view a file
//! with line numbers or a directory two levels deep, create a file, replace a unique string,
//! insert after a line, and undo the last edit of a file.
//!
//! The undo history lives in memory, keyed by the file's real path, bounded in entries and
//! bytes (oldest edits are forgotten first).

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::unistd::{UnlinkatFlags, unlinkat};

use super::confine::Resolved;
use super::content::{WriteMode, lines};
use super::walk::{Visit, WalkOptions, walk};
use super::{FileError, Files};

/// Lines of context around an edit in the snippet the tool shows.
const SNIPPET_LINES: usize = 4;
/// The history keeps at most this many edits ...
const MAX_HISTORY_ENTRIES: usize = 1_000;
/// ... holding at most this many bytes of earlier content.
const MAX_HISTORY_BYTES: usize = 64 * 1024 * 1024;
/// A directory view lists at most this many entries.
const MAX_VIEW_ENTRIES: usize = 2_000;

/// How `str_replace` treats several occurrences of `old_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceMode {
    All,
    First,
    Last,
}

#[derive(Debug, Clone)]
pub enum EditorCommand {
    /// `view_range`: `[start, end]`, 1-based and inclusive; `end` -1 means to the end.
    View {
        view_range: Option<Vec<i64>>,
    },
    Create {
        file_text: String,
    },
    /// Without a mode, `old_str` must occur exactly once.
    StrReplace {
        old_str: String,
        new_str: String,
        mode: Option<ReplaceMode>,
    },
    /// Inserts `new_str` after line `insert_line` (0: at the top).
    Insert {
        insert_line: u64,
        new_str: String,
    },
    UndoEdit,
}

#[derive(Debug, Clone)]
pub struct EditorOutcome {
    /// What the tool says, for the model to read.
    pub output: String,
    pub path: PathBuf,
    /// Whether the path existed before the command.
    pub prev_exist: bool,
    pub old_content: Option<String>,
    pub new_content: Option<String>,
    pub metadata: Option<EditorMetadata>,
}

#[derive(Debug, Clone, Copy)]
pub struct EditorMetadata {
    pub is_directory: bool,
    pub size: u64,
    pub lines: u64,
}

/// Earlier contents of edited files. `None` records that the file did not exist (an undo of
/// `create` removes it).
#[derive(Debug, Default)]
pub struct History {
    inner: Mutex<HistoryInner>,
}

#[derive(Debug, Default)]
struct HistoryInner {
    entries: VecDeque<(PathBuf, Option<Vec<u8>>)>,
    bytes: usize,
}

impl History {
    fn push(&self, path: &Path, before: Option<Vec<u8>>) {
        let size = before.as_ref().map_or(0, Vec::len);
        if size > MAX_HISTORY_BYTES {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.bytes += size;
        inner.entries.push_back((path.to_path_buf(), before));
        while inner.entries.len() > MAX_HISTORY_ENTRIES || inner.bytes > MAX_HISTORY_BYTES {
            match inner.entries.pop_front() {
                Some((_, old)) => inner.bytes -= old.map_or(0, |o| o.len()),
                None => break,
            }
        }
    }

    /// The latest earlier content of `path`, removed from the history. The outer `None`: no
    /// edit of this file is remembered.
    fn pop(&self, path: &Path) -> Option<Option<Vec<u8>>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let index = inner.entries.iter().rposition(|(p, _)| p == path)?;
        let (_, before) = inner.entries.remove(index)?;
        inner.bytes -= before.as_ref().map_or(0, Vec::len);
        Some(before)
    }

    /// Puts an entry back after a failed undo.
    fn restore(&self, path: &Path, before: Option<Vec<u8>>) {
        self.push(path, before);
    }
}

impl Files {
    pub fn editor(
        &self,
        path: &OsStr,
        command: EditorCommand,
        with_metadata: bool,
    ) -> Result<EditorOutcome, FileError> {
        let r = self.confine.resolve(path)?;
        let shown = r.requested.display().to_string();
        let mut outcome = match command {
            EditorCommand::View { view_range } => self.view(&r, &shown, view_range)?,
            EditorCommand::Create { file_text } => self.create(&r, &shown, file_text)?,
            EditorCommand::StrReplace {
                old_str,
                new_str,
                mode,
            } => self.str_replace(&r, &shown, &old_str, &new_str, mode)?,
            EditorCommand::Insert {
                insert_line,
                new_str,
            } => self.insert(&r, &shown, insert_line, &new_str)?,
            EditorCommand::UndoEdit => self.undo(&r, &shown)?,
        };
        if with_metadata {
            outcome.metadata = self.metadata(&r);
        }
        Ok(outcome)
    }

    fn view(
        &self,
        r: &Resolved,
        shown: &str,
        view_range: Option<Vec<i64>>,
    ) -> Result<EditorOutcome, FileError> {
        if !r.exists() {
            return Err(super::ConfineError::NotFound {
                path: r.requested.clone(),
            }
            .into());
        }
        if let Ok(dir) = self.open_directory(r) {
            if view_range.is_some() {
                return Err(FileError::invalid(
                    "view_range",
                    "view_range is not allowed when path is a directory",
                ));
            }
            let mut listing = format!(
                "Here's the files and directories up to 2 levels deep in {shown}, excluding \
                 hidden items:\n{shown}\n"
            );
            let options = WalkOptions {
                max_depth: 2,
                skip_hidden: true,
                max_entries: MAX_VIEW_ENTRIES,
            };
            let summary = walk(dir, &options, &mut |entry| {
                listing.push_str(&format!("{}\n", r.requested.join(entry.rel).display()));
                Visit::Continue
            });
            if summary.truncated {
                listing.push_str(&format!("(only the first {MAX_VIEW_ENTRIES} entries)\n"));
            }
            return Ok(EditorOutcome {
                output: listing,
                path: r.requested.clone(),
                prev_exist: true,
                old_content: None,
                new_content: None,
                metadata: None,
            });
        }
        let text = self.read_text(r, shown)?;
        let all: Vec<&str> = text_lines(&text);
        let (first, last) = match view_range {
            None => (1, all.len()),
            Some(range) => view_bounds(&range, all.len())?,
        };
        let body = numbered(&all[first.saturating_sub(1).min(all.len())..last], first);
        Ok(EditorOutcome {
            output: format!("Here's the result of running `cat -n` on {shown}:\n{body}"),
            path: r.requested.clone(),
            prev_exist: true,
            old_content: None,
            new_content: None,
            metadata: None,
        })
    }

    fn create(
        &self,
        r: &Resolved,
        shown: &str,
        file_text: String,
    ) -> Result<EditorOutcome, FileError> {
        if r.exists() {
            return Err(FileError::Conflict {
                message: format!(
                    "file already exists at {shown}; `create` does not overwrite files (use \
                     `str_replace`, or `/v1/file/write`)"
                ),
            });
        }
        self.check_write_size(&r.requested, file_text.len())?;
        self.write_bytes(r, file_text.as_bytes(), WriteMode::Truncate)?;
        self.history.push(&r.real, None);
        Ok(EditorOutcome {
            output: format!("File created successfully at: {shown}"),
            path: r.requested.clone(),
            prev_exist: false,
            old_content: None,
            new_content: Some(file_text),
            metadata: None,
        })
    }

    fn str_replace(
        &self,
        r: &Resolved,
        shown: &str,
        old_str: &str,
        new_str: &str,
        mode: Option<ReplaceMode>,
    ) -> Result<EditorOutcome, FileError> {
        if old_str.is_empty() {
            return Err(FileError::invalid("old_str", "old_str must not be empty"));
        }
        let text = self.read_text(r, shown)?;
        let positions: Vec<usize> = text.match_indices(old_str).map(|(at, _)| at).collect();
        let chosen: Vec<usize> = match (positions.len(), mode) {
            (0, _) => {
                return Err(FileError::invalid(
                    "old_str",
                    format!(
                        "no replacement was performed: old_str `{old_str}` did not appear \
                         verbatim in {shown}"
                    ),
                ));
            }
            (1, _) | (_, Some(ReplaceMode::All)) => positions.clone(),
            (_, Some(ReplaceMode::First)) => vec![positions[0]],
            (_, Some(ReplaceMode::Last)) => vec![positions[positions.len() - 1]],
            (_, None) => {
                let line_numbers: Vec<String> = positions
                    .iter()
                    .map(|&at| (text[..at].matches('\n').count() + 1).to_string())
                    .collect();
                return Err(FileError::invalid(
                    "old_str",
                    format!(
                        "no replacement was performed: old_str `{old_str}` occurs {} times in \
                         {shown} (lines {}); make it unique, or set replace_mode to ALL, FIRST \
                         or LAST",
                        positions.len(),
                        line_numbers.join(", ")
                    ),
                ));
            }
        };
        let mut edited = String::with_capacity(text.len() + chosen.len() * new_str.len());
        let mut last = 0;
        for &at in &chosen {
            edited.push_str(&text[last..at]);
            edited.push_str(new_str);
            last = at + old_str.len();
        }
        edited.push_str(&text[last..]);
        self.check_write_size(&r.requested, edited.len())?;
        self.write_bytes(r, edited.as_bytes(), WriteMode::Truncate)?;
        self.history.push(&r.real, Some(text.clone().into_bytes()));

        let first_line = edited[..chosen[0]].matches('\n').count();
        let snippet = snippet(&edited, first_line, new_str.matches('\n').count());
        Ok(EditorOutcome {
            output: format!(
                "The file {shown} has been edited. Here's the result of running `cat -n` on a \
                 snippet of {shown}:\n{snippet}Review the changes and make sure they are as \
                 expected. Edit the file again if necessary."
            ),
            path: r.requested.clone(),
            prev_exist: true,
            old_content: Some(text),
            new_content: Some(edited),
            metadata: None,
        })
    }

    fn insert(
        &self,
        r: &Resolved,
        shown: &str,
        insert_line: u64,
        new_str: &str,
    ) -> Result<EditorOutcome, FileError> {
        let text = self.read_text(r, shown)?;
        let all = text_lines(&text);
        let at = usize::try_from(insert_line).unwrap_or(usize::MAX);
        if at > all.len() {
            return Err(FileError::invalid(
                "insert_line",
                format!(
                    "insert_line {insert_line} is past the end of {shown}, which has {} lines \
                     (0 inserts at the top)",
                    all.len()
                ),
            ));
        }
        let inserted = text_lines(new_str);
        let inserted: Vec<&str> = if inserted.is_empty() {
            vec![""]
        } else {
            inserted
        };
        let mut joined: Vec<&str> = Vec::with_capacity(all.len() + inserted.len());
        joined.extend_from_slice(&all[..at]);
        joined.extend_from_slice(&inserted);
        joined.extend_from_slice(&all[at..]);
        let mut edited = joined.join("\n");
        if text.ends_with('\n') || text.is_empty() {
            edited.push('\n');
        }
        self.check_write_size(&r.requested, edited.len())?;
        self.write_bytes(r, edited.as_bytes(), WriteMode::Truncate)?;
        self.history.push(&r.real, Some(text.clone().into_bytes()));

        let snippet = snippet(&edited, at, inserted.len().saturating_sub(1));
        Ok(EditorOutcome {
            output: format!(
                "The file {shown} has been edited. Here's the result of running `cat -n` on a \
                 snippet of the edited file:\n{snippet}Review the changes and make sure they \
                 are as expected (correct indentation, no duplicate lines, etc). Edit the file \
                 again if necessary."
            ),
            path: r.requested.clone(),
            prev_exist: true,
            old_content: Some(text),
            new_content: Some(edited),
            metadata: None,
        })
    }

    fn undo(&self, r: &Resolved, shown: &str) -> Result<EditorOutcome, FileError> {
        let Some(before) = self.history.pop(&r.real) else {
            return Err(FileError::Conflict {
                message: format!("no edit history found for {shown}"),
            });
        };
        let current = if r.exists() {
            self.read_text(r, shown).ok()
        } else {
            None
        };
        let result = match &before {
            Some(content) => self.write_bytes(r, content, WriteMode::Truncate).map(|()| {
                let text = String::from_utf8_lossy(content).into_owned();
                let body = numbered(&text_lines(&text), 1);
                (
                    format!(
                        "Last edit to {shown} undone successfully. Here's the result of \
                             running `cat -n` on {shown}:\n{body}"
                    ),
                    Some(text),
                )
            }),
            None => self.remove_file(r).map(|()| {
                (
                    format!(
                        "Last edit to {shown} undone successfully: the file made by `create` \
                         was removed."
                    ),
                    None,
                )
            }),
        };
        match result {
            Ok((output, new_content)) => Ok(EditorOutcome {
                output,
                path: r.requested.clone(),
                prev_exist: r.exists(),
                old_content: current,
                new_content,
                metadata: None,
            }),
            Err(error) => {
                self.history.restore(&r.real, before);
                Err(error)
            }
        }
    }

    fn remove_file(&self, r: &Resolved) -> Result<(), FileError> {
        let (dir, name) = self.confine.open_parent(r)?;
        unlinkat(&dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir).map_err(|errno| {
            FileError::Io {
                op: "removing",
                path: r.requested.clone(),
                source: errno.into(),
            }
        })
    }

    fn read_text(&self, r: &Resolved, shown: &str) -> Result<String, FileError> {
        let bytes = self.read_limited(r)?;
        String::from_utf8(bytes).map_err(|error| {
            let message = match super::document::unsupported_format(&r.requested) {
                Some(format) => format!(
                    "{shown} is {format}, which the editor cannot read; it views text files, {}. \
                     Convert it to PDF or text first",
                    super::document::SUPPORTED_DOCUMENTS
                ),
                None => format!(
                    "{shown} is not UTF-8 text (invalid byte at offset {}); the editor works on \
                     text files",
                    error.utf8_error().valid_up_to()
                ),
            };
            FileError::invalid("path", message)
        })
    }

    fn metadata(&self, r: &Resolved) -> Option<EditorMetadata> {
        let meta = std::fs::symlink_metadata(&r.real).ok()?;
        let lines = if meta.is_file() {
            self.read_limited(r)
                .map(|bytes| lines(&bytes).count() as u64)
                .unwrap_or(0)
        } else {
            0
        };
        Some(EditorMetadata {
            is_directory: meta.is_dir(),
            size: meta.len(),
            lines,
        })
    }
}

/// The lines of a text without terminators; a final newline does not start another line.
fn text_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    text.strip_suffix('\n')
        .unwrap_or(text)
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// `[start, end]` (1-based, inclusive, end -1 = last line) as a checked `(first, last)`.
fn view_bounds(range: &[i64], count: usize) -> Result<(usize, usize), FileError> {
    let [start, end] = range else {
        return Err(FileError::invalid(
            "view_range",
            "view_range must hold two integers, [start, end]",
        ));
    };
    let count_i = count as i64;
    if *start < 1 || (*start > count_i && !(count == 0 && *start == 1)) {
        return Err(FileError::invalid(
            "view_range",
            format!("view_range start {start} must be between 1 and the number of lines ({count})"),
        ));
    }
    let last = match *end {
        -1 => count,
        end if end < *start => {
            return Err(FileError::invalid(
                "view_range",
                format!("view_range end {end} is before its start {start} (use -1 for the end)"),
            ));
        }
        end => usize::try_from(end).unwrap_or(usize::MAX).min(count),
    };
    Ok((*start as usize, last))
}

/// `cat -n` style: six-wide line number, tab, line.
fn numbered(lines: &[&str], first_number: usize) -> String {
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&format!("{:6}\t{}\n", first_number + i, line));
    }
    out
}

/// A few numbered lines around lines `first..=first + extra` (0-based) of `text`.
fn snippet(text: &str, first: usize, extra: usize) -> String {
    let all = text_lines(text);
    let start = first.saturating_sub(SNIPPET_LINES);
    let end = (first + extra + SNIPPET_LINES + 1).min(all.len());
    numbered(&all[start.min(end)..end], start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_ranges() {
        assert_eq!(view_bounds(&[1, -1], 5).unwrap(), (1, 5));
        assert_eq!(view_bounds(&[2, 3], 5).unwrap(), (2, 3));
        assert_eq!(view_bounds(&[2, 30], 5).unwrap(), (2, 5));
        assert!(view_bounds(&[0, 3], 5).is_err());
        assert!(view_bounds(&[6, -1], 5).is_err());
        assert!(view_bounds(&[3, 2], 5).is_err());
        assert!(view_bounds(&[3], 5).is_err());
    }

    #[test]
    fn history_is_bounded_and_per_path() {
        let history = History::default();
        let a = Path::new("/a");
        let b = Path::new("/b");
        history.push(a, Some(b"1".to_vec()));
        history.push(b, None);
        history.push(a, Some(b"2".to_vec()));
        assert_eq!(history.pop(a), Some(Some(b"2".to_vec())));
        assert_eq!(history.pop(b), Some(None));
        assert_eq!(history.pop(a), Some(Some(b"1".to_vec())));
        assert_eq!(history.pop(a), None);
        for i in 0..MAX_HISTORY_ENTRIES + 10 {
            history.push(a, Some(vec![i as u8]));
        }
        assert_eq!(
            history.inner.lock().unwrap().entries.len(),
            MAX_HISTORY_ENTRIES
        );
    }

    #[test]
    fn snippets_number_lines() {
        let text = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n";
        assert_eq!(
            snippet(text, 0, 0),
            "     1\t1\n     2\t2\n     3\t3\n     4\t4\n     5\t5\n"
        );
        assert!(snippet(text, 9, 0).starts_with("     6\t6\n"));
    }
}
