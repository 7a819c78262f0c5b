//! `/v1/file/*` through the router (`oneshot`, no socket) on a real temporary directory as the
//! only allowed root: every operation's happy path with AIO's field names, path escapes (each
//! refused with 403 and the outside untouched: `escapes`), sockets, FIFOs and documents the
//! editor does not read (`not_text`), size limits (413), bad bodies (400/422).

mod escapes;
mod not_text;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentbox_tests::router::{self, Call};
use axum::http::{HeaderMap, StatusCode};
use sandboxd::activity::Activity;
use sandboxd::api::{AppState, router};
use sandboxd::config::Settings;
use serde_json::{Value, json};
use supervisor::{Supervisor, SupervisorConfig};
use tempfile::TempDir;

/// A root with a workspace, a directory outside it holding a secret, and symlinks from the
/// root to the outside.
struct Fixture {
    root: TempDir,
    outside: TempDir,
    app: axum::Router,
}

struct Limits {
    read: u64,
    write: u64,
    upload: u64,
}

const ROOMY: Limits = Limits {
    read: 1 << 20,
    write: 1 << 20,
    upload: 1 << 20,
};

const SECRET: &str = "outside secret\n";

impl Fixture {
    fn new(limits: Limits) -> Self {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("workspace")).unwrap();
        std::fs::write(outside.path().join("secret"), SECRET).unwrap();
        symlink(outside.path(), root.path().join("out")).unwrap();
        symlink(
            outside.path().join("secret"),
            root.path().join("secret-link"),
        )
        .unwrap();
        let mut settings =
            Settings::from_lookup(|name| (name == "SANDBOX_AUTH").then(|| "none".to_string()))
                .unwrap();
        settings.file_roots = vec![root.path().to_path_buf()];
        settings.workspace = root.path().join("workspace");
        settings.max_read_bytes = limits.read;
        settings.max_write_bytes = limits.write;
        settings.max_upload_bytes = limits.upload;
        let supervisor = Arc::new(Supervisor::start(SupervisorConfig::default()).unwrap());
        let app = router(AppState::new(
            supervisor,
            Arc::new(settings),
            Activity::new(),
        ));
        Self { root, outside, app }
    }

    /// A path inside the root, as a string.
    fn at(&self, rel: &str) -> String {
        self.root.path().join(rel).display().to_string()
    }

    fn outside(&self, rel: &str) -> PathBuf {
        self.outside.path().join(rel)
    }

    async fn post(&self, route: &str, body: Value) -> (StatusCode, Value) {
        self.post_bytes(route, "application/json", body.to_string().into_bytes())
            .await
    }

    async fn post_bytes(
        &self,
        route: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let (status, _, bytes) = self.send(Call::post(route).bytes(content_type, body)).await;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, value)
    }

    async fn send(&self, call: Call) -> (StatusCode, HeaderMap, Vec<u8>) {
        let answer = router::send(&self.app, call).await;
        (answer.status, answer.headers, answer.body.to_vec())
    }

    async fn download(&self, path: &str) -> (StatusCode, HeaderMap, Vec<u8>) {
        let query = format!("/v1/file/download?path={}", encode_query(path));
        self.send(Call::get(query)).await
    }

    async fn upload(&self, parts: &[Part<'_>]) -> (StatusCode, Value) {
        let (content_type, body) = multipart(parts);
        self.post_bytes("/v1/file/upload", &content_type, body)
            .await
    }

    /// Expects a 403 whose message names `needle`, and checks the outside is untouched.
    async fn expect_refused(&self, route: &str, body: Value, needle: &str) {
        let (status, answer) = self.post(route, body.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{route} {body}: {answer}");
        assert_eq!(answer["success"], false);
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{route}: {message:?} lacks {needle:?}"
        );
        self.assert_outside_untouched();
    }

    fn assert_outside_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(self.outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec!["secret".to_string()],
            "something appeared outside"
        );
        assert_eq!(
            std::fs::read_to_string(self.outside("secret")).unwrap(),
            SECRET
        );
    }
}

struct Part<'a> {
    name: &'a str,
    filename: Option<&'a str>,
    data: &'a [u8],
}

