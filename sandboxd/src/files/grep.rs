//! Regex (or fixed-string) search across the files below a path, in the manner of ripgrep:
//! hidden files and directories are skipped, binary files (a NUL byte in the first 8 KiB) and
//! files over a size are skipped, symlinks are not followed, line numbers are 1-based.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

use globset::GlobSet;
use regex::bytes::{Regex, RegexBuilder};

use super::content::lines;
use super::listing::{MAX_WALK_ENTRIES, compile_set};
use super::walk::{MAX_WALK_DEPTH, Visit, WalkOptions, open_file_in, walk};
use super::{FileError, Files, Kind};

/// The most context lines on either side of a match.
pub const MAX_CONTEXT_LINES: usize = 20;
/// The largest `max_results`.
pub const MAX_GREP_RESULTS: usize = 10_000;
/// Lines longer than this are cut (with `…` appended) in answers.
pub const MAX_LINE_CHARS: usize = 2_000;
/// How much of a file is checked for NUL bytes to decide it is binary.
const BINARY_PROBE: usize = 8 * 1024;

#[derive(Debug, Clone)]
pub struct GrepRequest<'a> {
    pub path: &'a OsStr,
    pub pattern: &'a str,
    /// Globs a file's name or relative path must match (any of them), when not empty.
    pub include: Vec<String>,
    /// Globs that leave out files and whole directories, by name or relative path.
    pub exclude: Vec<String>,
    pub case_insensitive: bool,
    pub fixed_strings: bool,
    pub context_before: usize,
    pub context_after: usize,
    pub max_results: usize,
    /// Files larger than this are skipped.
    pub max_file_size: u64,
    /// `.` matches newlines and matches may span lines.
    pub multiline: bool,
    /// Matches to skip before the first returned (pagination).
    pub offset: usize,
    /// A ripgrep type name (`py`, `rust`, ...); see [`type_globs`].
    pub file_type: Option<&'a str>,
    pub recursive: bool,
}

#[derive(Debug, Clone)]
pub struct GrepMatch {
    pub file: PathBuf,
    /// 1-based.
    pub line_number: u64,
    /// The matching line (for a multiline match, the lines it spans joined with `\n`).
    pub line_content: String,
    pub context_before: Vec<String>,
    pub context_after: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct GrepOutcome {
    pub path: PathBuf,
    pub pattern: String,
    pub matches: Vec<GrepMatch>,
    pub files_searched: usize,
    pub files_matched: usize,
    /// More matches exist than were returned, or the walk stopped at its entry limit.
    pub truncated: bool,
}

/// File globs for the ripgrep type names agents use most.
pub fn type_globs(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "c" => &["*.c", "*.h"],
        "cpp" => &["*.cpp", "*.cc", "*.cxx", "*.hpp", "*.hh", "*.hxx", "*.h"],
        "css" => &["*.css", "*.scss", "*.sass", "*.less"],
        "csv" => &["*.csv"],
        "go" => &["*.go"],
        "html" => &["*.html", "*.htm"],
        "java" => &["*.java"],
        "js" => &["*.js", "*.jsx", "*.mjs", "*.cjs"],
        "json" => &["*.json"],
        "kotlin" => &["*.kt", "*.kts"],
        "lua" => &["*.lua"],
        "md" | "markdown" => &["*.md", "*.markdown"],
        "php" => &["*.php"],
        "py" | "python" => &["*.py", "*.pyi"],
        "rb" | "ruby" => &["*.rb"],
        "rust" => &["*.rs"],
        "sh" => &["*.sh", "*.bash", "*.zsh"],
        "sql" => &["*.sql"],
        "swift" => &["*.swift"],
        "toml" => &["*.toml"],
        "ts" | "typescript" => &["*.ts", "*.tsx", "*.mts", "*.cts"],
        "txt" => &["*.txt"],
        "xml" => &["*.xml"],
        "yaml" => &["*.yaml", "*.yml"],
        _ => return None,
    })
}

