//! Documents the editor's `view` reads as text: PDF pages (Poppler's `pdftotext`, run as the
//! agent in a process group of its own, killed past [`TOOL_LIMIT`]), spreadsheet rows (the
//! `calamine` crate: xlsx, xlsm, xlsb, xls, ods) and presentation slides (pptx: the text of each
//! slide's XML). AIO's `str_replace_editor` takes `page_range`, `sheet_name`, `row_range` and
//! `slide_range` for these; ranges are `[first, last]`, 1-based and inclusive, `last` -1 for
//! the end.
//!
//! Every input is bounded before it is parsed: the file ([`MAX_DOCUMENT_BYTES`]), the sum of a
//! zip-based document's uncompressed parts ([`MAX_UNPACKED_BYTES`], against zip bombs), what a
//! tool may print ([`MAX_TOOL_OUTPUT`]) and the text answered ([`MAX_VIEW_CHARS`]).

use std::fmt::Write as _;
use std::io::{Cursor, Read};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use supervisor::process::Identity;

/// The largest document viewed.
pub const MAX_DOCUMENT_BYTES: u64 = 32 * 1024 * 1024;
/// The most a zip-based document (xlsx, ods, pptx) may unpack to.
pub const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;
/// How long `pdftotext` and `pdfinfo` may run.
pub const TOOL_LIMIT: Duration = Duration::from_secs(20);
/// The most a tool may print.
const MAX_TOOL_OUTPUT: u64 = 16 * 1024 * 1024;
/// The most characters of text a view answers (the rest is cut, and the answer says so).
pub const MAX_VIEW_CHARS: usize = 200_000;
/// The most characters of one spreadsheet cell shown.
const MAX_CELL_CHARS: usize = 500;

/// The kinds of document `view` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    Pdf,
    Spreadsheet,
    Presentation,
}

impl DocumentKind {
    /// The kind of the file at `path`, by its extension.
    pub fn of(path: &Path) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "pdf" => Some(Self::Pdf),
            "xlsx" | "xlsm" | "xlsb" | "xls" | "ods" => Some(Self::Spreadsheet),
            "pptx" => Some(Self::Presentation),
            _ => None,
        }
    }
}

/// Document formats `view` does not read, by extension: their name, for the refusal of such a
/// file that is not text (rather than "not UTF-8 text"). Extensions other programs use for text
/// (`.dot` for Graphviz, `.key` for PEM keys) are not listed; rtf, csv and html are text.
pub fn unsupported_format(path: &Path) -> Option<&'static str> {
    let extension = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match extension.as_str() {
        "docx" | "docm" | "dotx" => "a Word document",
        "doc" => "a Word 97-2003 document",
        "odt" => "an OpenDocument text",
        "ppt" | "pps" => "a PowerPoint 97-2003 presentation",
        "odp" => "an OpenDocument presentation",
        "pages" => "a Pages document",
        "numbers" => "a Numbers spreadsheet",
        "epub" => "an EPUB book",
        _ => return None,
    })
}

/// What the editor's `view` reads besides text, for refusals.
pub const SUPPORTED_DOCUMENTS: &str =
    "PDF (page_range), spreadsheets (sheet_name, row_range) and presentations (slide_range)";

/// What went wrong viewing a document.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// A request field does not fit.
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    /// The document is larger than the limits.
    #[error("{0}")]
    TooLarge(String),
    /// The document cannot be read as what its name says it is.
    #[error("{0}")]
    Unreadable(String),
    /// The converting tool did not finish in time.
    #[error("reading the document took longer than {} s", TOOL_LIMIT.as_secs())]
    Timeout,
    /// The converting tool could not be run.
    #[error("{0}")]
    Tool(String),
}

/// An inclusive range of pages, rows or slides, 1-based; `last` None for the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub first: u64,
    pub last: Option<u64>,
}

