//! Tidy: invariants of the source tree that neither the compiler nor clippy can check, read from
//! the files themselves (ARCHITECTURE.md, "Invariants checked by code"). Needs no Docker.
//!
//! - HTTP stays in the HTTP layers: `axum` and `StatusCode` appear in sandboxd and the
//!   orchestrator only under `api/` (and `axum` in the orchestrator's `proxy/`, which forwards
//!   HTTP as is); never in `supervisor` or `desktop`; no `axum` in the clients (`sandbox-client`,
//!   `agent`). `agentbox-http` is not checked: HTTP is its whole job.
//! - Children are spawned through `supervisor::reaper().spawn`. clippy refuses `Command::spawn`,
//!   `output` and `status` (clippy.toml); here: every member opts into the workspace lints, the
//!   clippy configuration is in place, production code builds a `Command` only in the files
//!   listed in [`COMMAND_BUILDERS`], allows a direct spawn only in [`DIRECT_SPAWNERS`] (tests and
//!   benches may, item by item), always with a reason comment, and calls no `fork`, `exec*`,
//!   `posix_spawn` or `system` of its own.
//! - `unsafe` is allowed only in [`UNSAFE_ALLOWED`], each time under a `SAFETY:` comment (or a
//!   `# Safety` section for an `unsafe fn`).
//! - No `todo!` or `unimplemented!` anywhere.
//! - sandboxd's capability modules know nothing of its HTTP layer: outside `sandboxd/src/api/`,
//!   no path goes through `api::` (its wire types included) but in [`API_USERS`].
//!
//! - Every module of the library crates is named in its crate's section of ARCHITECTURE.md's
//!   code map (as `` `name` `` or a path ending in it), so the map stays the map.
//! - The fast lane (`[profile.fast]` in `.config/nextest.toml`) is opt-in: it names the
//!   integration-test modules it runs, and each one it names exists.
//! - No import circles between the modules of a crate ([`imports`]).
//! - No Rust file is longer than [`FILE_LENGTH_CEILING`] lines but those in [`LONG_FILES`],
//!   each held to the length it has (a ratchet: they may shrink, not grow, and leave the list
//!   once under the ceiling).
//!
//! Comments and the contents of string literals are blanked before any rule looks at the code,
//! so a rule's words in prose or in a message never count. Every allow-list entry must still be
//! needed: an entry that matches nothing is reported too, so the lists stay true.

mod imports;

use std::path::{Path, PathBuf};

/// Where one crate may name HTTP.
struct HttpRule {
    /// The crate's source directory.
    dir: &'static str,
    /// Words this crate must not use (whole identifiers, outside comments and strings).
    words: &'static [&'static str],
    /// (path prefix, words allowed there, why).
    allowed: &'static [(&'static str, &'static [&'static str], &'static str)],
}

const HTTP_RULES: &[HttpRule] = &[
    HttpRule {
        dir: "sandboxd/src/",
        words: &["axum", "StatusCode"],
        allowed: &[(
            "sandboxd/src/api/",
            &["axum", "StatusCode"],
            "the HTTP API: routes, extractors, errors, the server itself",
        )],
    },
    HttpRule {
        dir: "orchestrator/src/",
        words: &["axum", "StatusCode"],
        allowed: &[
            (
                "orchestrator/src/api/",
                &["axum", "StatusCode"],
                "the REST API and the proxy routes: the only place that maps errors to HTTP",
            ),
            (
                "orchestrator/src/proxy/",
                &["axum"],
                "the HTTP proxy forwards requests and bodies as they are, in axum's types",
            ),
            (
                "orchestrator/src/testing/",
                &["StatusCode"],
                "the unit tests' fake sandboxd answers as the real one does: with a status in \
                 the client's error",
            ),
        ],
    },
    HttpRule {
        dir: "supervisor/src/",
        words: &["axum", "StatusCode"],
        allowed: &[],
    },
    HttpRule {
        dir: "desktop/src/",
        words: &["axum", "StatusCode"],
        allowed: &[],
    },
    // Clients: reqwest's `StatusCode` is theirs to read, but no server framework.
    HttpRule {
        dir: "sandbox-client/src/",
        words: &["axum"],
        allowed: &[],
    },
    HttpRule {
        dir: "agent/src/",
        words: &["axum"],
        allowed: &[],
    },
];

