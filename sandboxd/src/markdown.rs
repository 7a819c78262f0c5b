//! HTML to Markdown for `POST /v1/util/convert_to_markdown`, with `htmd`, bounded.
//!
//! `htmd` recurses once per element level, so a document nested deeply enough would overflow
//! any stack: [`nesting_depth`] estimates the depth first (an over-estimate: it follows open and
//! close tags, closing only the implied ends HTML itself closes most often) and a document
//! deeper than [`MAX_DEPTH`] is refused. The conversion runs on a thread of its own with a large
//! stack ([`convert`], which the browser's page Markdown uses too: the one converter).

/// The largest HTML converted, in bytes.
pub const MAX_SOURCE_BYTES: usize = 4 << 20;
/// The deepest element nesting converted.
pub const MAX_DEPTH: usize = 512;
/// The converter thread's stack.
const STACK: usize = 32 * 1024 * 1024;

/// Why a document was not converted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MarkdownError {
    #[error("the document is {size} bytes; at most {MAX_SOURCE_BYTES} bytes are converted")]
    TooLarge { size: usize },
    #[error(
        "the document nests elements about {depth} levels deep; at most {MAX_DEPTH} are converted"
    )]
    TooDeep { depth: usize },
    #[error("converting to Markdown: {0}")]
    Failed(String),
}

/// Elements that never have content or a closing tag.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "!doctype",
];
/// Elements whose end tag is usually left out when a sibling of the same name follows.
const SELF_ENDING: &[&str] = &[
    "p", "li", "dt", "dd", "option", "tr", "td", "th", "thead", "tbody",
];
/// Elements whose content is text, not markup.
const RAW_TEXT: &[&str] = &["script", "style", "textarea", "title", "xmp", "plaintext"];

/// The deepest nesting of elements in `html`, estimated from its tags (never below the
/// depth a browser's parser would build, but for misnested markup it repairs).
pub fn nesting_depth(html: &str) -> usize {
    let bytes = html.as_bytes();
    let mut stack: Vec<String> = Vec::new();
    let mut deepest = 0;
    let mut i = 0;
    while let Some(offset) = memchr::memchr(b'<', &bytes[i..]) {
        i += offset + 1;
        if bytes[i..].starts_with(b"!--") {
            match memchr::memmem::find(&bytes[i..], b"-->") {
                Some(end) => i += end + 3,
                None => break,
            }
            continue;
        }
        let closing = bytes.get(i) == Some(&b'/');
        let start = if closing { i + 1 } else { i };
        let name_len = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'!' | b':'))
            .count();
        if name_len == 0 {
            continue;
        }
        let name = html[start..start + name_len].to_ascii_lowercase();
        let tag_end = memchr::memchr(b'>', &bytes[start..]).map(|e| start + e);
        let self_closed = tag_end.is_some_and(|e| e > 0 && bytes[e - 1] == b'/');
        i = tag_end.map_or(bytes.len(), |e| e + 1);
        if closing {
            if let Some(at) = stack.iter().rposition(|open| *open == name) {
                stack.truncate(at);
            }
            continue;
        }
        if VOID.contains(&name.as_str()) || self_closed {
            continue;
        }
        if SELF_ENDING.contains(&name.as_str()) && stack.last() == Some(&name) {
            stack.pop();
        }
        if RAW_TEXT.contains(&name.as_str()) {
            // Skip to the end tag: what is inside is not markup.
            let mut j = i;
            i = bytes.len();
            while let Some(p) = memchr::memmem::find(&bytes[j..], b"</") {
                let at = j + p + 2;
                if bytes[at..]
                    .get(..name.len())
                    .is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
                {
                    i = j + p;
                    break;
                }
                j = at;
            }
        }
        stack.push(name);
        deepest = deepest.max(stack.len());
    }
    deepest
}

/// Converts `html` to Markdown, refusing documents too large or too deep.
pub async fn html_to_markdown(html: String) -> Result<String, MarkdownError> {
    if html.len() > MAX_SOURCE_BYTES {
        return Err(MarkdownError::TooLarge { size: html.len() });
    }
    let depth = nesting_depth(&html);
    if depth > MAX_DEPTH {
        return Err(MarkdownError::TooDeep { depth });
    }
    convert(html).await
}

/// Converts `html` to Markdown with no bound of its own, on a thread with a large stack (the
/// converter recurses once per element level, and sandboxd's runtime threads have small
/// stacks): for HTML whose depth the caller bounded already, as the browser's page Markdown
/// does in the page. Everything else goes through [`html_to_markdown`].
pub async fn convert(html: String) -> Result<String, MarkdownError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("markdown".into())
        .stack_size(STACK)
        .spawn(move || {
            let _ = tx.send(htmd::convert(&html));
        })
        .map_err(|e| MarkdownError::Failed(format!("cannot start the converter: {e}")))?;
    rx.await
        .map_err(|_| MarkdownError::Failed("the converter stopped".into()))?
        .map_err(|e| MarkdownError::Failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_follows_tags_and_skips_void_raw_and_comments() {
        assert_eq!(nesting_depth("plain text"), 0);
        assert_eq!(nesting_depth("<p>a</p><p>b</p>"), 1);
        assert_eq!(nesting_depth("<div><div><b>x</b></div></div>"), 3);
        assert_eq!(nesting_depth("<div><br><img src=x><hr/></div>"), 1);
        assert_eq!(nesting_depth("<ul><li>a<li>b<li>c</ul>"), 2);
        assert_eq!(
            nesting_depth("<script>if (a<b) { '<div><div><div>' }</script>"),
            1
        );
        assert_eq!(nesting_depth("<!-- <div><div> --><p>x"), 1);
        // Stray end tags do not hide depth.
        let sneaky = "<div></span>".repeat(1000);
        assert_eq!(nesting_depth(&sneaky), 1000);
    }

    #[tokio::test]
    async fn converts_structure_and_refuses_deep_or_large_documents() {
        let md = html_to_markdown(
            r#"<h1>Title</h1><p>Some <b>bold</b> and <a href="https://example.com/x">a link</a>.</p><ul><li>one<li>two</ul>"#.into(),
        )
        .await
        .unwrap();
        assert!(md.contains("# Title"), "{md}");
        assert!(md.contains("**bold**"), "{md}");
        assert!(md.contains("[a link](https://example.com/x)"), "{md}");
        assert!(md.contains("one") && md.contains("two"), "{md}");

        let deep = "<div>".repeat(MAX_DEPTH + 1);
        assert_eq!(
            html_to_markdown(deep).await,
            Err(MarkdownError::TooDeep {
                depth: MAX_DEPTH + 1
            })
        );
        // At the limit it converts (the stack holds).
        let at_limit = format!("{}deep", "<div>".repeat(MAX_DEPTH));
        assert!(html_to_markdown(at_limit).await.unwrap().contains("deep"));
        let large = "a".repeat(MAX_SOURCE_BYTES + 1);
        assert!(matches!(
            html_to_markdown(large).await,
            Err(MarkdownError::TooLarge { .. })
        ));
    }
}
