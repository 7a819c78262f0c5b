//! sandboxd's OpenAPI document is committed (`docs/openapi/sandboxd.json`) and must match the one
//! generated from the code: a change to the wire contract is a deliberate, reviewed diff.
//! `AGENTBOX_BLESS=1 cargo test -p sandboxd --test openapi_document` accepts a change.

use std::path::Path;

#[test]
fn the_committed_document_is_the_generated_one() -> anyhow::Result<()> {
    let document = sandboxd::api::openapi_document();
    let json = serde_json::to_string_pretty(&document)? + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/sandboxd.json");
    agentbox_tests::snapshot::check(&path, &json)
}

/// The document is built within the runtime sandboxd runs (workers with small stacks), in any
/// build: a stack overflow there would abort PID 1 and end the sandbox.
#[test]
fn the_document_is_built_on_workers_with_sandboxds_small_stacks() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_stack_size(sandboxd::WORKER_STACK_BYTES)
        .enable_all()
        .build()
        .expect("a runtime");
    let document = runtime
        .block_on(async { tokio::spawn(sandboxd::api::openapi_json()).await })
        .expect("the task finished")
        .expect("the document");
    assert!(document["paths"]["/v1/shell/exec"].is_object());
}

/// The document is sound as well as current: no reference to a schema that is not there, no
/// parameter in the wrong place (`agentbox_tests::openapi_lint`).
#[test]
fn the_document_has_no_dangling_reference_or_misplaced_parameter() -> anyhow::Result<()> {
    let document = serde_json::to_value(sandboxd::api::openapi_document())?;
    let problems = agentbox_tests::openapi_lint::problems(&document);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// sandboxd reads an empty body as `{}` (AIO's SDKs send none when every field is left out), so
/// a body whose every field is optional is documented as optional (issue 27).
#[test]
fn bodies_that_may_be_left_out_are_not_required() -> anyhow::Result<()> {
    let document = serde_json::to_value(sandboxd::api::openapi_document())?;
    let problems = agentbox_tests::openapi_lint::required_bodies_without_required_fields(&document);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}
