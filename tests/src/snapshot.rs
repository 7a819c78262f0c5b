//! Committed snapshots of generated documents (the OpenAPI documents): a test regenerates the
//! document and fails when it differs from the committed file, so a change to the wire
//! contract is always a deliberate, reviewed diff. `AGENTBOX_BLESS=1` writes the new version.

use std::path::Path;

use anyhow::{Context, bail};

/// The environment variable that accepts a changed snapshot.
pub const BLESS: &str = "AGENTBOX_BLESS";

/// Fails unless `path` holds exactly `actual`; with `AGENTBOX_BLESS=1` writes `actual` there.
pub fn check(path: &Path, actual: &str) -> anyhow::Result<()> {
    compare(path, actual, std::env::var(BLESS).is_ok_and(|v| v == "1"))
}

fn compare(path: &Path, actual: &str, bless: bool) -> anyhow::Result<()> {
    if bless {
        std::fs::write(path, actual).with_context(|| format!("writing {}", path.display()))?;
        return Ok(());
    }
    let committed = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (run with {BLESS}=1 to create it)",
            path.display()
        )
    })?;
    if committed == actual {
        return Ok(());
    }
    let changed: Vec<String> = diff_lines(&committed, actual).take(40).collect();
    bail!(
        "{} is out of date: the generated document differs (first changed lines below). If the \
         change is deliberate, run the test again with {BLESS}=1 and commit the file.\n{}",
        path.display(),
        changed.join("\n")
    )
}

/// The lines that differ, as `-old` / `+new`, position by position after the common prefix
/// and suffix (enough to point a reader at the change; `git diff` shows the rest).
fn diff_lines<'a>(old: &'a str, new: &'a str) -> impl Iterator<Item = String> + 'a {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let removed = old[prefix..old.len() - suffix]
        .iter()
        .map(|l| format!("-{l}"))
        .collect::<Vec<_>>();
    let added = new[prefix..new.len() - suffix]
        .iter()
        .map(|l| format!("+{l}"))
        .collect::<Vec<_>>();
    std::iter::once(format!("@@ line {}", prefix + 1)).chain(removed.into_iter().chain(added))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_fails_and_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.json");
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        compare(&path, "a\nb\nc\n", false).unwrap();
        let error = compare(&path, "a\nB\nc\n", false).unwrap_err().to_string();
        assert!(error.contains("@@ line 2\n-b\n+B"), "{error}");
        assert!(compare(&dir.path().join("missing.json"), "x", false).is_err());
        compare(&path, "new\n", true).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
    }
}