fn multipart(parts: &[Part<'_>]) -> (String, Vec<u8>) {
    let boundary = "----agentbox-test-boundary-7d1f";
    let mut body = Vec::new();
    for part in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match part.filename {
            Some(filename) => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{}\"; filename=\"{filename}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n",
                    part.name
                )
                .as_bytes(),
            ),
            None => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{}\"\r\n\r\n",
                    part.name
                )
                .as_bytes(),
            ),
        }
        body.extend_from_slice(part.data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

fn encode_query(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn all_bytes() -> Vec<u8> {
    (0..4096u32).map(|i| (i * 7 % 256) as u8).collect()
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

#[tokio::test]
async fn write_then_read_text_ranges_and_binary() {
    let f = Fixture::new(ROOMY);
    // Relative paths land in the workspace; missing parents are created.
    let (status, body) = f
        .post(
            "/v1/file/write",
            json!({"file": "notes/a.txt", "content": "zero\none\ntwo\nthree"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["data"]["file"], f.at("workspace/notes/a.txt"));
    assert_eq!(body["data"]["bytes_written"], 18);

    let (status, body) = f
        .post(
            "/v1/file/read",
            json!({"file": f.at("workspace/notes/a.txt")}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["content"], "zero\none\ntwo\nthree");
    assert_eq!(body["data"]["file"], f.at("workspace/notes/a.txt"));

    // 0-based start, exclusive end; floats with no fraction are integers.
    for (start, end, expected) in [
        (json!(1), json!(3), "one\ntwo\n"),
        (json!(2.0), Value::Null, "two\nthree"),
        (Value::Null, json!(1), "zero\n"),
        (json!(10), Value::Null, ""),
        // Negative counts from the end, as a Python slice (the file has four lines, the last
        // without its newline).
        (json!(-2), Value::Null, "two\nthree"),
        (json!(-2.0), json!(-1), "two\n"),
        (Value::Null, json!(-3), "zero\n"),
        (json!(1), json!(-1), "one\ntwo\n"),
        (json!(-10), json!(1), "zero\n"),
        (json!(-1), json!(-2), ""),
        (json!(3), json!(-2), ""),
    ] {
        let (status, body) = f
            .post(
                "/v1/file/read",
                json!({"file": "notes/a.txt", "start_line": start, "end_line": end}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["data"]["content"], expected, "{start}..{end}");
    }

    // Append with newlines around the text.
    let (status, _) = f
        .post(
            "/v1/file/write",
            json!({"file": "notes/a.txt", "content": "four", "append": true,
                   "leading_newline": true, "trailing_newline": true, "sudo": null}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        std::fs::read_to_string(f.root.path().join("workspace/notes/a.txt")).unwrap(),
        "zero\none\ntwo\nthree\nfour\n"
    );

    // Binary: base64 in, base64 out, exact bytes.
    let bytes = all_bytes();
    let (status, body) = f
        .post(
            "/v1/file/write",
            json!({"file": "bin/blob.bin", "content": b64(&bytes), "encoding": "base64"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["bytes_written"], bytes.len());
    assert_eq!(
        std::fs::read(f.root.path().join("workspace/bin/blob.bin")).unwrap(),
        bytes
    );
    let (status, body) = f
        .post(
            "/v1/file/read",
            json!({"file": "bin/blob.bin", "encoding": "base64"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(unb64(body["data"]["content"].as_str().unwrap()), bytes);
    // As text it is refused with a hint, not mangled.
    let (status, body) = f
        .post("/v1/file/read", json!({"file": "bin/blob.bin"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"].as_str().unwrap().contains("base64"),
        "{body}"
    );

    // Errors name the problem.
    let (status, body) = f
        .post("/v1/file/read", json!({"file": "nothing/here.txt"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("nothing/here.txt")
    );
    let (status, _) = f.post("/v1/file/read", json!({"file": "notes"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = f
        .post(
            "/v1/file/write",
            json!({"file": "x.bin", "content": "%%%", "encoding": "base64"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "content"]));
    assert!(!f.root.path().join("workspace/x.bin").exists());
    let (status, body) = f
        .post(
            "/v1/file/read",
            json!({"file": "notes/a.txt", "sudo": true}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "sudo"]));
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("unprivileged"), "{message}");
    assert!(
        message.contains("cannot gain root") || message.contains("can gain root"),
        "{message}"
    );
}

#[tokio::test]
async fn replace_and_search_in_a_file() {
    let f = Fixture::new(ROOMY);
    std::fs::write(
        f.root.path().join("workspace/code.py"),
        "def a():\n    return 1\ndef b():\n    return 1\n",
    )
    .unwrap();
    let (status, body) = f
        .post(
            "/v1/file/replace",
            json!({"file": "code.py", "old_str": "return 1", "new_str": "return 2"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["replaced_count"], 2);
    assert_eq!(body["data"]["file"], f.at("workspace/code.py"));
    assert_eq!(
        std::fs::read_to_string(f.root.path().join("workspace/code.py")).unwrap(),
        "def a():\n    return 2\ndef b():\n    return 2\n"
    );
    let (status, body) = f
        .post(
            "/v1/file/replace",
            json!({"file": "code.py", "old_str": "absent", "new_str": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["replaced_count"], 0);

    let (status, body) = f
        .post(
            "/v1/file/search",
            json!({"file": "code.py", "regex": "^def (a|b)"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["matches"], json!(["def a():", "def b():"]));
    assert_eq!(body["data"]["line_numbers"], json!([0, 2]));
    let (status, body) = f
        .post("/v1/file/search", json!({"file": "code.py", "regex": "("}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "regex"]));
}

/// A small tree: workspace/{src/{main.rs, lib.rs, .hidden.rs}, docs/{guide.md, deep/notes.txt},
/// big.txt, .env}, plus a symlink to the outside directory.
fn tree(f: &Fixture) {
    let w = f.root.path().join("workspace");
    for dir in ["src", "docs/deep", ".git"] {
        std::fs::create_dir_all(w.join(dir)).unwrap();
    }
    std::fs::write(
        w.join("src/main.rs"),
        "fn main() {\n    println!(\"Hello\");\n}\n",
    )
    .unwrap();
    std::fs::write(w.join("src/lib.rs"), "// hello from lib\npub fn x() {}\n").unwrap();
    std::fs::write(w.join("src/.hidden.rs"), "hello hidden\n").unwrap();
    std::fs::write(w.join("docs/guide.md"), "# Guide\nhello guide\n").unwrap();
    std::fs::write(
        w.join("docs/deep/notes.txt"),
        "one\ntwo\nhello three\nfour\nfive\n",
    )
    .unwrap();
    std::fs::write(w.join("big.txt"), "hello ".repeat(1000)).unwrap();
    std::fs::write(w.join(".env"), "hello=secret\n").unwrap();
    std::fs::write(w.join(".git/config"), "hello git\n").unwrap();
    std::fs::write(w.join("bin.dat"), b"hello\0binary").unwrap();
    std::fs::write(f.outside("hello.txt"), "hello from outside\n").unwrap();
    symlink(f.outside.path(), w.join("escape")).unwrap();
}

#[tokio::test]
async fn list_find_glob() {
    let f = Fixture::new(ROOMY);
    tree(&f);
    let ws = f.at("workspace");
    a_listing_shows_one_level_with_metadata_and_symlinks_unfollowed(&f, &ws).await;
    a_recursive_listing_filters_sorts_and_stays_inside_the_root(&f, &ws).await;
    a_listing_is_cut_by_depth_sorted_by_size_and_refuses_bad_input(&f, &ws).await;
    find_matches_globs_inside_the_root_and_refuses_a_bad_one(&f, &ws).await;
    glob_gives_metadata_and_follows_its_options(&f, &ws).await;
}

async fn a_listing_shows_one_level_with_metadata_and_symlinks_unfollowed(f: &Fixture, ws: &str) {
    let (status, body) = f.post("/v1/file/list", json!({"path": ws})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    let names: Vec<&str> = data["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            ".env", ".git", "big.txt", "bin.dat", "docs", "escape", "src"
        ]
    );
    assert_eq!(data["path"], ws);
    assert_eq!(data["total_count"], 7);
    assert_eq!(data["directory_count"], 3);
    assert_eq!(data["file_count"], 4);
    let big = &data["files"][2];
    assert_eq!(big["path"], f.at("workspace/big.txt"));
    assert_eq!(big["is_directory"], false);
    assert_eq!(big["size"], 6000);
    assert_eq!(big["extension"], ".txt");
    assert!(big["modified_time"].as_str().unwrap().ends_with('Z'));
    assert!(big.get("permissions").is_none());
    // The symlink is listed as one, not followed.
    let escape = &data["files"][5];
    assert_eq!(escape["is_symlink"], true);
    assert_eq!(escape["is_directory"], false);
}

async fn a_recursive_listing_filters_sorts_and_stays_inside_the_root(f: &Fixture, ws: &str) {
    let (status, body) = f
        .post(
            "/v1/file/list",
            json!({"path": ws, "recursive": true, "show_hidden": false,
                   "file_types": [".rs", "md"], "include_permissions": true,
                   "sort_by": "name", "sort_desc": false}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let paths: Vec<&str> = body["data"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = [
        "docs/deep",
        "docs",
        "docs/guide.md",
        "src/lib.rs",
        "src/main.rs",
        "src",
    ]
    .iter()
    .map(|p| f.at(&format!("workspace/{p}")))
    .collect();
    assert_eq!(paths, expected);
    assert!(
        body["data"]["files"][2]["permissions"]
            .as_str()
            .unwrap()
            .starts_with("-rw")
    );
    // Nothing of the outside directory shows through the symlink.
    assert!(!body.to_string().contains("hello.txt"));
}

async fn a_listing_is_cut_by_depth_sorted_by_size_and_refuses_bad_input(f: &Fixture, ws: &str) {
    let (status, body) = f
        .post(
            "/v1/file/list",
            json!({"path": ws, "recursive": true, "max_depth": 1, "sort_by": "size", "sort_desc": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["files"][0]["name"], "big.txt");
    assert_eq!(body["data"]["total_count"], 7);

    let (status, body) = f
        .post("/v1/file/list", json!({"path": ws, "sort_by": "colour"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "sort_by"]));
    let (status, _) = f
        .post("/v1/file/list", json!({"path": f.at("workspace/big.txt")}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

async fn find_matches_globs_inside_the_root_and_refuses_a_bad_one(f: &Fixture, ws: &str) {
    let (status, body) = f
        .post("/v1/file/find", json!({"path": ws, "glob": "*.rs"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["data"]["files"],
        json!([
            f.at("workspace/src/.hidden.rs"),
            f.at("workspace/src/lib.rs"),
            f.at("workspace/src/main.rs")
        ])
    );
    assert_eq!(body["data"]["path"], ws);
    let (status, body) = f
        .post(
            "/v1/file/find",
            json!({"path": ws, "glob": "docs/**/*.txt"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["data"]["files"],
        json!([f.at("workspace/docs/deep/notes.txt")])
    );
    let (status, body) = f
        .post("/v1/file/find", json!({"path": ws, "glob": "hello.txt"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["files"], json!([]));
    let (status, body) = f
        .post("/v1/file/find", json!({"path": ws, "glob": "[z-a]"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "glob"]));
}

async fn glob_gives_metadata_and_follows_its_options(f: &Fixture, ws: &str) {
    let (status, body) = f
        .post("/v1/file/glob", json!({"path": ws, "pattern": "**/*.rs"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    assert_eq!(data["pattern"], "**/*.rs");
    assert_eq!(data["total_count"], 2);
    assert_eq!(data["truncated"], false);
    assert_eq!(data["files"][0]["path"], f.at("workspace/src/lib.rs"));
    assert_eq!(data["files"][0]["name"], "lib.rs");
    assert_eq!(data["files"][0]["is_directory"], false);
    assert_eq!(data["files"][0]["size"], 32);
    assert!(data["files"][0]["modified_time"].is_string());
    let (status, body) = f
        .post(
            "/v1/file/glob",
            json!({"path": ws, "pattern": "*", "files_only": false, "include_hidden": true,
                   "include_metadata": false, "max_results": 2, "exclude": ["*.dat"],
                   "sort_by": "name", "sort_desc": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    assert_eq!(data["total_count"], 6);
    assert_eq!(data["truncated"], true);
    assert_eq!(data["files"][0]["name"], "src");
    assert_eq!(data["files"][0]["is_directory"], true);
    assert_eq!(data["files"][1]["name"], "escape");
    assert!(data["files"][0].get("size").is_none());
}

#[tokio::test]
async fn grep_across_files() {
    let f = Fixture::new(ROOMY);
    tree(&f);
    let ws = f.at("workspace");
    let (status, body) = f
        .post(
            "/v1/file/grep",
            json!({"path": ws, "pattern": "hello", "case_insensitive": true,
                   "context_before": 1, "context_after": 1, "max_file_size": "1K"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = &body["data"];
    assert_eq!(data["path"], ws);
    assert_eq!(data["pattern"], "hello");
    let hits: Vec<(String, u64)> = data["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["file"].as_str().unwrap().to_string(),
                m["line_number"].as_u64().unwrap(),
            )
        })
        .collect();
    // Hidden files, the binary file, the file over 1K and the outside (via the symlink) are
    // all skipped.
    assert_eq!(
        hits,
        vec![
            (f.at("workspace/docs/deep/notes.txt"), 3),
            (f.at("workspace/docs/guide.md"), 2),
            (f.at("workspace/src/lib.rs"), 1),
            (f.at("workspace/src/main.rs"), 2),
        ]
    );
    let notes = &data["matches"][0];
    assert_eq!(notes["line_content"], "hello three");
    assert_eq!(notes["context_before"], json!(["two"]));
    assert_eq!(notes["context_after"], json!(["four"]));
    assert_eq!(data["match_count"], 4);
    assert_eq!(data["files_matched"], 4);
    // Binary files and files over max_file_size are not searched.
    assert_eq!(data["files_searched"], 4);
    assert_eq!(data["truncated"], false);

    let (status, body) = f
        .post(
            "/v1/file/grep",
            json!({"path": ws, "pattern": "hello", "type": "rust", "fixed_strings": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["matches"].as_array().unwrap().len(), 1);
    let (status, body) = f
        .post(
            "/v1/file/grep",
            json!({"path": ws, "pattern": "hello", "include": ["*.md", "*.txt"],
                   "exclude": ["deep"], "max_file_size": "10K"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let files: Vec<&str> = body["data"]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["file"].as_str().unwrap())
        .collect();
    assert_eq!(
        files,
        vec![
            f.at("workspace/big.txt").as_str(),
            f.at("workspace/docs/guide.md").as_str()
        ]
    );
    // Pagination.
    let (status, body) = f
        .post(
            "/v1/file/grep",
            json!({"path": ws, "pattern": "(?i)hello", "max_results": 2, "offset": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["match_count"], 2);
    assert_eq!(body["data"]["truncated"], true);
    // Walk order: big.txt (skipped by the offset), then docs/deep/notes.txt, docs/guide.md.
    assert_eq!(
        body["data"]["matches"][0]["file"],
        f.at("workspace/docs/deep/notes.txt")
    );
    assert_eq!(
        body["data"]["matches"][1]["file"],
        f.at("workspace/docs/guide.md")
    );
    // Multiline: a match spanning lines reports its first line.
    let (status, body) = f
        .post(
            "/v1/file/grep",
            json!({"path": f.at("workspace/src/main.rs"), "pattern": "main.*Hello", "multiline": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["matches"][0]["line_number"], 1);
    assert_eq!(
        body["data"]["matches"][0]["line_content"],
        "fn main() {\n    println!(\"Hello\");"
    );
    // Not recursive: only the directory's own files.
    let (status, body) = f
        .post(
            "/v1/file/grep",
            json!({"path": ws, "pattern": "hello", "recursive": false, "max_file_size": "1M"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["data"]["matches"][0]["file"],
        f.at("workspace/big.txt")
    );
    assert_eq!(body["data"]["files_searched"], 1);

    for (request, field) in [
        (json!({"path": ws, "pattern": "("}), "pattern"),
        (json!({"path": ws, "pattern": "x", "type": "cobol"}), "type"),
        (
            json!({"path": ws, "pattern": "x", "context_before": 21}),
            "context_before",
        ),
        (
            json!({"path": ws, "pattern": "x", "max_file_size": "big"}),
            "max_file_size",
        ),
        (
            json!({"path": ws, "pattern": "x", "max_results": 0}),
            "max_results",
        ),
        (
            json!({"path": ws, "pattern": "x", "include": "*.rs"}),
            "include",
        ),
    ] {
        let (status, body) = f.post("/v1/file/grep", request).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {body}");
        assert_eq!(body["detail"][0]["loc"], json!(["body", field]));
    }
}

#[tokio::test]
async fn str_replace_editor_commands_and_undo() {
    let f = Fixture::new(ROOMY);
    let path = f.at("workspace/edit/me.py");
    let editor = |body: Value| f.post("/v1/file/str_replace_editor", body);

    let (status, body) = editor(json!({"command": "create", "path": path,
        "file_text": "a = 1\nb = 2\nc = 3\n"}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["prev_exist"], false);
    assert_eq!(body["data"]["path"], path);
    assert!(body["data"]["output"].as_str().unwrap().contains("created"));
    let (status, body) = editor(json!({"command": "create", "path": path, "file_text": "x"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    let (status, body) = editor(json!({"command": "view", "path": path})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["data"]["output"],
        format!(
            "Here's the result of running `cat -n` on {path}:\n     1\ta = 1\n     2\tb = 2\n     3\tc = 3\n"
        )
    );
    let (status, body) =
        editor(json!({"command": "view", "path": path, "view_range": [2, -1]})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body["data"]["output"]
            .as_str()
            .unwrap()
            .ends_with("     2\tb = 2\n     3\tc = 3\n")
    );
    let (status, body) =
        editor(json!({"command": "view", "path": path, "view_range": [9, 10]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "view_range"]));
    let (status, body) =
        editor(json!({"command": "view", "path": f.at("workspace"), "enable_metadata": true}))
            .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["data"]["output"].as_str().unwrap().contains(&path));
    assert_eq!(body["data"]["metadata"]["is_directory"], true);

    let (status, body) = editor(json!({"command": "str_replace", "path": path,
        "old_str": "b = 2", "new_str": "b = 20"}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["prev_exist"], true);
    assert_eq!(body["data"]["old_content"], "a = 1\nb = 2\nc = 3\n");
    assert_eq!(body["data"]["new_content"], "a = 1\nb = 20\nc = 3\n");
    assert!(
        body["data"]["output"]
            .as_str()
            .unwrap()
            .contains("     2\tb = 20\n")
    );
    // Not found / not unique: 422 naming old_str, file unchanged.
    let (status, body) = editor(json!({"command": "str_replace", "path": path,
        "old_str": "zzz", "new_str": "y"}))
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body["message"].as_str().unwrap().contains("did not appear"));
    let (status, body) = editor(json!({"command": "str_replace", "path": path,
        "old_str": " = ", "new_str": "="}))
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"].as_str().unwrap().contains("lines 1, 2, 3"),
        "{body}"
    );
    let (status, _) = editor(json!({"command": "str_replace", "path": path,
        "old_str": " = ", "new_str": "=", "replace_mode": "LAST"}))
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        std::fs::read_to_string(f.root.path().join("workspace/edit/me.py")).unwrap(),
        "a = 1\nb = 20\nc=3\n"
    );

    let (status, body) = editor(json!({"command": "insert", "path": path,
        "insert_line": 1, "new_str": "inserted = True"}))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        std::fs::read_to_string(f.root.path().join("workspace/edit/me.py")).unwrap(),
        "a = 1\ninserted = True\nb = 20\nc=3\n"
    );
    let (status, body) = editor(json!({"command": "insert", "path": path, "new_str": "x"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "insert_line"]));
    let (status, _) = editor(json!({"command": "insert", "path": path,
        "insert_line": 99, "new_str": "x"}))
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // Undo walks back through insert, the LAST replace, the first replace, and the create.
    for expected in [
        Some("a = 1\nb = 20\nc=3\n"),
        Some("a = 1\nb = 20\nc = 3\n"),
        Some("a = 1\nb = 2\nc = 3\n"),
        None,
    ] {
        let (status, body) = editor(json!({"command": "undo_edit", "path": path})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let on_disk = std::fs::read_to_string(f.root.path().join("workspace/edit/me.py")).ok();
        assert_eq!(on_disk.as_deref(), expected);
    }
    let (status, body) = editor(json!({"command": "undo_edit", "path": path})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no edit history")
    );

    let (status, body) = editor(json!({"command": "delete", "path": path})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "command"]));
    let (status, body) = editor(json!({"command": "create", "path": path})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "file_text"]));
    let (status, body) =
        editor(json!({"command": "view", "path": path, "page_range": [1, 2]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "page_range"]));
}

#[tokio::test]
async fn upload_and_download_round_trip_binary_bytes() {
    let f = Fixture::new(ROOMY);
    let bytes = all_bytes();
    let target = f.at("workspace/up/picture.png");
    let (status, body) = f
        .upload(&[
            Part {
                name: "path",
                filename: None,
                data: target.as_bytes(),
            },
            Part {
                name: "file",
                filename: Some("ignored.bin"),
                data: &bytes,
            },
        ])
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["file_path"], target);
    assert_eq!(body["data"]["file_size"], bytes.len());
    assert_eq!(body["data"]["success"], true);
    assert_eq!(std::fs::read(&target).unwrap(), bytes);

    let (status, headers, downloaded) = f.download(&target).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(downloaded, bytes);
    assert_eq!(headers["content-type"], "image/png");
    assert_eq!(headers["content-length"], bytes.len().to_string().as_str());
    assert_eq!(
        headers["content-disposition"],
        "attachment; filename=\"picture.png\"; filename*=UTF-8''picture.png"
    );

    // Without `path`: the workspace plus the sanitized file name.
    let (status, body) = f
        .upload(&[Part {
            name: "file",
            filename: Some("../../evil name.txt"),
            data: b"plain",
        }])
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["file_path"], f.at("workspace/evil name.txt"));
    // A directory as `path`: the file goes inside it under its own name.
    let (status, body) = f
        .upload(&[
            Part {
                name: "path",
                filename: None,
                data: f.at("workspace/up").as_bytes(),
            },
            Part {
                name: "file",
                filename: Some("second.txt"),
                data: b"2",
            },
        ])
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["file_path"], f.at("workspace/up/second.txt"));
    let (_, headers, downloaded) = f.download("up/second.txt").await;
    assert_eq!(downloaded, b"2");
    assert_eq!(headers["content-type"], "text/plain");

    // Bad uploads.
    let (status, body) = f
        .upload(&[Part {
            name: "other",
            filename: None,
            data: b"x",
        }])
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "file"]));
    let (status, _) = f
        .upload(&[
            Part {
                name: "file",
                filename: Some("late.txt"),
                data: b"x",
            },
            Part {
                name: "path",
                filename: None,
                data: b"/elsewhere.txt",
            },
        ])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = f
        .post_bytes("/v1/file/upload", "application/json", b"{}".to_vec())
        .await;
    assert!(status.is_client_error(), "{status}");
    assert!(body["message"].as_str().unwrap().contains("multipart"));
    let (status, _) = f
        .post_bytes(
            "/v1/file/upload",
            "multipart/form-data; boundary=xyz",
            b"--xyz\r\ngarbage".to_vec(),
        )
        .await;
    assert!(status.is_client_error(), "{status}");

    // Downloads of what is not a regular file.
    let (status, _, _) = f.download("nothing.bin").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = f.download(&f.at("workspace")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, body) = f.send(Call::get("/v1/file/download")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(String::from_utf8_lossy(&body).contains("path"));
    // No temporary files are left anywhere.
    let leftovers: Vec<_> = walk_names(f.root.path())
        .into_iter()
        .filter(|n| n.contains(".upload-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn walk_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        names.push(entry.file_name().to_string_lossy().into_owned());
        if entry.file_type().unwrap().is_dir() {
            names.extend(walk_names(&entry.path()));
        }
    }
    names
}

#[tokio::test]
async fn size_limits_answer_413_and_change_nothing() {
    let f = Fixture::new(Limits {
        read: 64,
        write: 64,
        upload: 64,
    });
    let big = "x".repeat(100);
    let (status, body) = f
        .post("/v1/file/write", json!({"file": "big.txt", "content": big}))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOXD_MAX_WRITE_BYTES")
    );
    assert!(!f.root.path().join("workspace/big.txt").exists());
    let (status, _) = f
        .post(
            "/v1/file/write",
            json!({"file": "big.txt", "content": b64(&[0u8; 65]), "encoding": "base64"}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    // Reads: whole file over the limit is refused; a line range within it is fine.
    let lines: String = (0..20).map(|i| format!("line {i:02}\n")).collect();
    std::fs::write(f.root.path().join("workspace/long.txt"), &lines).unwrap();
    let (status, body) = f.post("/v1/file/read", json!({"file": "long.txt"})).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOXD_MAX_READ_BYTES")
    );
    let (status, body) = f
        .post(
            "/v1/file/read",
            json!({"file": "long.txt", "start_line": 18, "end_line": 20}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["content"], "line 18\nline 19\n");
    let (status, _) = f
        .post(
            "/v1/file/read",
            json!({"file": "long.txt", "start_line": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // A replace whose result would pass the write limit leaves the file alone.
    std::fs::write(f.root.path().join("workspace/small.txt"), "ab").unwrap();
    let (status, _) = f
        .post(
            "/v1/file/replace",
            json!({"file": "small.txt", "old_str": "a", "new_str": big}),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        std::fs::read_to_string(f.root.path().join("workspace/small.txt")).unwrap(),
        "ab"
    );

    // Uploads past the limit keep nothing, not even a temporary file.
    let (status, body) = f
        .upload(&[
            Part {
                name: "path",
                filename: None,
                data: b"up/too-big.bin",
            },
            Part {
                name: "file",
                filename: Some("too-big.bin"),
                data: &[7u8; 65],
            },
        ])
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOXD_MAX_UPLOAD_BYTES")
    );
    assert!(!f.root.path().join("workspace/up/too-big.bin").exists());
    let leftovers: Vec<_> = walk_names(f.root.path())
        .into_iter()
        .filter(|n| n.contains(".upload-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let (status, _) = f
        .upload(&[Part {
            name: "file",
            filename: Some("fits.bin"),
            data: &[7u8; 64],
        }])
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn oversize_and_malformed_bodies_are_4xx_with_a_message() {
    let f = Fixture::new(ROOMY);
    // Past the JSON body limit (16 MiB) on a plain JSON route, and past the write route's.
    let huge = format!(
        "{{\"file\":\"a.txt\",\"content\":\"{}\"}}",
        "y".repeat(17 << 20)
    );
    for route in ["/v1/file/read", "/v1/file/write"] {
        let (status, body) = f
            .post_bytes(route, "application/json", huge.clone().into_bytes())
            .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{route}");
        assert!(
            body["message"].as_str().unwrap().contains("larger"),
            "{body}"
        );
    }
    assert!(!f.root.path().join("workspace/a.txt").exists());

    for route in [
        "/v1/file/read",
        "/v1/file/write",
        "/v1/file/list",
        "/v1/file/grep",
        "/v1/file/str_replace_editor",
    ] {
        let (status, body) = f
            .post_bytes(route, "application/json", b"{\"file\": ".to_vec())
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{route}");
        assert!(body["message"].as_str().unwrap().contains("malformed JSON"));
        // An empty body is `{}`: the required field is then named.
        let (status, body) = f.post_bytes(route, "application/json", Vec::new()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{route}");
        assert!(
            body["detail"][0]["msg"]
                .as_str()
                .unwrap()
                .contains("missing field")
        );
    }
    for (route, request, field) in [
        ("/v1/file/read", json!({"file": 5}), "file"),
        (
            "/v1/file/read",
            json!({"file": "a", "start_line": "ten"}),
            "start_line",
        ),
        (
            "/v1/file/read",
            json!({"file": "a", "end_line": 1.5}),
            "end_line",
        ),
        (
            "/v1/file/read",
            json!({"file": "a", "encoding": "latin-1"}),
            "encoding",
        ),
        (
            "/v1/file/write",
            json!({"file": "a", "content": ["x"]}),
            "content",
        ),
        (
            "/v1/file/write",
            json!({"file": "a", "content": "x", "append": "yes"}),
            "append",
        ),
        (
            "/v1/file/write",
            json!({"file": "a", "content": "x", "encoding": "utf-16"}),
            "encoding",
        ),
        (
            "/v1/file/list",
            json!({"path": "a", "recursive": 1}),
            "recursive",
        ),
        (
            "/v1/file/glob",
            json!({"path": "a", "pattern": "*", "sort_by": "colour"}),
            "sort_by",
        ),
        (
            "/v1/file/str_replace_editor",
            json!({"command": "view", "path": 1}),
            "path",
        ),
        (
            "/v1/file/str_replace_editor",
            json!({"command": "str_replace", "path": "a", "old_str": "x", "replace_mode": "SOME"}),
            "replace_mode",
        ),
    ] {
        let (status, body) = f.post(route, request.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{route} {request}: {body}"
        );
        assert_eq!(
            body["detail"][0]["loc"],
            json!(["body", field]),
            "{route} {request}"
        );
        assert!(body["message"].as_str().unwrap().contains(field));
    }
    // Reads and writes with end before start.
    std::fs::write(f.root.path().join("workspace/a"), "x").unwrap();
    let (status, body) = f
        .post(
            "/v1/file/read",
            json!({"file": "a", "start_line": 3, "end_line": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["detail"][0]["loc"], json!(["body", "end_line"]));
}

#[tokio::test]
async fn the_openapi_document_describes_the_file_routes() {
    let f = Fixture::new(ROOMY);
    let (status, _, body) = f.send(Call::get("/v1/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    for (path, method) in [
        ("/v1/file/read", "post"),
        ("/v1/file/write", "post"),
        ("/v1/file/replace", "post"),
        ("/v1/file/search", "post"),
        ("/v1/file/find", "post"),
        ("/v1/file/grep", "post"),
        ("/v1/file/glob", "post"),
        ("/v1/file/list", "post"),
        ("/v1/file/str_replace_editor", "post"),
        ("/v1/file/upload", "post"),
        ("/v1/file/download", "get"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
        assert!(doc["paths"][path][method]["security"].is_array(), "{path}");
    }
    assert!(
        doc["paths"]["/v1/file/upload"]["post"]["requestBody"]["content"]["multipart/form-data"]
            .is_object()
    );
    for schema in [
        "FileReadRequest",
        "FileGrepResult",
        "StrReplaceEditorResult",
        "FileInfo",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
}
