//! Path escapes: `..` out of the root, absolute paths elsewhere, symlinks leading out (through
//! every route, downloads and uploads included), NUL bytes and empty paths are each refused
//! with 403, and the refusals leave nothing behind, outside the root or inside it.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{Fixture, Part, ROOMY, walk_names};

#[tokio::test]
async fn escapes_are_refused_and_touch_nothing() {
    let f = Fixture::new(ROOMY);
    let root = f.root.path().display().to_string();
    std::fs::write(f.root.path().join("workspace/inside.txt"), "in").unwrap();
    climbing_out_and_absolute_paths_elsewhere_are_refused(&f, &root).await;
    symlinks_leading_out_are_refused_by_every_route(&f).await;
    nul_bytes_and_empty_paths_are_refused(&f, &root).await;
    downloads_and_uploads_out_of_the_roots_are_refused(&f).await;
    the_refusals_left_nothing_outside_or_inside(&f);
}

async fn climbing_out_and_absolute_paths_elsewhere_are_refused(f: &Fixture, root: &str) {
    // `..` climbing out of the root, from a relative and from an absolute path.
    for file in [
        "../../../../../../etc/passwd".to_string(),
        format!(
            "{root}/../{}",
            f.outside.path().file_name().unwrap().to_string_lossy()
        ) + "/secret",
    ] {
        f.expect_refused(
            "/v1/file/read",
            json!({"file": file}),
            "outside the allowed roots",
        )
        .await;
        f.expect_refused(
            "/v1/file/write",
            json!({"file": file, "content": "pwned"}),
            "outside the allowed roots",
        )
        .await;
    }
    // Absolute paths elsewhere.
    f.expect_refused(
        "/v1/file/read",
        json!({"file": "/etc/passwd"}),
        "/etc/passwd",
    )
    .await;
    let outside_new = f.outside("new.txt").display().to_string();
    f.expect_refused(
        "/v1/file/write",
        json!({"file": outside_new, "content": "x"}),
        "outside the allowed roots",
    )
    .await;
    f.expect_refused("/v1/file/list", json!({"path": "/etc"}), "/etc")
        .await;
}

async fn symlinks_leading_out_are_refused_by_every_route(f: &Fixture) {
    // A symlink inside the root leading out: read, write (new and existing files), list,
    // find, grep, glob, search, replace, editor, download, upload.
    let through_dir = f.at("out/secret");
    let through_file = f.at("secret-link");
    let new_through_dir = f.at("out/created.txt");
    for file in [&through_dir, &through_file] {
        f.expect_refused("/v1/file/read", json!({"file": file}), "leads outside")
            .await;
        f.expect_refused(
            "/v1/file/write",
            json!({"file": file, "content": "overwritten"}),
            "leads outside",
        )
        .await;
        f.expect_refused(
            "/v1/file/write",
            json!({"file": file, "content": "appended", "append": true}),
            "leads outside",
        )
        .await;
        f.expect_refused(
            "/v1/file/replace",
            json!({"file": file, "old_str": "secret", "new_str": "x"}),
            "leads outside",
        )
        .await;
        f.expect_refused(
            "/v1/file/search",
            json!({"file": file, "regex": "."}),
            "leads outside",
        )
        .await;
        f.expect_refused(
            "/v1/file/str_replace_editor",
            json!({"command": "view", "path": file}),
            "leads outside",
        )
        .await;
    }
    f.expect_refused(
        "/v1/file/write",
        json!({"file": new_through_dir, "content": "x"}),
        "leads outside",
    )
    .await;
    f.expect_refused(
        "/v1/file/str_replace_editor",
        json!({"command": "create", "path": new_through_dir, "file_text": "x"}),
        "leads outside",
    )
    .await;
    let out_dir = f.at("out");
    for (route, body) in [
        ("/v1/file/list", json!({"path": out_dir})),
        ("/v1/file/list", json!({"path": out_dir, "recursive": true})),
        ("/v1/file/find", json!({"path": out_dir, "glob": "*"})),
        ("/v1/file/glob", json!({"path": out_dir, "pattern": "**"})),
        (
            "/v1/file/grep",
            json!({"path": out_dir, "pattern": "secret"}),
        ),
        (
            "/v1/file/grep",
            json!({"path": through_file, "pattern": "secret"}),
        ),
    ] {
        f.expect_refused(route, body, "leads outside").await;
    }
    // A symlinked parent directory: nothing may be created below it.
    f.expect_refused(
        "/v1/file/write",
        json!({"file": f.at("out/sub/dir/new.txt"), "content": "x"}),
        "leads outside",
    )
    .await;
}

async fn nul_bytes_and_empty_paths_are_refused(f: &Fixture, root: &str) {
    // NUL bytes.
    f.expect_refused(
        "/v1/file/read",
        json!({"file": format!("{root}/workspace/inside.txt\u{0}.png")}),
        "NUL byte",
    )
    .await;
    f.expect_refused(
        "/v1/file/write",
        json!({"file": "a\u{0}b", "content": "x"}),
        "NUL byte",
    )
    .await;
    // Empty paths.
    f.expect_refused("/v1/file/read", json!({"file": ""}), "empty")
        .await;
}

async fn downloads_and_uploads_out_of_the_roots_are_refused(f: &Fixture) {
    let through_dir = f.at("out/secret");
    let new_through_dir = f.at("out/created.txt");
    let outside_new = f.outside("new.txt").display().to_string();
    // Download and upload.
    for path in [
        through_dir.as_str(),
        "/etc/passwd",
        "../../../../../etc/passwd",
    ] {
        let (status, _, body) = f.download(path).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(
            body["message"].as_str().unwrap().contains("roots"),
            "{body}"
        );
    }
    for target in [
        new_through_dir.as_str(),
        outside_new.as_str(),
        "../../../../../tmp/x",
    ] {
        let (status, body) = f
            .upload(&[
                Part {
                    name: "path",
                    filename: None,
                    data: target.as_bytes(),
                },
                Part {
                    name: "file",
                    filename: Some("x.txt"),
                    data: b"uploaded",
                },
            ])
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{target}: {body}");
    }
}

fn the_refusals_left_nothing_outside_or_inside(f: &Fixture) {
    f.assert_outside_untouched();
    // The refusals left nothing inside either (no stray parents, no temporary files).
    let mut inside = walk_names(f.root.path());
    inside.sort();
    assert_eq!(
        inside,
        vec!["inside.txt", "out", "secret-link", "workspace"]
    );
}