/// Production files that build a `Command` (std or tokio), and why. Every other one must not.
const COMMAND_BUILDERS: &[(&str, &str)] = &[
    (
        "supervisor/src/process.rs",
        "a supervised program's command; the supervisor spawns it through the reaper",
    ),
    (
        "supervisor/src/probe.rs",
        "exec readiness probes, spawned through the reaper",
    ),
    (
        "sandboxd/src/shell/job.rs",
        "the bash of a shell command, spawned through the reaper",
    ),
    (
        "sandboxd/src/shell/terminal.rs",
        "the bash of a terminal, spawned through the reaper",
    ),
    (
        "sandboxd/src/jupyter/kernel.rs",
        "an IPython kernel, spawned through the reaper",
    ),
    (
        "sandboxd/src/nodejs/mod.rs",
        "a stateless node run, spawned through the reaper",
    ),
    (
        "sandboxd/src/nodejs/session.rs",
        "a Node session's node, spawned through the reaper",
    ),
    (
        "sandboxd/src/system_info.rs",
        "`node --version` for GET /v1/sandbox, spawned through the reaper",
    ),
    (
        "sandboxd/src/recording.rs",
        "ffmpeg recording the display, spawned through the reaper",
    ),
    (
        "sandboxd/src/page_recording.rs",
        "ffmpeg encoding a page screencast, spawned through the reaper",
    ),
    (
        "sandboxd/src/ffmpeg.rs",
        "the recorders' ffmpeg command given its output and process group, spawned through the reaper",
    ),
    (
        "sandboxd/src/hooks.rs",
        "the bash of a shutdown hook, spawned through the reaper",
    ),
    (
        "sandboxd/src/files/document.rs",
        "Poppler's pdfinfo and pdftotext reading a PDF as the agent, spawned through the reaper",
    ),
    (
        "sandboxd/src/shell/zygote.rs",
        "the zygote bash that forks ready shells, spawned through the reaper",
    ),
    (
        "orchestrator/src/backend/egress.rs",
        "iptables on the host: the orchestrator runs no reaper (see DIRECT_SPAWNERS)",
    ),
];

/// Production files that may spawn a child directly (`#[allow(clippy::disallowed_methods)]`),
/// and why. Tests and benches may too, item by item, with a reason comment.
const DIRECT_SPAWNERS: &[(&str, &str)] = &[
    (
        "supervisor/src/reaper.rs",
        "the reaper's own spawn, which every other child goes through",
    ),
    (
        "orchestrator/src/backend/egress.rs",
        "the orchestrator runs no reaper; tokio waits for iptables, which leaves no orphans",
    ),
];

/// Code that runs in another program, where there is no reaper, and may fork, and why.
const FORKS_ELSEWHERE: &[(&str, &str)] = &[(
    "bash-fork/src/lib.rs",
    "the bash builtin that forks ready shells inside bash; sandboxd's reaper adopts them",
)];

/// Files that may hold `unsafe` code, and why.
const UNSAFE_ALLOWED: &[(&str, &str)] = &[
    (
        "bash-fork/src/lib.rs",
        "a bash loadable builtin: bash's C structures and globals, fork and setsid",
    ),
    (
        "supervisor/src/process.rs",
        "the pre_exec hook that makes a child a session leader",
    ),
    (
        "sandboxd/src/shell/job.rs",
        "pre_exec hooks: the command's descriptor 3, the child subreaper",
    ),
    (
        "sandboxd/src/shell/terminal.rs",
        "the pseudo-terminal: raw descriptors, the controlling terminal, the window size ioctl",
    ),
    (
        "sandboxd/src/config.rs",
        "removing secrets from the environment (unsafe since edition 2024)",
    ),
    (
        "sandboxd/src/main.rs",
        "the secret scrub, called before any thread exists",
    ),
    (
        "sandboxd/src/lib.rs",
        "malloc_trim once the router is built",
    ),
];

/// sandboxd's files outside `api/` that may name the HTTP layer, and why.
const API_USERS: &[(&str, &str)] = &[(
    "sandboxd/src/lib.rs",
    "the library root builds the router and serves it",
)];

/// The clippy configuration that refuses direct spawning.
const DISALLOWED_METHODS: &[&str] = &[
    "std::process::Command::spawn",
    "std::process::Command::output",
    "std::process::Command::status",
    "tokio::process::Command::spawn",
    "tokio::process::Command::output",
    "tokio::process::Command::status",
];

#[test]
fn http_stays_in_the_http_layers() {
    report(http_violations(&tree()));
}

#[test]
fn sandboxd_capabilities_know_nothing_of_its_api() {
    report(api_layer_violations(&tree()));
}