const TYPE_NAMES: &str = "c, cpp, css, csv, go, html, java, js, json, kotlin, lua, md, php, py, \
                          rb, rust, sh, sql, swift, toml, ts, txt, xml, yaml";

/// The compiled parts of a request.
struct Searcher {
    regex: Regex,
    multiline: bool,
    before: usize,
    after: usize,
    /// Stop once this many matches are found (offset + max_results + 1 to know about more).
    wanted: usize,
    offset: usize,
    max_results: usize,
    found: usize,
    matches: Vec<GrepMatch>,
    files_searched: usize,
    files_matched: usize,
}

impl Files {
    pub fn grep(&self, request: &GrepRequest<'_>) -> Result<GrepOutcome, FileError> {
        if request.context_before > MAX_CONTEXT_LINES {
            return Err(FileError::invalid(
                "context_before",
                format!("context_before must be at most {MAX_CONTEXT_LINES}"),
            ));
        }
        if request.context_after > MAX_CONTEXT_LINES {
            return Err(FileError::invalid(
                "context_after",
                format!("context_after must be at most {MAX_CONTEXT_LINES}"),
            ));
        }
        if request.max_results == 0 || request.max_results > MAX_GREP_RESULTS {
            return Err(FileError::invalid(
                "max_results",
                format!("max_results must be between 1 and {MAX_GREP_RESULTS}"),
            ));
        }
        let source = if request.fixed_strings {
            regex::escape(request.pattern)
        } else {
            request.pattern.to_string()
        };
        let regex = RegexBuilder::new(&source)
            .case_insensitive(request.case_insensitive)
            .multi_line(true)
            .dot_matches_new_line(request.multiline)
            .build()
            .map_err(|error| FileError::invalid("pattern", format!("invalid regex: {error}")))?;
        let mut include = request.include.clone();
        if let Some(name) = request.file_type {
            let globs = type_globs(name).ok_or_else(|| {
                FileError::invalid(
                    "type",
                    format!("unknown file type {name:?}; known types: {TYPE_NAMES}"),
                )
            })?;
            include.extend(globs.iter().map(|g| g.to_string()));
        }
        let include = (!include.is_empty())
            .then(|| compile_set("include", &include))
            .transpose()?;
        let exclude = compile_set("exclude", &request.exclude)?;

        let mut searcher = Searcher {
            regex,
            multiline: request.multiline,
            before: request.context_before,
            after: request.context_after,
            wanted: request
                .offset
                .saturating_add(request.max_results)
                .saturating_add(1),
            offset: request.offset,
            max_results: request.max_results,
            found: 0,
            matches: Vec::new(),
            files_searched: 0,
            files_matched: 0,
        };

        let r = self.confine.resolve(request.path)?;
        let file = self.open_regular(&r);
        let mut walk_truncated = false;
        match file {
            // A single file: searched whatever its name, as ripgrep does with explicit paths.
            Ok(file) => {
                if let Some(content) = read_searchable(file, request.max_file_size) {
                    searcher.search_file(&r.requested, &content);
                }
            }
            Err(FileError::Path(super::ConfineError::IsADirectory { .. })) => {
                let dir = self.open_directory(&r)?;
                let options = WalkOptions {
                    max_depth: if request.recursive { MAX_WALK_DEPTH } else { 1 },
                    skip_hidden: true,
                    max_entries: MAX_WALK_ENTRIES,
                };
                let summary = walk(dir, &options, &mut |entry| {
                    if matches_any(&exclude, entry.rel, entry.name) {
                        return Visit::Skip;
                    }
                    if entry.meta.kind != Kind::File
                        || entry.meta.size > request.max_file_size
                        || include
                            .as_ref()
                            .is_some_and(|set| !matches_any(set, entry.rel, entry.name))
                    {
                        return Visit::Continue;
                    }
                    let Some(file) = open_file_in(entry.dir, entry.name) else {
                        return Visit::Continue;
                    };
                    if let Some(content) = read_searchable(file, request.max_file_size) {
                        searcher.search_file(&r.requested.join(entry.rel), &content);
                    }
                    if searcher.found >= searcher.wanted {
                        Visit::Stop
                    } else {
                        Visit::Continue
                    }
                });
                walk_truncated = summary.truncated;
            }
            Err(error) => return Err(error),
        }
        let truncated = walk_truncated || searcher.found >= searcher.wanted;
        Ok(GrepOutcome {
            path: r.requested,
            pattern: request.pattern.to_string(),
            matches: searcher.matches,
            files_searched: searcher.files_searched,
            files_matched: searcher.files_matched,
            truncated,
        })
    }
}

