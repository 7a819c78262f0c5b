//! The Agent Card (`/.well-known/agent-card.json`): who this agent is, where its JSON-RPC
//! endpoint is and how to authenticate. No secret is in it.
//!
//! One card serves both versions: it carries the 0.3 fields a 0.3 client needs to find the
//! endpoint (`url`, `preferredTransport`, `protocolVersion`, `security`) and 1.0's
//! `supportedInterfaces` and `securityRequirements`. The 1.0 card schema allows no other
//! top-level keys, so a strict 1.0 validator refuses this card; without them a 0.3 client
//! cannot find the endpoint at all (README, "A2A").

use serde_json::{Value, json};

use super::tasks::COMPUTER_SESSION_EXTENSION;

/// The path of the JSON-RPC endpoint.
pub const ENDPOINT: &str = "/a2a";

/// The card, with every URL under `public_url` (no trailing slash).
pub fn agent_card(public_url: &str, conformance: bool) -> Value {
    let endpoint = format!("{public_url}{ENDPOINT}");
    let mut skills = vec![
        json!({
            "id": "desktop-task",
            "name": "Desktop task",
            "description": "Does a task on a Linux desktop (any application: browser, terminal, \
                editor, office) by looking at the screen and using mouse and keyboard, in a \
                sandbox of its own. Asks when it needs a person; files it saves in ~/outputs \
                come back as artifacts.",
            "tags": ["computer-use", "desktop", "gui"],
            "examples": ["Open the spreadsheet in ~/inputs and chart the monthly totals"],
            "inputModes": ["text/plain", "application/json"],
            "outputModes": ["text/plain", "application/octet-stream", "image/png"],
        }),
        json!({
            "id": "browser-task",
            "name": "Browser task",
            "description": "Does a task on the web in a real Chromium (search, read, fill \
                forms, download) and reports what it found.",
            "tags": ["computer-use", "browser", "web"],
            "examples": ["Find the opening hours of the city library"],
            "inputModes": ["text/plain", "application/json"],
            "outputModes": ["text/plain", "application/octet-stream", "image/png"],
        }),
    ];
    if conformance {
        skills.push(json!({
            "id": "conformance",
            "name": "Conformance executor",
            "description": "A testing aid: answers by the prefix of the message id, as the A2A \
                conformance kit expects (model `conformance`).",
            "tags": ["testing"],
        }));
    }
    json!({
        "name": "Agentbox",
        "description": "A computer for AI agents: each task runs on a Linux desktop with a \
            browser, watched live and taken over by a person when needed.",
        "version": env!("CARGO_PKG_VERSION"),
        // 0.3
        "protocolVersion": "0.3.0",
        "url": endpoint,
        "preferredTransport": "JSONRPC",
        "security": [{"bearer": []}],
        // 1.0
        "supportedInterfaces": [{
            "url": endpoint,
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }],
        "securityRequirements": [{"schemes": {"bearer": {}}}],
        // Both
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extendedAgentCard": false,
            "extensions": [{
                "uri": COMPUTER_SESSION_EXTENSION,
                "description": "Not a standard A2A field: a task's metadata under this key \
                    names the computer session (the sandbox) that runs it (computerSessionId), \
                    a watch-only link to its desktop and timeline (watchUrl, a revocable share \
                    link of the run) and the links to its record and artifacts.",
                "required": false,
            }],
        },
        "securitySchemes": {"bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "An Agentbox API key",
            "httpAuthSecurityScheme": {"scheme": "bearer", "description": "An Agentbox API key"},
        }},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json", "application/octet-stream"],
        "skills": skills,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_names_the_public_endpoint_in_both_shapes() {
        let card = agent_card("https://agents.example", false);
        assert_eq!(card["url"], "https://agents.example/a2a");
        assert_eq!(
            card["supportedInterfaces"][0]["url"],
            "https://agents.example/a2a"
        );
        assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
        assert_eq!(card["skills"].as_array().map(Vec::len), Some(2));
        let with = agent_card("http://h", true);
        assert_eq!(with["skills"][2]["id"], "conformance");
    }
}