#[test]
fn children_are_spawned_through_the_reaper() {
    let root = root();
    let mut problems = spawn_violations(&tree());
    problems.extend(lint_config_violations(&root));
    report(problems);
}

#[test]
fn unsafe_code_is_confined_and_explained() {
    report(unsafe_violations(&tree()));
}

#[test]
fn the_fast_lane_names_only_modules_that_exist() {
    let root = root();
    let config = std::fs::read_to_string(root.join(".config/nextest.toml")).expect("nextest.toml");
    let fast = config
        .split("[profile.fast]")
        .nth(1)
        .expect("a [profile.fast] section");
    let mut problems = Vec::new();
    let mut named = 0;
    for line in fast.lines() {
        // `| (binary_id(<package>::it) & test(/^(a|b|c)::/))`
        let Some((package, rest)) = line
            .split_once("binary_id(")
            .and_then(|(_, rest)| rest.split_once("::it)"))
        else {
            continue;
        };
        let Some(modules) = rest
            .split_once("test(/^(")
            .and_then(|(_, rest)| rest.split_once(")::/)"))
            .map(|(modules, _)| modules)
        else {
            continue;
        };
        let dir = if package == "agentbox-tests" {
            "tests"
        } else {
            package
        };
        for module in modules.split('|') {
            named += 1;
            let it = root.join(dir).join("tests/it");
            if !it.join(format!("{module}.rs")).is_file() && !it.join(module).is_dir() {
                problems.push(format!(
                    ".config/nextest.toml: the fast lane names {package}::it's `{module}`, \
                     which {} does not hold",
                    it.strip_prefix(&root).unwrap_or(&it).display()
                ));
            }
        }
    }
    assert!(
        named > 10,
        "the fast lane's modules were not found in nextest.toml"
    );
    report(problems);
}

/// The most lines a Rust file may have.
const FILE_LENGTH_CEILING: usize = 1200;

/// Files longer than the ceiling (issue 23: to be split), each with the most lines it may have.
const LONG_FILES: &[(&str, usize)] = &[
    ("orchestrator/tests/it/attacks/mod.rs", 1264),
    ("sandboxd/tests/it/file_api/mod.rs", 1261),
    ("sandboxd/src/files/watch.rs", 1420),
    ("sandboxd/src/shell/job.rs", 1333),
    ("sandboxd/src/api/mcp/aio.rs", 1276),
    ("tests/tests/it/browser_api.rs", 1255),
];

#[test]
fn no_file_grows_past_the_length_ceiling() {
    let files = tree();
    let mut problems = Vec::new();
    let mut used = vec![false; LONG_FILES.len()];
    for file in &files {
        let lines = file.raw.len();
        match LONG_FILES.iter().position(|(path, _)| *path == file.path) {
            Some(i) => {
                used[i] = true;
                let most = LONG_FILES[i].1;
                if lines > most {
                    problems.push(format!(
                        "{}: {lines} lines, more than the {most} LONG_FILES allows it: split it",
                        file.path
                    ));
                } else if lines <= FILE_LENGTH_CEILING {
                    problems.push(format!(
                        "{}: {lines} lines, under the ceiling: remove it from LONG_FILES",
                        file.path
                    ));
                }
            }
            None if lines > FILE_LENGTH_CEILING => problems.push(format!(
                "{}: {lines} lines, more than {FILE_LENGTH_CEILING}: split it by concern",
                file.path
            )),
            None => {}
        }
    }
    for ((path, _), used) in LONG_FILES.iter().zip(&used) {
        if !used {
            problems.push(format!(
                "LONG_FILES lists {path}, which is not there: remove it"
            ));
        }
    }
    report(problems);
}

/// The library crates whose modules ARCHITECTURE.md's code map must name.
const MAPPED_CRATES: &[&str] = &[
    "supervisor",
    "desktop",
    "sandboxd",
    "sandbox-client",
    "agentbox-http",
    "orchestrator",
    "agent",
];

#[test]
fn every_module_is_named_in_the_code_map() {
    let root = root();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut problems = Vec::new();
    for crate_dir in MAPPED_CRATES {
        let section = code_map_section(&map, crate_dir)
            .unwrap_or_else(|| panic!("ARCHITECTURE.md has no `### `{crate_dir}/`` section"));
        let named = backticked_words(section);
        let mut paths = Vec::new();
        collect(&root.join(crate_dir).join("src"), &mut paths);
        for path in paths {
            let Some(module) = module_name(&path) else {
                continue;
            };
            if !named.contains(&module) {
                problems.push(format!(
                    "{}: module `{module}` is not named in ARCHITECTURE.md's `{crate_dir}/` section",
                    path.strip_prefix(&root).unwrap_or(&path).display()
                ));
            }
        }
    }
    report(problems);
}