fn matches_any(set: &GlobSet, rel: &Path, name: &OsStr) -> bool {
    set.is_match(rel) || set.is_match(name)
}

/// The content of a file worth searching: not larger than `max_size`, not binary.
fn read_searchable(file: std::fs::File, max_size: u64) -> Option<Vec<u8>> {
    let size = file.metadata().ok()?.len();
    if size > max_size {
        return None;
    }
    let mut content = Vec::with_capacity(size as usize);
    file.take(max_size.saturating_add(1))
        .read_to_end(&mut content)
        .ok()?;
    if content.len() as u64 > max_size {
        return None;
    }
    let probe = &content[..content.len().min(BINARY_PROBE)];
    if memchr::memchr(0, probe).is_some() {
        return None;
    }
    Some(content)
}

impl Searcher {
    fn search_file(&mut self, path: &Path, content: &[u8]) {
        self.files_searched += 1;
        let before = self.found;
        if self.multiline {
            self.search_multiline(path, content);
        } else {
            self.search_lines(path, content);
        }
        if self.found > before {
            self.files_matched += 1;
        }
    }

    fn search_lines(&mut self, path: &Path, content: &[u8]) {
        let all: Vec<&[u8]> = lines(content).collect();
        for (index, line) in all.iter().enumerate() {
            if self.found >= self.wanted {
                return;
            }
            if self.regex.is_match(line) {
                self.record(path, &all, index, index, line_text(line));
            }
        }
    }

    fn search_multiline(&mut self, path: &Path, content: &[u8]) {
        let all: Vec<&[u8]> = lines(content).collect();
        // Byte offset where each line starts, to map match offsets to lines.
        let mut starts = Vec::with_capacity(all.len());
        let mut offset = 0;
        for piece in content.split_inclusive(|&b| b == b'\n') {
            starts.push(offset);
            offset += piece.len();
        }
        let line_at = |at: usize| starts.partition_point(|&s| s <= at).saturating_sub(1);
        let mut last_line: Option<usize> = None;
        // A clone shares the compiled program; it frees `self` for `record`.
        let regex = self.regex.clone();
        for found in regex.find_iter(content) {
            if self.found >= self.wanted {
                return;
            }
            let first = line_at(found.start());
            if last_line.is_some_and(|l| first <= l) || first >= all.len() {
                continue;
            }
            let end = found.end().saturating_sub(1).max(found.start());
            let last = line_at(end).clamp(first, all.len() - 1);
            let text = all[first..=last]
                .iter()
                .map(|l| line_text(l))
                .collect::<Vec<_>>()
                .join("\n");
            self.record(path, &all, first, last, text);
            last_line = Some(last);
        }
    }

    fn record(&mut self, path: &Path, all: &[&[u8]], first: usize, last: usize, text: String) {
        self.found += 1;
        if self.found <= self.offset || self.matches.len() >= self.max_results {
            return;
        }
        let from = first.saturating_sub(self.before);
        let to = (last + 1 + self.after).min(all.len());
        self.matches.push(GrepMatch {
            file: path.to_path_buf(),
            line_number: first as u64 + 1,
            line_content: text,
            context_before: all[from..first].iter().map(|l| line_text(l)).collect(),
            context_after: all[last + 1..to].iter().map(|l| line_text(l)).collect(),
        });
    }
}

/// A line as text, lossily decoded and cut at [`MAX_LINE_CHARS`].
fn line_text(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}