impl Span {
    /// `[first, last]` from a request field (`last` -1 for the end); `None` when absent.
    pub fn parse(
        field: &'static str,
        value: Option<&[i64]>,
    ) -> Result<Option<Self>, DocumentError> {
        let Some(value) = value else { return Ok(None) };
        let invalid = |message: String| DocumentError::Invalid { field, message };
        match *value {
            [first, last] if first >= 1 && (last == -1 || last >= first) => Ok(Some(Self {
                first: first as u64,
                last: (last != -1).then_some(last as u64),
            })),
            [_, _] => Err(invalid(format!(
                "`{field}` must be [first, last] with 1 <= first <= last (last -1 for the end), got {value:?}"
            ))),
            _ => Err(invalid(format!(
                "`{field}` must be two numbers, [first, last], got {value:?}"
            ))),
        }
    }

    /// The items of a `total`-item document this span selects, as `first..=last`; an error
    /// naming `field` when it starts past the end.
    fn within(
        span: Option<Self>,
        total: u64,
        field: &'static str,
        items: &str,
    ) -> Result<(u64, u64), DocumentError> {
        let span = span.unwrap_or(Self {
            first: 1,
            last: None,
        });
        if total == 0 {
            return Ok((1, 0));
        }
        if span.first > total {
            return Err(DocumentError::Invalid {
                field,
                message: format!(
                    "`{field}` starts at {} but the document has {total} {items}",
                    span.first
                ),
            });
        }
        Ok((span.first, span.last.unwrap_or(total).min(total)))
    }
}

/// Cuts `text` to [`MAX_VIEW_CHARS`] characters, saying so at the end.
fn bounded(mut text: String) -> String {
    if let Some((cut, _)) = text.char_indices().nth(MAX_VIEW_CHARS) {
        text.truncate(cut);
        text.push_str(&format!(
            "\n[... cut at {MAX_VIEW_CHARS} characters: view a smaller range]\n"
        ));
    }
    text
}

/// The text of a PDF's pages (`pdftotext -layout`), each under a `--- Page N ---` line.
pub async fn pdf_pages(
    file: std::fs::File,
    pages: Option<Span>,
    run_as: Option<&Identity>,
) -> Result<String, DocumentError> {
    let info = run_tool(
        "pdfinfo",
        &["-"],
        file.try_clone()
            .map_err(|e| DocumentError::Tool(format!("reading the file: {e}")))?,
        run_as,
    )
    .await?;
    let total = info
        .lines()
        .find_map(|line| line.strip_prefix("Pages:"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .ok_or_else(|| DocumentError::Unreadable("the file is not a readable PDF".into()))?;
    let (first, last) = Span::within(pages, total, "page_range", "pages")?;
    let mut view = format!("[PDF: pages {first}-{last} of {total}]\n");
    if total == 0 {
        return Ok(view);
    }
    // pdfinfo read the shared file description to its end.
    let mut file = file;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))
        .map_err(|e| DocumentError::Tool(format!("reading the file again: {e}")))?;
    let (first_arg, last_arg) = (first.to_string(), last.to_string());
    let text = run_tool(
        "pdftotext",
        &[
            "-layout", "-enc", "UTF-8", "-f", &first_arg, "-l", &last_arg, "-", "-",
        ],
        file,
        run_as,
    )
    .await?;
    for (n, page) in (first..=last).zip(text.split('\u{c}')) {
        let _ = write!(view, "\n--- Page {n} ---\n{}\n", page.trim_end());
    }
    Ok(bounded(view))
}