#[test]
fn the_code_map_rule_reads_names_as_written() {
    let words = backticked_words("`a::b` and c, `shell/procs.rs` (`d`)");
    for word in ["a", "b", "shell", "procs", "rs", "d"] {
        assert!(words.contains(word), "{word}");
    }
    assert!(
        !words.contains("c"),
        "prose outside backticks does not count"
    );
    assert_eq!(
        module_name(Path::new("x/browser/mod.rs")).as_deref(),
        Some("browser")
    );
    assert_eq!(
        module_name(Path::new("x/browser/tabs.rs")).as_deref(),
        Some("tabs")
    );
    assert_eq!(module_name(Path::new("x/src/lib.rs")), None);
    let map = "### `a/` (library)\n`one`\n\n### `b/`\n`two`\n## Next\n";
    assert_eq!(
        code_map_section(map, "a").map(str::trim),
        Some("(library)\n`one`")
    );
    assert_eq!(code_map_section(map, "b").map(str::trim), Some("`two`"));
}

/// The text of `### \`<crate>/\`` up to the next heading.
fn code_map_section<'a>(map: &'a str, crate_dir: &str) -> Option<&'a str> {
    let heading = format!("### `{crate_dir}/`");
    let start = map.find(&heading)?;
    let body = &map[start + heading.len()..];
    let end = body.find("\n#").unwrap_or(body.len());
    Some(&body[..end])
}

