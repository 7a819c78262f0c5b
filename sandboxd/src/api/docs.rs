//! `GET /v1/docs`: the API's reference as one HTML page, rendered on the server from the same
//! generated OpenAPI document as `/v1/openapi.json` (AIO serves Swagger UI there; this page
//! needs no script and no files from outside the sandbox). Its Content-Security-Policy allows no
//! script at all.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::Value;

use super::AppState;

/// The methods of an OpenAPI path item, in display order.
const METHODS: &[&str] = &["get", "post", "put", "patch", "delete", "head", "options"];

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/v1/docs", axum::routing::get(page))
}

async fn page(State(_): State<AppState>) -> Result<impl IntoResponse, super::error::ApiError> {
    let document = super::openapi_json().await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        render(&document),
    ))
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The last segment of a `$ref` (`#/components/schemas/Name` -> `Name`).
fn schema_name(schema: &Value) -> Option<String> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return r.rsplit('/').next().map(str::to_string);
    }
    if let Some(items) = schema.get("items") {
        return schema_name(items).map(|n| format!("[{n}]"));
    }
    schema
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Renders the document: a table of contents by tag, then every operation with its
/// parameters, body and answers, then every schema with its fields.
pub fn render(document: &Value) -> String {
    let title = document["info"]["title"].as_str().unwrap_or("API");
    let version = document["info"]["version"].as_str().unwrap_or("");
    let mut html = String::new();
    let _ = write!(
        html,
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{t} {v}</title><style>\
         body{{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em}}\
         code,pre{{font:13px ui-monospace,monospace}} .op{{border-top:1px solid #ddd;padding:.6em 0}}\
         .m{{display:inline-block;min-width:4.5em;font-weight:bold;text-transform:uppercase}}\
         .get{{color:#1a6}} .post{{color:#16a}} .delete{{color:#b22}} .put,.patch{{color:#a61}}\
         table{{border-collapse:collapse}} td,th{{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}}\
         </style></head><body><h1>{t} <small>{v}</small></h1>\
         <p>Generated from <a href=\"/v1/openapi.json\">/v1/openapi.json</a>. Every route but \
         <code>/healthz</code> needs the API key (<code>Authorization: Bearer &lt;key&gt;</code>).</p>",
        t = escape(title),
        v = escape(version)
    );
    let empty = serde_json::Map::new();
    let paths = document["paths"].as_object().unwrap_or(&empty);
    // Operations grouped by their first tag, in path order.
    let mut by_tag: std::collections::BTreeMap<String, Vec<(String, &str, &Value)>> =
        Default::default();
    for (path, item) in paths {
        for method in METHODS {
            if let Some(op) = item.get(*method) {
                let tag = op["tags"][0].as_str().unwrap_or("other").to_string();
                by_tag
                    .entry(tag)
                    .or_default()
                    .push((path.clone(), method, op));
            }
        }
    }
    html.push_str("<h2>Contents</h2><ul>");
    for (tag, ops) in &by_tag {
        let _ = write!(
            html,
            "<li><a href=\"#tag-{id}\">{t}</a> ({n})</li>",
            id = escape(tag),
            t = escape(tag),
            n = ops.len()
        );
    }
    html.push_str("<li><a href=\"#schemas\">schemas</a></li></ul>");
    for (tag, ops) in &by_tag {
        let _ = write!(
            html,
            "<h2 id=\"tag-{id}\">{t}</h2>",
            id = escape(tag),
            t = escape(tag)
        );
        for (path, method, op) in ops {
            render_operation(&mut html, path, method, op);
        }
    }
    html.push_str("<h2 id=schemas>Schemas</h2>");
    if let Some(schemas) = document["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            render_schema(&mut html, name, schema);
        }
    }
    html.push_str("</body></html>");
    html
}

fn render_operation(html: &mut String, path: &str, method: &str, op: &Value) {
    let _ = write!(
        html,
        "<div class=op><span class=\"m {m}\">{m}</span> <code>{p}</code>",
        m = method,
        p = escape(path)
    );
    if let Some(summary) = op["summary"].as_str() {
        let _ = write!(html, " — {}", escape(summary));
    }
    if let Some(description) = op["description"].as_str() {
        let _ = write!(html, "<p>{}</p>", escape(description));
    }
    if let Some(params) = op["parameters"].as_array().filter(|p| !p.is_empty()) {
        html.push_str(
            "<table><tr><th>parameter</th><th>in</th><th>type</th><th>description</th></tr>",
        );
        for p in params {
            let _ = write!(
                html,
                "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(p["name"].as_str().unwrap_or("")),
                if p["required"].as_bool() == Some(true) {
                    " *"
                } else {
                    ""
                },
                escape(p["in"].as_str().unwrap_or("")),
                escape(&schema_name(&p["schema"]).unwrap_or_default()),
                escape(p["description"].as_str().unwrap_or("")),
            );
        }
        html.push_str("</table>");
    }
    if let Some(content) = op["requestBody"]["content"].as_object() {
        for (mime, media) in content {
            let name = schema_name(&media["schema"]).unwrap_or_default();
            let _ = write!(
                html,
                "<p>body: <code>{}</code> <a href=\"#schema-{n}\">{n}</a></p>",
                escape(mime),
                n = escape(&name)
            );
        }
    }
    if let Some(responses) = op["responses"].as_object() {
        html.push_str("<ul>");
        for (code, response) in responses {
            let body = response["content"]
                .as_object()
                .and_then(|c| c.values().next())
                .and_then(|m| schema_name(&m["schema"]))
                .map(|n| format!(" → <code>{}</code>", escape(&n)))
                .unwrap_or_default();
            let _ = write!(
                html,
                "<li><b>{}</b> {}{}</li>",
                escape(code),
                escape(response["description"].as_str().unwrap_or("")),
                body
            );
        }
        html.push_str("</ul>");
    }
    html.push_str("</div>");
}

fn render_schema(html: &mut String, name: &str, schema: &Value) {
    let _ = write!(html, "<h3 id=\"schema-{n}\">{n}</h3>", n = escape(name));
    if let Some(description) = schema["description"].as_str() {
        let _ = write!(html, "<p>{}</p>", escape(description));
    }
    if let Some(values) = schema["enum"].as_array() {
        let list: Vec<String> = values.iter().map(|v| escape(&v.to_string())).collect();
        let _ = write!(html, "<p>one of {}</p>", list.join(", "));
    }
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    html.push_str("<table><tr><th>field</th><th>type</th><th>description</th></tr>");
    for (field, property) in properties {
        let ty = schema_name(property)
            .or_else(|| {
                property["oneOf"]
                    .as_array()
                    .or(property["anyOf"].as_array())
                    .and_then(|alts| alts.iter().find_map(schema_name))
            })
            .unwrap_or_default();
        let _ = write!(
            html,
            "<tr><td><code>{}</code>{}</td><td>{}</td><td>{}</td></tr>",
            escape(field),
            if required.contains(&field.as_str()) {
                " *"
            } else {
                ""
            },
            escape(&ty),
            escape(property["description"].as_str().unwrap_or("")),
        );
    }
    html.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_the_document_is_escaped() {
        let document = serde_json::json!({
            "info": {"title": "<script>alert(1)</script>", "version": "1"},
            "paths": {"/v1/x": {"get": {"tags": ["t"], "summary": "a <b> & \"c\"",
                "responses": {"200": {"description": "<img src=x onerror=alert(1)>"}}}}},
        });
        let html = render(&document);
        assert!(!html.contains("<script>alert"));
        assert!(!html.contains("<img src=x"));
        assert!(html.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
        assert!(html.contains("/v1/x"));
    }

    #[test]
    fn the_real_document_renders_every_operation() {
        let document = serde_json::to_value(crate::api::openapi_document()).unwrap();
        let html = render(&document);
        let operations: usize = document["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|item| METHODS.iter().filter(|m| item.get(**m).is_some()).count())
            .sum();
        assert_eq!(html.matches("<div class=op>").count(), operations);
        assert!(html.contains("/v1/shell/exec"));
    }
}