/// Runs a Poppler tool on `input` (its standard input) as `run_as`, through the reaper, in a
/// process group of its own killed past [`TOOL_LIMIT`]; its standard output, or the first line
/// of its error output in the error.
async fn run_tool(
    program: &str,
    args: &[&str],
    input: std::fs::File,
    run_as: Option<&Identity>,
) -> Result<String, DocumentError> {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::from(input))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(identity) = run_as {
        // std drops sandboxd's supplementary groups when it switches the user.
        command.uid(identity.uid).gid(identity.gid);
    }
    let spawned = supervisor::reaper().spawn(&mut command).map_err(|e| {
        DocumentError::Tool(format!(
            "cannot run {program} (Poppler's utilities, Debian's poppler-utils): {e}"
        ))
    })?;
    let group = supervisor::process::ProcessGroup::new(spawned.pid);
    let mut child = spawned.child;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let reading = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        if let Some(stdout) = stdout {
            let _ = stdout.take(MAX_TOOL_OUTPUT + 1).read_to_end(&mut out);
        }
        let mut err = Vec::new();
        if let Some(stderr) = stderr {
            let _ = stderr.take(4096).read_to_end(&mut err);
        }
        (out, err)
    });
    let kill = || group.kill();
    let finished = tokio::time::timeout(TOOL_LIMIT, async {
        let (out, err) = reading.await.unwrap_or_default();
        if out.len() as u64 > MAX_TOOL_OUTPUT {
            // It printed more than is read: it waits on a full pipe.
            kill();
        }
        let status = spawned.exit.await.ok();
        (out, err, status)
    })
    .await;
    let Ok((out, err, status)) = finished else {
        kill();
        return Err(DocumentError::Timeout);
    };
    if out.len() as u64 > MAX_TOOL_OUTPUT {
        return Err(DocumentError::TooLarge(format!(
            "the document's text is larger than {MAX_TOOL_OUTPUT} bytes: view a smaller range"
        )));
    }
    if !status.is_some_and(|s| s.success()) {
        let message = String::from_utf8_lossy(&err);
        let first = message.lines().next().unwrap_or("").trim();
        return Err(DocumentError::Unreadable(format!(
            "the file is not a readable PDF ({program}: {})",
            if first.is_empty() { "failed" } else { first }
        )));
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Refuses a zip-based document whose parts unpack to more than [`MAX_UNPACKED_BYTES`].
fn check_unpacked(bytes: &[u8]) -> Result<(), DocumentError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
        DocumentError::Unreadable(format!("the file is not a readable document: {e}"))
    })?;
    let mut total: u64 = 0;
    for index in 0..archive.len() {
        let size = archive
            .by_index_raw(index)
            .map_err(|e| {
                DocumentError::Unreadable(format!("the file is not a readable document: {e}"))
            })?
            .size();
        total = total.saturating_add(size);
    }
    if total > MAX_UNPACKED_BYTES {
        return Err(DocumentError::TooLarge(format!(
            "the document unpacks to {total} bytes; at most {MAX_UNPACKED_BYTES} are read"
        )));
    }
    Ok(())
}

/// A spreadsheet's rows: the sheet `sheet` (the first when absent), the rows of `rows`, one
/// line each: the row's number, then its cells, tab-separated.
pub fn spreadsheet_rows(
    bytes: Vec<u8>,
    sheet: Option<&str>,
    rows: Option<Span>,
) -> Result<String, DocumentError> {
    use calamine::Reader;
    if bytes.starts_with(b"PK") {
        check_unpacked(&bytes)?;
    }
    let mut workbook = calamine::open_workbook_auto_from_rs(Cursor::new(bytes)).map_err(|e| {
        DocumentError::Unreadable(format!("the file is not a readable spreadsheet: {e}"))
    })?;
    let names = workbook.sheet_names();
    let name = match sheet {
        Some(wanted) => names
            .iter()
            .find(|n| n.as_str() == wanted)
            .cloned()
            .ok_or_else(|| DocumentError::Invalid {
                field: "sheet_name",
                message: format!("no sheet is named {wanted:?}; the sheets are {names:?}"),
            })?,
        None => names
            .first()
            .cloned()
            .ok_or_else(|| DocumentError::Unreadable("the spreadsheet has no sheet".into()))?,
    };
    let range = workbook
        .worksheet_range(&name)
        .map_err(|e| DocumentError::Unreadable(format!("reading sheet {name:?}: {e}")))?;
    let top = range.start().map_or(0, |(row, _)| u64::from(row));
    let used_rows = top + range.height() as u64;
    let (first, last) = Span::within(rows, used_rows, "row_range", "rows")?;
    let mut view = format!(
        "[Spreadsheet: sheets {names:?}; sheet {name:?}, rows {first}-{last} of {used_rows}]\n"
    );
    for (offset, row) in range.rows().enumerate() {
        let number = top + offset as u64 + 1;
        if number < first {
            continue;
        }
        if number > last || view.len() > 4 * MAX_VIEW_CHARS {
            break;
        }
        let cells: Vec<String> = row
            .iter()
            .map(|cell| {
                let text = cell.to_string().replace(['\t', '\n', '\r'], " ");
                text.chars().take(MAX_CELL_CHARS).collect()
            })
            .collect();
        let _ = writeln!(view, "{number}\t{}", cells.join("\t").trim_end());
    }
    Ok(bounded(view))
}