/// Every identifier inside backticks in `text` (each segment of a path such as `a::b` or
/// `a/b.rs` counts).
fn backticked_words(text: &str) -> std::collections::HashSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|quoted| {
            quoted
                .split(|c: char| !is_ident(c))
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The module a source file is (`a/b.rs` and `a/b/mod.rs` are `b`); `None` for a crate root.
fn module_name(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_string_lossy().into_owned();
    match stem.as_str() {
        "lib" | "main" => None,
        "mod" => Some(path.parent()?.file_name()?.to_string_lossy().into_owned()),
        _ => Some(stem),
    }
}

#[test]
fn no_todo_or_unimplemented() {
    report(placeholder_violations(&tree()));
}

/// The rules catch what they are meant to catch (so a clean tree means something).
#[test]
fn the_rules_catch_planted_violations() {
    let planted = |path: &str, text: &str| vec![SourceFile::new(path, text)];
    let http = http_violations(&planted(
        "sandboxd/src/shell/mod.rs",
        "use axum::http::StatusCode;\n",
    ));
    assert_eq!(http.len(), 2, "{http:?}");
    assert!(
        http[0].starts_with("sandboxd/src/shell/mod.rs:1:"),
        "{http:?}"
    );
    // In prose and in strings, the words do not count; in the proxy, axum does but not status.
    assert_eq!(
        http_violations(&planted(
            "sandboxd/src/shell/mod.rs",
            "// axum\nlet s = \"StatusCode\"; /* axum */\n",
        )),
        Vec::<String>::new()
    );
    assert_eq!(
        http_violations(&planted(
            "orchestrator/src/proxy/http.rs",
            "use axum::body::Body;\nuse axum::http::StatusCode;\n",
        ))
        .len(),
        1
    );

    let spawn = spawn_violations(&planted(
        "sandboxd/src/browser/mod.rs",
        "fn f() {\n    // Why.\n    #[allow(clippy::disallowed_methods)]\n    let _ = std::process::Command::new(\"x\").output();\n}\n",
    ));
    assert_eq!(spawn.len(), 2, "{spawn:?}");
    let spawn = spawn_violations(&planted(
        "sandboxd/tests/x.rs",
        "#[allow(clippy::disallowed_methods)]\nfn f() {}\n",
    ));
    assert_eq!(
        spawn.len(),
        1,
        "a test's allowance without a reason: {spawn:?}"
    );
    let spawn = spawn_violations(&planted(
        "sandboxd/tests/x.rs",
        "#![allow(clippy::disallowed_methods)]\n",
    ));
    assert_eq!(spawn.len(), 2, "a file-wide allowance: {spawn:?}");
    let spawn = spawn_violations(&planted(
        "desktop/src/lib.rs",
        "fn f() { let _ = nix::unistd::fork(); }\n",
    ));
    assert_eq!(spawn.len(), 1, "{spawn:?}");
    let spawn = spawn_violations(&planted(
        "desktop/src/lib.rs",
        "fn f() {}\n#[cfg(test)]\nmod tests {\n    // A test child.\n    #[allow(clippy::disallowed_methods)]\n    fn g() { std::process::Command::new(\"x\").status(); }\n}\n",
    ));
    assert_eq!(spawn, Vec::<String>::new(), "a unit test's child");
    let spawn = spawn_violations(&planted(
        "desktop/src/lib.rs",
        "#[cfg(test)]\nmod tests {\n    fn g() {}\n}\n\nfn f() { std::process::Command::new(\"x\"); }\n",
    ));
    assert_eq!(
        spawn.len(),
        1,
        "code after the test module is not test code: {spawn:?}"
    );

    let unsafe_code = unsafe_violations(&planted(
        "desktop/src/capture.rs",
        "fn f() {\n    #[allow(unsafe_code)]\n    unsafe { g() }\n}\n",
    ));
    assert_eq!(unsafe_code.len(), 2, "{unsafe_code:?}");

    let layering = api_layer_violations(&planted(
        "sandboxd/src/system_info.rs",
        "use crate::api::types::SandboxContext;\nuse crate::{config, apis::x};\n// crate::api\n",
    ));
    assert_eq!(layering.len(), 1, "{layering:?}");
    assert!(
        layering[0].starts_with("sandboxd/src/system_info.rs:1:"),
        "{layering:?}"
    );
    assert_eq!(
        api_layer_violations(&planted(
            "sandboxd/src/api/sandbox.rs",
            "use crate::api::types::SandboxContext;\n",
        )),
        Vec::<String>::new()
    );

    let placeholders = placeholder_violations(&planted(
        "agent/src/x.rs",
        "fn f() { todo!() }\nfn g() { unimplemented!(\"later\") }\nfn h() { mytodo!() } // todo!()\n",
    ));
    assert_eq!(placeholders.len(), 2, "{placeholders:?}");
}

#[test]
fn comments_and_strings_are_blanked_line_by_line() {
    let code = "let a = \"x // y\"; // todo!()\nlet b = r#\"axum \"q\"\"#; let c = '\"';\n\
                /* one /* nested */\n still */ fn f<'a>(s: &'a str) {}\nlet d = b\"\\\"axum\";\n\
                let e = b'\"'; let f = 1;\n";
    let blanked = blank(code);
    assert_eq!(blanked.lines().count(), code.lines().count());
    assert!(!blanked.contains("todo"), "{blanked}");
    assert!(!blanked.contains("axum"), "{blanked}");
    assert!(!blanked.contains("nested"), "{blanked}");
    assert!(blanked.contains("fn f<'a>(s: &'a str) {}"), "{blanked}");
    assert!(blanked.contains("let c = ' ';"), "{blanked}");
    assert!(blanked.contains("let e = b' '; let f = 1;"), "{blanked}");
}

// ---- the rules ----

fn http_violations(files: &[SourceFile]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut used = vec![false; HTTP_RULES.iter().map(|r| r.allowed.len()).sum()];
    for file in files {
        let Some(rule) = HTTP_RULES.iter().find(|r| file.path.starts_with(r.dir)) else {
            continue;
        };
        let offset: usize = HTTP_RULES
            .iter()
            .take_while(|r| !std::ptr::eq(*r, rule))
            .map(|r| r.allowed.len())
            .sum();
        for (number, line) in file.code_lines() {
            for word in rule.words {
                if !has_word(line, word) {
                    continue;
                }
                let allowance = rule.allowed.iter().position(|(prefix, words, _)| {
                    file.path.starts_with(prefix) && words.contains(word)
                });
                match allowance {
                    Some(index) => used[offset + index] = true,
                    None => problems.push(format!(
                        "{}:{number}: `{word}` outside the HTTP layer of {} (move the code into \
                         api/, or allow it in HTTP_RULES with a reason)",
                        file.path, rule.dir
                    )),
                }
            }
        }
    }
    if files.len() > 1 {
        let allowances = HTTP_RULES.iter().flat_map(|r| r.allowed.iter());
        for ((prefix, words, _), used) in allowances.zip(used) {
            if !used {
                problems.push(format!(
                    "HTTP_RULES allows {words:?} under {prefix}, which no longer uses them"
                ));
            }
        }
    }
    problems
}

fn spawn_violations(files: &[SourceFile]) -> Vec<String> {
    const SPAWN_CALLS: &[&str] = &[
        "fork",
        "vfork",
        "posix_spawn",
        "posix_spawnp",
        "execv",
        "execve",
        "execvp",
        "execvpe",
        "fexecve",
        "system",
    ];
    let mut problems = Vec::new();
    let mut builders_used = vec![false; COMMAND_BUILDERS.len()];
    let mut spawners_used = vec![false; DIRECT_SPAWNERS.len()];
    for file in files {
        let harness = file.is_test_or_bench_code();
        for (number, line) in file.code_lines() {
            let in_tests = harness || file.is_test_line(number);
            if !in_tests
                && (line.contains("Command::new")
                    || line.contains("process::Command")
                    || line.contains("tokio::process"))
            {
                match COMMAND_BUILDERS.iter().position(|(p, _)| *p == file.path) {
                    Some(index) => builders_used[index] = true,
                    None => problems.push(format!(
                        "{}:{number}: builds a process `Command` outside the files that feed \
                         `supervisor::reaper().spawn` (go through the reaper, or add the file \
                         to COMMAND_BUILDERS with a reason)",
                        file.path
                    )),
                }
            }
            if !in_tests && !FORKS_ELSEWHERE.iter().any(|(p, _)| *p == file.path) {
                for call in SPAWN_CALLS {
                    if has_call(line, call) {
                        problems.push(format!(
                            "{}:{number}: `{call}` starts a process behind the reaper's back",
                            file.path
                        ));
                    }
                }
            }
            if line.contains("clippy::disallowed_methods") {
                if line.contains("#![") {
                    problems.push(format!(
                        "{}:{number}: a file-wide allowance of direct spawning; allow the one \
                         item that spawns, with a reason",
                        file.path
                    ));
                }
                if !file.has_reason_above(number, |comment| !comment.starts_with("///")) {
                    problems.push(format!(
                        "{}:{number}: direct spawning allowed without a reason: say why on a \
                         `//` comment right above",
                        file.path
                    ));
                }
                if !in_tests {
                    match DIRECT_SPAWNERS.iter().position(|(p, _)| *p == file.path) {
                        Some(index) => spawners_used[index] = true,
                        None => problems.push(format!(
                            "{}:{number}: production code spawns a child directly; go through \
                             `supervisor::reaper().spawn` (or add the file to DIRECT_SPAWNERS \
                             with a reason)",
                            file.path
                        )),
                    }
                }
            }
        }
    }
    if files.len() > 1 {
        stale(
            "COMMAND_BUILDERS",
            COMMAND_BUILDERS,
            &builders_used,
            &mut problems,
        );
        stale(
            "DIRECT_SPAWNERS",
            DIRECT_SPAWNERS,
            &spawners_used,
            &mut problems,
        );
    }
    problems
}

fn unsafe_violations(files: &[SourceFile]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut used = vec![false; UNSAFE_ALLOWED.len()];
    for file in files {
        for (number, line) in file.code_lines() {
            if !line.contains("allow(unsafe_code)") {
                continue;
            }
            match UNSAFE_ALLOWED.iter().position(|(p, _)| *p == file.path) {
                Some(index) => used[index] = true,
                None => problems.push(format!(
                    "{}:{number}: `unsafe` outside the files that need it (UNSAFE_ALLOWED)",
                    file.path
                )),
            }
            let explained = file.has_reason_above(number, |comment| {
                comment.contains("SAFETY:") || comment.contains("# Safety")
            });
            if !explained {
                problems.push(format!(
                    "{}:{number}: unsafe code allowed without a `// SAFETY:` comment (or a \
                     `# Safety` section) right above",
                    file.path
                ));
            }
        }
    }
    if files.len() > 1 {
        stale("UNSAFE_ALLOWED", UNSAFE_ALLOWED, &used, &mut problems);
    }
    problems
}

fn api_layer_violations(files: &[SourceFile]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut used = vec![false; API_USERS.len()];
    for file in files {
        if !file.path.starts_with("sandboxd/src/") || file.path.starts_with("sandboxd/src/api/") {
            continue;
        }
        let allowance = API_USERS.iter().position(|(path, _)| file.path == *path);
        for (number, line) in file.code_lines() {
            if !find_word(line, "api").any(|end| line[end..].starts_with("::")) {
                continue;
            }
            match allowance {
                Some(index) => used[index] = true,
                None => problems.push(format!(
                    "{}:{number}: a capability module reaches into the HTTP layer (`api::`); \
                     return a type of its own and let api/ map it to the wire",
                    file.path
                )),
            }
        }
    }
    if files.len() > 1 {
        stale("API_USERS", API_USERS, &used, &mut problems);
    }
    problems
}

fn placeholder_violations(files: &[SourceFile]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        for (number, line) in file.code_lines() {
            for name in ["todo", "unimplemented"] {
                if find_word(line, name).any(|end| line[end..].starts_with('!')) {
                    problems.push(format!(
                        "{}:{number}: `{name}!` left in the code",
                        file.path
                    ));
                }
            }
        }
    }
    problems
}

