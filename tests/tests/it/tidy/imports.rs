//! No import circles: inside each crate, no two modules reach each other, directly or around a
//! loop, through `crate::`, `super::` or `self::` paths.
//!
//! The graph is drawn level by level. A reference from module `a::b::c` to `a::d::e` is an
//! arrow `b -> d` among the children of `a` (the first place the two paths part); a module
//! reaching into its own parent or its own children draws no arrow. A circle is a set of
//! siblings that reach each other (a strongly connected component of more than one). Code that
//! only tests builds (`#[cfg(test)]` blocks, and modules declared under `#[cfg(test)]`) is left
//! out: a test may use the fakes that stand in for its neighbours.
//!
//! A file's module is its path under `src/` (`mod.rs`, `lib.rs` and `main.rs` name their
//! directory). `src/bin/`, and `main.rs` beside a `lib.rs`, are crates of their own.

use std::collections::{BTreeMap, BTreeSet};

use super::{SourceFile, report, tree};

/// The crates whose modules are checked: every library and binary of the workspace.
const CRATES: &[&str] = &[
    "agent",
    "agentbox-http",
    "bash-fork",
    "bench",
    "desktop",
    "orchestrator",
    "sandbox-client",
    "sandboxd",
    "supervisor",
    "tests",
];

#[test]
fn no_module_reaches_back_into_a_module_that_reaches_it() {
    report(circles(&tree()));
}

#[test]
fn the_circle_rule_reads_paths_as_rust_resolves_them() {
    let files = [
        SourceFile::new(
            "demo/src/lib.rs",
            "mod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod fakes;\n",
        ),
        // `super::` from a file module and a braced `use` reach the sibling `b`.
        SourceFile::new(
            "demo/src/a/mod.rs",
            "mod inner;\nuse crate::{b::Thing, c};\nfn f() { c::g(); }\n",
        ),
        SourceFile::new("demo/src/a/inner.rs", "fn f() { super::super::b::go(); }\n"),
        // `b` reaches back to `a` only in a comment, a string and a test: no circle there.
        SourceFile::new(
            "demo/src/b.rs",
            "// crate::a::x\nconst S: &str = \"crate::a::y\";\n#[cfg(test)]\nmod tests {\n    use crate::a::z;\n}\n",
        ),
        // `c` reaches `a` through `super::`: a circle a -> c -> a.
        SourceFile::new("demo/src/c.rs", "use super::a::Thing;\n"),
        // A test-only module may reach anything.
        SourceFile::new(
            "demo/src/fakes.rs",
            "use crate::a::Thing;\nuse crate::b::Thing;\n",
        ),
    ];
    let graph = Graph::of_crate(&files, "demo");
    let found = graph.circles();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, vec!["a".to_string(), "c".to_string()]);
    assert!(graph.arrows[&Vec::<String>::new()].contains(&("a".into(), "b".into())));
    assert!(!graph.arrows[&Vec::<String>::new()].contains(&("b".into(), "a".into())));
    assert!(
        !graph.arrows[&Vec::<String>::new()]
            .iter()
            .any(|(from, _)| from == "fakes")
    );
}

fn circles(files: &[SourceFile]) -> Vec<String> {
    let mut problems = Vec::new();
    for name in CRATES {
        let graph = Graph::of_crate(files, name);
        assert!(
            !graph.modules.is_empty(),
            "no module found for crate {name}: is the list current?"
        );
        for (parent, members) in graph.circles() {
            let place = if parent.is_empty() {
                format!("{name} (crate root)")
            } else {
                format!("{name}::{}", parent.join("::"))
            };
            let mut lines = vec![format!(
                "import circle among the modules of {place}: {}",
                members.join(", ")
            )];
            for ((from, to), witness) in &graph.witnesses[&parent] {
                if members.contains(from) && members.contains(to) {
                    lines.push(format!("    {from} -> {to}: {witness}"));
                }
            }
            problems.push(lines.join("\n"));
        }
    }
    problems
}

/// One crate's module references, as arrows among siblings.
struct Graph {
    /// Every file module (paths under `src/`).
    modules: BTreeSet<Vec<String>>,
    /// Per parent module: the arrows among its children.
    arrows: BTreeMap<Vec<String>, BTreeSet<(String, String)>>,
    /// Per parent module and arrow: the first place that draws it (`file:line`).
    witnesses: BTreeMap<Vec<String>, BTreeMap<(String, String), String>>,
}

impl Graph {
    fn of_crate(files: &[SourceFile], name: &str) -> Self {
        let src = format!("{name}/src/");
        let has_lib = files.iter().any(|f| f.path == format!("{src}lib.rs"));
        let crate_files: Vec<(&SourceFile, Vec<String>)> = files
            .iter()
            .filter(|f| f.path.starts_with(&src) && f.path.ends_with(".rs"))
            .filter(|f| !f.path[src.len()..].starts_with("bin/"))
            .filter(|f| !(has_lib && f.path == format!("{src}main.rs")))
            .map(|f| (f, module_of(&f.path[src.len()..])))
            .collect();
        let modules: BTreeSet<Vec<String>> = crate_files.iter().map(|(_, m)| m.clone()).collect();
        let test_only = test_only_modules(&crate_files);
        let mut graph = Self {
            modules,
            arrows: BTreeMap::new(),
            witnesses: BTreeMap::new(),
        };
        for (file, module) in &crate_files {
            if test_only.iter().any(|t| module.starts_with(t)) {
                continue;
            }
            for (line, path) in references(file, module) {
                let target = graph.known_prefix(&path);
                graph.draw(module, &target, || format!("{}:{line}", file.path));
            }
        }
        graph
    }