/// A presentation's slides: the text of each slide in `slides`, a line per paragraph, under a
/// `--- Slide N ---` line.
pub fn presentation_slides(bytes: Vec<u8>, slides: Option<Span>) -> Result<String, DocumentError> {
    check_unpacked(&bytes)?;
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
        DocumentError::Unreadable(format!("the file is not a readable presentation: {e}"))
    })?;
    let mut numbers: Vec<u64> = archive
        .file_names()
        .filter_map(Result::ok)
        .filter_map(|name| {
            name.strip_prefix("ppt/slides/slide")?
                .strip_suffix(".xml")?
                .parse()
                .ok()
        })
        .collect();
    numbers.sort_unstable();
    let total = numbers.len() as u64;
    let (first, last) = Span::within(slides, total, "slide_range", "slides")?;
    let mut view = format!("[Presentation: slides {first}-{last} of {total}]\n");
    for (position, number) in numbers.iter().enumerate() {
        let shown = position as u64 + 1;
        if shown < first || shown > last {
            continue;
        }
        let mut xml = Vec::new();
        archive
            .by_name(&format!("ppt/slides/slide{number}.xml"))
            .and_then(|part| Ok(part.take(MAX_UNPACKED_BYTES).read_to_end(&mut xml)?))
            .map_err(|e| DocumentError::Unreadable(format!("reading slide {shown}: {e}")))?;
        let _ = write!(view, "\n--- Slide {shown} ---\n{}", slide_text(&xml)?);
        if view.len() > 4 * MAX_VIEW_CHARS {
            break;
        }
    }
    Ok(bounded(view))
}