/// Every member opts into the workspace lints, and the lints and clippy.toml say what they must.
fn lint_config_violations(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    let manifest = read(&root.join("Cargo.toml"));
    for needed in [
        "unsafe_code = \"deny\"",
        "disallowed_methods = \"deny\"",
        "undocumented_unsafe_blocks = \"deny\"",
    ] {
        if !manifest.contains(needed) {
            problems.push(format!("Cargo.toml: [workspace.lints] lacks `{needed}`"));
        }
    }
    let members = manifest
        .lines()
        .find_map(|line| line.strip_prefix("members = ["))
        .map(|list| {
            list.trim_end_matches(']')
                .split(',')
                .map(|m| m.trim().trim_matches('"').to_string())
                .filter(|m| !m.is_empty())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if members.is_empty() {
        problems.push("Cargo.toml: no workspace members found".into());
    }
    for member in members {
        let text = read(&root.join(&member).join("Cargo.toml"));
        let opted_in = text
            .split("[lints]")
            .nth(1)
            .and_then(|rest| rest.lines().map(str::trim).find(|l| !l.is_empty()))
            == Some("workspace = true");
        if !opted_in {
            problems.push(format!(
                "{member}/Cargo.toml: lacks `[lints] workspace = true`"
            ));
        }
    }
    let clippy = read(&root.join("clippy.toml"));
    for path in DISALLOWED_METHODS {
        if !clippy.contains(&format!("path = \"{path}\"")) {
            problems.push(format!("clippy.toml: disallowed-methods lacks `{path}`"));
        }
    }
    problems
}

fn stale(list: &str, entries: &[(&str, &str)], used: &[bool], problems: &mut Vec<String>) {
    for ((path, _), used) in entries.iter().zip(used) {
        if !used {
            problems.push(format!(
                "{list} lists {path}, which no longer needs it: remove the entry"
            ));
        }
    }
}

fn report(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{} tidy problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ---- the tree ----

/// One Rust source file: its path from the workspace root and its text, with comments and
/// string contents blanked.
struct SourceFile {
    path: String,
    raw: Vec<String>,
    code: Vec<String>,
    /// The lines (1-based, inclusive) of its `#[cfg(test)] mod ... { ... }` blocks.
    test_blocks: Vec<(usize, usize)>,
}

impl SourceFile {
    fn new(path: &str, text: &str) -> Self {
        let raw: Vec<String> = text.lines().map(str::to_owned).collect();
        let code: Vec<String> = blank(text).lines().map(str::to_owned).collect();
        let test_blocks = test_blocks(&code);
        Self {
            path: path.to_owned(),
            raw,
            code,
            test_blocks,
        }
    }

    /// (1-based line number, code).
    fn code_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.code
            .iter()
            .enumerate()
            .map(|(index, line)| (index + 1, line.as_str()))
    }

    fn is_test_line(&self, number: usize) -> bool {
        self.test_blocks
            .iter()
            .any(|&(first, last)| (first..=last).contains(&number))
    }

    /// Integration tests, the end-to-end harness and the benchmarks.
    fn is_test_or_bench_code(&self) -> bool {
        self.path.starts_with("tests/")
            || self.path.starts_with("bench/")
            || self.path.starts_with("fuzz/")
            || self.path.contains("/tests/")
            || self.path.contains("/benches/")
            || self.path.contains("/examples/")
    }

    /// Whether the comments right above line `number` (past attributes and doc comments) hold
    /// one that `accept`s.
    fn has_reason_above(&self, number: usize, accept: impl Fn(&str) -> bool) -> bool {
        self.raw[..number - 1]
            .iter()
            .rev()
            .map(|line| line.trim())
            .take_while(|line| line.starts_with("//") || line.starts_with("#["))
            .any(|line| line.starts_with("//") && accept(line))
    }
}

/// The `#[cfg(test)]` modules of blanked `code`: from the attribute to the closing brace.
fn test_blocks(code: &[String]) -> Vec<(usize, usize)> {
    let mut blocks = Vec::new();
    let mut index = 0;
    while index < code.len() {
        if code[index].trim() != "#[cfg(test)]" {
            index += 1;
            continue;
        }
        let first = index + 1;
        let mut depth = 0usize;
        let mut opened = false;
        let mut last = code.len();
        'lines: for (offset, line) in code[index..].iter().enumerate() {
            for c in line.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => {
                        depth = depth.saturating_sub(1);
                        if opened && depth == 0 {
                            last = index + offset + 1;
                            break 'lines;
                        }
                    }
                    // `#[cfg(test)] mod tests;` or a test-only item without a body.
                    ';' if !opened => {
                        last = index + offset + 1;
                        break 'lines;
                    }
                    _ => {}
                }
            }
        }
        blocks.push((first, last));
        index = last;
    }
    blocks
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Every `.rs` file of the repository, build directories and hidden ones left out.
fn tree() -> Vec<SourceFile> {
    let root = root();
    let mut paths = Vec::new();
    collect(&root, &mut paths);
    paths.sort();
    let files: Vec<SourceFile> = paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
            let relative = path.strip_prefix(&root).unwrap_or(path);
            SourceFile::new(&relative.to_string_lossy(), &text)
        })
        .collect();
    assert!(
        files.iter().any(|f| f.path == "supervisor/src/reaper.rs"),
        "the tree was not found under {}",
        root.display()
    );
    files
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if !name.starts_with('.') && !name.starts_with("target") && name != "node_modules" {
                collect(&path, out);
            }
        } else if kind.is_file() && name.ends_with(".rs") {
            out.push(path);
        }
    }
}

