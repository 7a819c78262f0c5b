//! Structural checks of an OpenAPI document that a generator can get wrong and a live contract
//! test (schemathesis) cannot see: a `$ref` that points nowhere, a parameter declared in the path
//! that the path template does not hold (a query parameter mislabelled: clients then put it in
//! the URL's path, or insist it is required), a template variable without its parameter, and a
//! path parameter that is not required. Both servers' committed-document tests run it.
//! [`required_bodies_without_required_fields`] is for a server that takes an empty body as `{}`
//! (sandboxd, as AIO's SDKs send none when every field is left out).

use serde_json::Value;

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every problem found, one line each, naming where it is. Empty: the document passes.
pub fn problems(document: &Value) -> Vec<String> {
    let mut found = Vec::new();
    dangling_refs(document, document, "#", &mut found);
    if let Some(paths) = document["paths"].as_object() {
        for (path, item) in paths {
            path_parameters(document, path, item, &mut found);
        }
    }
    found
}

/// Follows a local reference (`#/components/schemas/X`), `None` when it leads nowhere.
fn resolve<'a>(document: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    document.pointer(pointer)
}

fn dangling_refs(document: &Value, node: &Value, at: &str, found: &mut Vec<String>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref")
                && resolve(document, reference).is_none()
            {
                found.push(format!("{at}: $ref {reference} points nowhere"));
            }
            for (key, value) in map {
                dangling_refs(document, value, &format!("{at}/{key}"), found);
            }
        }
        Value::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                dangling_refs(document, value, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// The variables of a path template: `/v1/tabs/{index}/close` → `["index"]`.
fn template_variables(path: &str) -> Vec<&str> {
    path.split('{')
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
        .collect()
}

fn path_parameters(document: &Value, path: &str, item: &Value, found: &mut Vec<String>) {
    let variables = template_variables(path);
    let shared = item["parameters"].as_array().cloned().unwrap_or_default();
    for method in METHODS {
        let Some(operation) = item.get(method) else {
            continue;
        };
        let at = format!("{} {path}", method.to_uppercase());
        let own = operation["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let parameters: Vec<Value> = shared
            .iter()
            .chain(own.iter())
            .map(|p| match p["$ref"].as_str() {
                Some(reference) => resolve(document, reference).cloned().unwrap_or(Value::Null),
                None => p.clone(),
            })
            .collect();
        let in_path: Vec<&Value> = parameters.iter().filter(|p| p["in"] == "path").collect();
        for parameter in &in_path {
            let name = parameter["name"].as_str().unwrap_or_default();
            if !variables.contains(&name) {
                found.push(format!(
                    "{at}: parameter {name:?} is declared in the path, which has no {{{name}}} \
                     (a query parameter?)"
                ));
            } else if parameter["required"] != Value::Bool(true) {
                found.push(format!("{at}: path parameter {name:?} is not required"));
            }
        }
        for variable in &variables {
            if !in_path.iter().any(|p| p["name"] == *variable) {
                found.push(format!("{at}: {{{variable}}} has no path parameter"));
            }
        }
    }
}

/// Operations whose JSON body is declared required although its schema requires no field: on
/// a server that reads an empty body as `{}`, such a body may be left out, and a client that
/// believes the document sends one it need not (or refuses to call without it).
pub fn required_bodies_without_required_fields(document: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let Some(paths) = document["paths"].as_object() else {
        return found;
    };
    for (path, item) in paths {
        for method in METHODS {
            let Some(body) = item.get(method).map(|operation| &operation["requestBody"]) else {
                continue;
            };
            if body["required"] != Value::Bool(true) {
                continue;
            }
            let mut schema = &body["content"]["application/json"]["schema"];
            if let Some(reference) = schema["$ref"].as_str() {
                schema = resolve(document, reference).unwrap_or(&Value::Null);
            }
            let requires_a_field = schema["required"]
                .as_array()
                .is_some_and(|fields| !fields.is_empty());
            if schema.is_object() && schema["type"] == "object" && !requires_a_field {
                found.push(format!(
                    "{} {path}: the body is required but requires no field",
                    method.to_uppercase()
                ));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn document(paths: Value) -> Value {
        json!({
            "openapi": "3.1.0",
            "paths": paths,
            "components": {"schemas": {"Thing": {"type": "object"}}}
        })
    }

    #[test]
    fn a_sound_document_passes() {
        let sound = document(json!({
            "/v1/things/{id}": {"get": {
                "parameters": [
                    {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "full", "in": "query", "required": false, "schema": {"type": "boolean"}}
                ],
                "responses": {"200": {"description": "", "content": {"application/json":
                    {"schema": {"$ref": "#/components/schemas/Thing"}}}}}
            }}
        }));
        assert_eq!(problems(&sound), Vec::<String>::new());
    }

    #[test]
    fn a_required_body_must_require_a_field() {
        let doc = json!({"paths": {
            "/v1/tabs": {"post": {"requestBody": {"required": true, "content": {"application/json":
                {"schema": {"$ref": "#/components/schemas/NewTab"}}}}}},
            "/v1/type": {"post": {"requestBody": {"required": true, "content": {"application/json":
                {"schema": {"$ref": "#/components/schemas/Type"}}}}}},
            "/v1/restart": {"post": {"requestBody": {"required": false, "content": {"application/json":
                {"schema": {"$ref": "#/components/schemas/NewTab"}}}}}}
        }, "components": {"schemas": {
            "NewTab": {"type": "object", "properties": {"url": {"type": "string"}}},
            "Type": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}
        }}});
        assert_eq!(
            required_bodies_without_required_fields(&doc),
            vec!["POST /v1/tabs: the body is required but requires no field".to_string()]
        );
    }

    #[test]
    fn each_defect_is_named() {
        let dangling = document(json!({"/v1/things": {"get": {"responses": {"200": {
            "description": "", "content": {"application/json":
                {"schema": {"$ref": "#/components/schemas/EventsFormat"}}}}}}}}));
        assert!(problems(&dangling)[0].contains("EventsFormat points nowhere"));

        let query_in_path = document(json!({"/v1/page/screenshot": {"get": {
            "parameters": [{"name": "full_page", "in": "path", "required": true}],
            "responses": {}}}}));
        assert!(problems(&query_in_path)[0].contains("\"full_page\" is declared in the path"));

        let missing = document(json!({"/v1/things/{id}": {"get": {"responses": {}}}}));
        assert!(problems(&missing)[0].contains("{id} has no path parameter"));

        let optional = document(json!({"/v1/things/{id}": {"get": {
            "parameters": [{"name": "id", "in": "path", "required": false}],
            "responses": {}}}}));
        assert!(problems(&optional)[0].contains("\"id\" is not required"));
    }
}
