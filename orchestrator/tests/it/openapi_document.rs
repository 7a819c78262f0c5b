//! The orchestrator's OpenAPI document is committed (`docs/openapi/orchestrator.json`) and must
//! match the one generated from the code: a change to the wire contract is a deliberate,
//! reviewed diff. `AGENTBOX_BLESS=1 cargo test -p orchestrator --test openapi_document` accepts
//! a change.

use std::path::Path;

#[test]
fn the_committed_document_is_the_generated_one() -> anyhow::Result<()> {
    let document = orchestrator::api::openapi_document();
    let json = serde_json::to_string_pretty(&document)? + "\n";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi/orchestrator.json");
    agentbox_tests::snapshot::check(&path, &json)
}

/// The document is sound as well as current: no reference to a schema that is not there, no
/// parameter in the wrong place (`agentbox_tests::openapi_lint`).
#[test]
fn the_document_has_no_dangling_reference_or_misplaced_parameter() -> anyhow::Result<()> {
    let document = serde_json::to_value(orchestrator::api::openapi_document())?;
    let problems = agentbox_tests::openapi_lint::problems(&document);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// The orchestrator reads an empty body as `{}`, so a body whose every field is optional is
/// documented as optional (issue 27: four were marked required).
#[test]
fn bodies_that_may_be_left_out_are_not_required() -> anyhow::Result<()> {
    let document = serde_json::to_value(orchestrator::api::openapi_document())?;
    let problems = agentbox_tests::openapi_lint::required_bodies_without_required_fields(&document);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}

/// A sandbox's statuses are the same words in the code, the document (the field and the list
/// filter) and the README (issue 27: the README listed a `stopped` the filter refused).
#[test]
fn sandbox_statuses_are_the_same_everywhere() -> anyhow::Result<()> {
    let names: Vec<&str> = orchestrator::db::SandboxStatus::ALL
        .iter()
        .map(|status| status.as_str())
        .collect();
    let document = serde_json::to_value(orchestrator::api::openapi_document())?;
    let field = &document["components"]["schemas"]["Sandbox"]["properties"]["status"]["enum"];
    assert_eq!(field, &serde_json::json!(names), "Sandbox.status");
    let filter = document["paths"]["/v1/sandboxes"]["get"]["parameters"]
        .as_array()
        .and_then(|parameters| parameters.iter().find(|p| p["name"] == "status"))
        .ok_or_else(|| anyhow::anyhow!("GET /v1/sandboxes has no status parameter"))?;
    assert_eq!(
        filter["schema"]["enum"],
        serde_json::json!(names),
        "?status="
    );
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))?;
    let (_, after) = readme
        .split_once("Statuses (the same words\n`?status=` takes):")
        .or_else(|| readme.split_once("Statuses (the same words `?status=` takes):"))
        .ok_or_else(|| anyhow::anyhow!("the README's list of statuses is missing"))?;
    let paragraph = after.split("\n\n").next().unwrap_or_default();
    let mut listed: Vec<&str> = paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| word.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    listed.sort_unstable();
    let mut expected = names.clone();
    expected.sort_unstable();
    assert_eq!(listed, expected, "the README's statuses");
    Ok(())
}

/// The documented bounds are the ones the code enforces (issue 27: the document had none).
#[test]
fn documented_bounds_are_the_enforced_ones() -> anyhow::Result<()> {
    let document = serde_json::to_value(orchestrator::api::openapi_document())?;
    let schemas = &document["components"]["schemas"];
    assert_eq!(
        schemas["CreateTokenRequest"]["properties"]["ttl_secs"]["maximum"],
        orchestrator::validate::MAX_TOKEN_TTL_SECS
    );
    for (schema, field) in [
        ("CreateTokenRequest", "ttl_secs"),
        ("CreateSandboxRequest", "idle_timeout_secs"),
        ("CreateSandboxRequest", "max_lifetime_secs"),
        ("SetTimeoutRequest", "idle_timeout_secs"),
        ("SetTimeoutRequest", "max_lifetime_secs"),
    ] {
        assert_eq!(
            schemas[schema]["properties"][field]["minimum"], 1,
            "{schema}.{field}"
        );
    }
    assert!(
        schemas["CreateSandboxRequest"]["properties"]["resolution"]["pattern"].is_string(),
        "the resolution's shape is documented"
    );
    let limit = document["paths"]["/v1/runs/{id}/events"]["get"]["parameters"]
        .as_array()
        .and_then(|parameters| parameters.iter().find(|p| p["name"] == "limit"))
        .ok_or_else(|| anyhow::anyhow!("the events route has no limit parameter"))?;
    assert_eq!(
        (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
        (&serde_json::json!(1), &serde_json::json!(1000)),
        "{limit}"
    );
    Ok(())
}

/// The console's timeline draws every event type the document lists and no other (issue 23: it
/// read events back by matching strings nobody checked).
#[test]
fn the_console_timeline_knows_every_documented_event_type() -> anyhow::Result<()> {
    let document = serde_json::to_value(orchestrator::api::openapi_document())?;
    let variants = document["components"]["schemas"]["RunEventData"]["oneOf"]
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("RunEventData lists no variants"))?;
    let mut documented: Vec<String> = variants
        .iter()
        .filter_map(|variant| {
            variant["properties"]["type"]["enum"][0]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    documented.sort();
    assert_eq!(
        documented.len(),
        variants.len(),
        "every variant names its type"
    );
    let timeline = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../novnc/console/timeline.js"),
    )?;
    let mut drawn: Vec<String> = timeline
        .lines()
        .filter_map(|line| line.trim().strip_prefix("case '"))
        .filter_map(|rest| rest.split_once('\'').map(|(kind, _)| kind.to_string()))
        .collect();
    drawn.sort();
    assert_eq!(
        drawn, documented,
        "timeline.js's `case` labels against RunEventData's types"
    );
    Ok(())
}