/// The text runs (`<a:t>`) of a slide's XML, a line per paragraph (`<a:p>`).
fn slide_text(xml: &[u8]) -> Result<String, DocumentError> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut buf = Vec::new();
    let (mut text, mut line, mut in_run) = (String::new(), String::new(), false);
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| DocumentError::Unreadable(format!("a slide's XML is broken: {e}")))?;
        match event {
            Event::Start(e) if e.local_name().as_ref() == "t" => in_run = true,
            Event::End(e) if e.local_name().as_ref() == "t" => in_run = false,
            Event::End(e) if e.local_name().as_ref() == "p" => {
                if !line.trim().is_empty() {
                    text.push_str(line.trim_end());
                    text.push('\n');
                }
                line.clear();
            }
            Event::Empty(e) if e.local_name().as_ref() == "br" => line.push('\n'),
            Event::Text(t) if in_run => line.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_run => match r.resolve_char_ref() {
                Ok(Some(c)) => line.push(c),
                _ => line.push_str(match r.xml10_content().as_ref() {
                    "amp" => "&",
                    "lt" => "<",
                    "gt" => ">",
                    "quot" => "\"",
                    "apos" => "'",
                    _ => "",
                }),
            },
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn kinds_come_from_the_extension() {
        assert_eq!(
            DocumentKind::of(Path::new("/a/b.PDF")),
            Some(DocumentKind::Pdf)
        );
        assert_eq!(
            DocumentKind::of(Path::new("x.xlsx")),
            Some(DocumentKind::Spreadsheet)
        );
        assert_eq!(
            DocumentKind::of(Path::new("x.pptx")),
            Some(DocumentKind::Presentation)
        );
        assert_eq!(DocumentKind::of(Path::new("notes.txt")), None);
        assert_eq!(DocumentKind::of(Path::new("pdf")), None);
        assert_eq!(
            unsupported_format(Path::new("/w/Report.DOCX")),
            Some("a Word document")
        );
        assert_eq!(unsupported_format(Path::new("notes.rtf")), None);
        assert_eq!(unsupported_format(Path::new("x.pdf")), None);
    }

    #[test]
    fn spans_are_checked_and_name_their_field() {
        assert_eq!(Span::parse("page_range", None).unwrap(), None);
        assert_eq!(
            Span::parse("page_range", Some(&[2, -1])).unwrap(),
            Some(Span {
                first: 2,
                last: None
            })
        );
        for bad in [&[0, 2][..], &[3, 2], &[1], &[1, 2, 3], &[-1, -1]] {
            let error = Span::parse("row_range", Some(bad)).unwrap_err();
            assert!(
                matches!(
                    error,
                    DocumentError::Invalid {
                        field: "row_range",
                        ..
                    }
                ),
                "{bad:?}: {error}"
            );
        }
        let span = Span::parse("slide_range", Some(&[2, 9])).unwrap();
        assert_eq!(
            Span::within(span, 4, "slide_range", "slides").unwrap(),
            (2, 4)
        );
        assert!(
            Span::within(
                Span::parse("x", Some(&[5, 6])).unwrap(),
                4,
                "slide_range",
                "slides"
            )
            .is_err()
        );
    }

    fn zip_of(parts: &[(&str, &str)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        {
            let mut writer = zip::ZipWriter::new(Cursor::new(&mut bytes));
            for (name, content) in parts {
                let options = zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Stored);
                writer.start_file(*name, options).unwrap();
                writer.write_all(content.as_bytes()).unwrap();
            }
            writer.finish().unwrap();
        }
        bytes
    }

    fn slide(paragraphs: &[&str]) -> String {
        let body: String = paragraphs
            .iter()
            .map(|p| format!("<a:p><a:r><a:t>{p}</a:t></a:r></a:p>"))
            .collect();
        format!(
            "<?xml version=\"1.0\"?><p:sld xmlns:a=\"a\" xmlns:p=\"p\"><p:cSld><p:spTree>\
             <p:sp><p:txBody>{body}</p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
        )
    }

    #[test]
    fn slides_are_read_in_order_and_by_range() {
        let bytes = zip_of(&[
            ("ppt/slides/slide10.xml", &slide(&["Ten"])),
            (
                "ppt/slides/slide2.xml",
                &slide(&["Two &amp; more", "second line"]),
            ),
            ("ppt/slides/slide1.xml", &slide(&["One"])),
            ("ppt/presentation.xml", "<p:presentation/>"),
        ]);
        let all = presentation_slides(bytes.clone(), None).unwrap();
        assert!(all.starts_with("[Presentation: slides 1-3 of 3]"), "{all}");
        let one = all.find("One").unwrap();
        let two = all.find("Two & more\nsecond line").unwrap();
        let ten = all.find("Ten").unwrap();
        assert!(one < two && two < ten, "{all}");
        let some = presentation_slides(bytes, Span::parse("s", Some(&[2, 2])).unwrap()).unwrap();
        assert!(some.contains("--- Slide 2 ---") && !some.contains("One") && !some.contains("Ten"));
    }

    #[test]
    fn a_zip_bomb_is_refused_before_it_is_parsed() {
        let big = "0".repeat(1024 * 1024);
        let parts: Vec<(String, &str)> = (0..300)
            .map(|n| (format!("ppt/slides/slide{n}.xml"), big.as_str()))
            .collect();
        let parts: Vec<(&str, &str)> = parts.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        let error = presentation_slides(zip_of(&parts), None).unwrap_err();
        assert!(matches!(error, DocumentError::TooLarge(_)), "{error}");
    }

    #[test]
    fn what_is_not_a_document_is_unreadable() {
        assert!(matches!(
            presentation_slides(b"not a zip".to_vec(), None),
            Err(DocumentError::Unreadable(_))
        ));
        assert!(matches!(
            spreadsheet_rows(b"not a sheet".to_vec(), None, None),
            Err(DocumentError::Unreadable(_))
        ));
    }

    #[test]
    fn views_are_cut_at_the_limit() {
        let text = bounded("x".repeat(MAX_VIEW_CHARS + 10));
        assert!(text.ends_with("view a smaller range]\n"));
        assert_eq!(bounded("short".into()), "short");
    }
}
