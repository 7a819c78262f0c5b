//! sandboxd's OpenAPI document, generated from these types: every `$ref` points at a schema
//! the document holds, and the wire enums list their canonical names.

use std::collections::BTreeSet;

use serde_json::Value;

fn document() -> Value {
    serde_json::to_value(sandboxd::api::openapi_document()).expect("the document is JSON")
}

fn refs(value: &Value, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        found.insert(target.clone());
                    }
                    _ => refs(value, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, found)),
        _ => {}
    }
}

#[test]
fn every_reference_resolves() {
    let document = document();
    let mut found = BTreeSet::new();
    refs(&document, &mut found);
    assert!(!found.is_empty());
    let schemas = &document["components"]["schemas"];
    let dangling: Vec<&String> = found
        .iter()
        .filter(|target| {
            let name = target.trim_start_matches("#/components/schemas/");
            schemas.get(name).is_none()
        })
        .collect();
    assert!(dangling.is_empty(), "dangling references: {dangling:?}");
}

#[test]
fn wire_enums_list_their_names() {
    let document = document();
    let schemas = &document["components"]["schemas"];
    for (name, values) in [
        (
            "WaitUntil",
            &["load", "domcontentloaded", "networkidle", "commit"][..],
        ),
        ("MouseButton", &["left", "right", "middle"]),
        ("ScrollDirection", &["down", "up", "left", "right"]),
        (
            "WaitKind",
            &[
                "selector",
                "load",
                "url",
                "network_idle",
                "function",
                "request",
                "response",
                "download",
                "timeout",
            ],
        ),
        ("RestartMode", &["soft", "hard"]),
        (
            "ElementState",
            &["attached", "detached", "visible", "hidden"],
        ),
        (
            "DesktopButton",
            &["left", "middle", "right", "back", "forward"],
        ),
        ("ScrollUnit", &["notches"]),
    ] {
        assert_eq!(
            schemas[name]["enum"],
            serde_json::json!(values),
            "{name}: {}",
            schemas[name]
        );
    }
    // The screenshot routes' `format` query parameter is inlined.
    for path in ["/v1/browser/screenshot", "/v1/browser/page/screenshot"] {
        let params = document["paths"][path]["get"]["parameters"]
            .as_array()
            .expect("parameters");
        let format = params
            .iter()
            .find(|p| p["name"] == "format")
            .expect("a format parameter");
        assert!(
            format.to_string().contains(r#"["png","jpeg"]"#),
            "{path}: {format}"
        );
    }
}