    /// The longest file module `path` starts with.
    fn known_prefix(&self, path: &[String]) -> Vec<String> {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| prefix.is_empty() || self.modules.contains(prefix))
            .unwrap_or_default()
    }

    fn draw(&mut self, from: &[String], to: &[String], witness: impl FnOnce() -> String) {
        let shared = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if shared == from.len() || shared == to.len() {
            return; // the same module, or its parent or a child of it
        }
        let parent = from[..shared].to_vec();
        let arrow = (from[shared].clone(), to[shared].clone());
        self.arrows
            .entry(parent.clone())
            .or_default()
            .insert(arrow.clone());
        self.witnesses
            .entry(parent)
            .or_default()
            .entry(arrow)
            .or_insert_with(witness);
    }

    /// (parent, members) of every circle, members sorted.
    fn circles(&self) -> Vec<(Vec<String>, Vec<String>)> {
        let mut found = Vec::new();
        for (parent, arrows) in &self.arrows {
            for component in strongly_connected(arrows) {
                if component.len() > 1 {
                    found.push((parent.clone(), component));
                }
            }
        }
        found
    }
}

/// `a/b/mod.rs` and `a/b.rs` are `a::b`; `lib.rs` and `main.rs` the crate root.
fn module_of(relative: &str) -> Vec<String> {
    let stem = relative.strip_suffix(".rs").unwrap_or(relative);
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Modules declared under `#[cfg(test)]` (`#[cfg(test)] mod fakes;`), with everything in them.
fn test_only_modules(files: &[(&SourceFile, Vec<String>)]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (file, module) in files {
        for (number, line) in file.code_lines() {
            let declared = line
                .trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let Some(name) = declared
                && file.is_test_line(number)
            {
                let mut path = module.clone();
                path.push(name.trim().to_owned());
                found.push(path);
            }
        }
    }
    found
}

/// Every `crate::`, `super::` or `self::` path of `file` outside its test code, resolved to a
/// path from the crate root, with its line; a braced `use` gives one path per leaf.
fn references(file: &SourceFile, module: &[String]) -> Vec<(usize, Vec<String>)> {
    let mut text = String::new();
    let mut line_of = Vec::new(); // the line of each byte of `text`
    for (number, line) in file.code_lines() {
        let kept = if file.is_test_line(number) { "" } else { line };
        text.push_str(kept);
        text.push('\n');
        line_of.extend(std::iter::repeat_n(number, kept.len() + 1));
    }
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts_word = at == 0 || !is_ident(bytes[at - 1]) && bytes[at - 1] != b':';
        let rest = &text[at..];
        let root = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|root| rest.starts_with(root));
        let Some(root) = root.filter(|_| starts_word) else {
            at += 1;
            continue;
        };
        let (tree, used) = path_tree(rest);
        for leaf in expand(&tree) {
            if let Some(resolved) = resolve(&leaf, module) {
                found.push((line_of[at], resolved));
            }
        }
        at += used.max(root.len());
    }
    found
}

/// The path (or `use` tree) at the start of `text`, runs of spaces made one, and how many bytes
/// it took.
fn path_tree(text: &str) -> (String, usize) {
    let mut tree = String::new();
    let mut depth = 0usize;
    for (index, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return (tree, index),
            '}' => depth -= 1,
            c if c.is_whitespace() => {
                if !tree.ends_with(' ') {
                    tree.push(' ');
                }
                continue;
            }
            c if c.is_alphanumeric() || c == '_' || c == ':' || c == '*' => {}
            ',' if depth > 0 => {}
            _ if depth == 0 => return (tree, index),
            _ => continue,
        }
        tree.push(c);
    }
    (tree, text.len())
}

/// The leaves of a `use` tree: `a::{b, c::{d, e as f}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![
            path.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty() && *s != "*")
                .map(str::to_owned)
                .collect(),
        ];
    };
    let prefix: Vec<String> = tree[..open]
        .split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    let mut leaves = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, c) in inner.char_indices().chain([(inner.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                let item = inner[start..index].trim();
                start = index + 1;
                if item.is_empty() {
                    continue;
                }
                for leaf in expand(item) {
                    let mut path = prefix.clone();
                    // `self` in a group names the prefix itself.
                    path.extend(leaf.into_iter().filter(|s| s != "self"));
                    leaves.push(path);
                }
            }
            _ => {}
        }
    }
    leaves
}

/// `path` (starting with `crate`, `super` or `self`) from the crate root, seen from `module`.
fn resolve(path: &[String], module: &[String]) -> Option<Vec<String>> {
    let mut segments = path.iter().peekable();
    let mut base: Vec<String> = match segments.next()?.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module[..module.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    while segments.peek().is_some_and(|s| *s == "super") {
        segments.next();
        base.pop()?;
    }
    base.extend(segments.filter(|s| *s != "self").cloned());
    Some(base)
}

fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Tarjan's strongly connected components of the graph `arrows` draws, each sorted.
fn strongly_connected(arrows: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in arrows {
        next.entry(from).or_default().push(to);
        next.entry(to).or_default();
    }
    struct State<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        components: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let number = state.index.len();
        state.index.insert(node, number);
        state.low.insert(node, number);
        state.stack.push(node);
        for &to in &state.next[node] {
            if !state.index.contains_key(to) {
                visit(state, to);
                let low = state.low[node].min(state.low[to]);
                state.low.insert(node, low);
            } else if state.stack.contains(&to) {
                let low = state.low[node].min(state.index[to]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            component.sort();
            state.components.push(component);
        }
    }
    let mut state = State {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for &node in next.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.components
}