// ---- reading code ----

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Byte offsets just past each whole-identifier occurrence of `word` in `line`.
fn find_word<'a>(line: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    line.match_indices(word).filter_map(move |(start, _)| {
        let end = start + word.len();
        let before = line[..start].chars().next_back();
        let after = line[end..].chars().next();
        (!before.is_some_and(is_ident) && !after.is_some_and(is_ident)).then_some(end)
    })
}

fn has_word(line: &str, word: &str) -> bool {
    find_word(line, word).next().is_some()
}

/// `word(`, or `word` reached through a path (`libc::word`).
fn has_call(line: &str, word: &str) -> bool {
    find_word(line, word).any(|end| {
        let start = end - word.len();
        line[end..].trim_start().starts_with('(') || line[..start].ends_with("::")
    }) && !line.contains(&format!("fn {word}"))
}

/// `text` with every comment and the inside of every string and character literal replaced by
/// spaces, newlines kept, so that line numbers and the code around stay where they were.
fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank_char = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && is_ident(chars[i - 1]);
        // `br"..."` and `cr"..."` are raw strings too.
        let raw_prefix_ok = !prev_ident
            || (matches!(chars[i - 1], 'b' | 'c') && !(i > 1 && is_ident(chars[i - 2])));
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank_char(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && raw_prefix_ok
            && matches!(next, Some('"') | Some('#'))
            && raw_string_hashes(&chars, i + 1).is_some()
        {
            let hashes = raw_string_hashes(&chars, i + 1).unwrap_or(0);
            // r, the hashes and the opening quote stay.
            for _ in 0..hashes + 2 {
                out.push(chars[i]);
                i += 1;
            }
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&closing) {
                out.push(blank_char(chars[i]));
                i += 1;
            }
            for _ in 0..closing.len().min(chars.len() - i) {
                out.push(chars[i]);
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    out.push(' ');
                    i += 1;
                }
                out.push(blank_char(chars[i]));
                i += 1;
            }
            if i < chars.len() {
                out.push('"');
                i += 1;
            }
        } else if c == '\'' && (!prev_ident || (chars[i - 1] == 'b' && raw_prefix_ok)) {
            // A character literal ('x', '\n', '\u{1F600}'), or else a lifetime or label.
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map(|p| i + 2 + p)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push('\'');
                    for _ in i + 1..end {
                        out.push(' ');
                    }
                    out.push('\'');
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// With `chars[at..]` just past an `r`: the number of `#` before the opening quote of a raw
/// string, or `None` when this is not one.
fn raw_string_hashes(chars: &[char], at: usize) -> Option<usize> {
    let hashes = chars[at..].iter().take_while(|&&c| c == '#').count();
    (chars.get(at + hashes) == Some(&'"')).then_some(hashes)
}
