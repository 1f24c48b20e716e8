//! Resources and prompts on the real binary, in both eras, against the support desk example:
//! listings, a read that is a run (journaled like a call), not-found errors per era, a prompt's
//! messages and its missing argument. Every message is schema-validated by the harness.

mod common;

use common::{repo_root, Era, Wire};
use serde_json::json;

fn desk() -> Wire {
    let dir = common::private_copy(&repo_root().join("examples/support-desk"));
    Wire::start_dir(dir, &[])
}

#[test]
fn resources_are_listed_and_read_as_runs_in_both_eras() {
    let mut wire = desk();
    let discover = wire.request(Era::Modern, json!(1), "server/discover", json!({}));
    assert_eq!(discover["result"]["capabilities"]["resources"], json!({"subscribe": false, "listChanged": false}));
    assert_eq!(discover["result"]["capabilities"]["prompts"], json!({"listChanged": false}));
    let templates = wire.request(Era::Modern, json!(2), "resources/templates/list", json!({}));
    assert_eq!(templates["result"]["resourceTemplates"][0]["uriTemplate"], json!("ticket://{ticket_id}"));
    assert_eq!(templates["result"]["cacheScope"], json!("public"));
    let listed = wire.request(Era::Modern, json!(3), "resources/list", json!({}));
    assert_eq!(listed["result"]["resources"], json!([]));

    let read = wire.request(Era::Modern, json!(4), "resources/read", json!({"uri": "ticket://3"}));
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["uri"], json!("ticket://3"));
    assert_eq!(contents["mimeType"], json!("application/json"));
    let ticket: serde_json::Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
    assert_eq!(ticket["title"], json!("Invoice shows the wrong address"));
    assert_eq!((read["result"]["cacheScope"].clone(), read["result"]["ttlMs"].clone()), (json!("private"), json!(0)));

    // Not found: -32602 in 2026-07-28, -32002 in 2025-11-25; a program's failure is named.
    wire.send_request(Era::Modern, json!(5), "resources/read", json!({"uri": "nothing://3"}));
    let missing = wire.expect_error(-32602, Some(json!(5)));
    assert_eq!(missing["error"]["data"]["uri"], json!("nothing://3"));
    wire.send_request(Era::Modern, json!(6), "resources/read", json!({"uri": "ticket://99"}));
    let failed = wire.expect_error(-32602, Some(json!(6)));
    assert!(failed["error"]["message"].as_str().unwrap().contains("ticket 99 does not exist"), "{failed}");
    wire.initialize();
    wire.send_request(Era::Legacy, json!(7), "resources/read", json!({"uri": "nothing://3"}));
    wire.expect_error(-32002, Some(json!(7)));
    let read = wire.request(Era::Legacy, json!(8), "resources/read", json!({"uri": "ticket://1"}));
    assert!(read["result"]["contents"][0]["text"].as_str().unwrap().contains("Refund not received"), "{read}");
    let templates = wire.request(Era::Legacy, json!(9), "resources/templates/list", json!({}));
    assert_eq!(templates["result"]["resourceTemplates"][0]["name"], json!("ticket"));

    // A read is a run: journaled under the resource's name, like a tool call's, and the
    // resource is neither listed nor callable as a tool.
    let ledger = std::fs::read_to_string(wire.dir.path().join("journals/server.ledger")).unwrap();
    assert_eq!(ledger.matches("\"tool\":\"ticket\"").count(), 3, "three reads reserved: {ledger}");
    assert!(wire.dir.path().join("journals/ticket").is_dir());
    let status = wire.request(Era::Modern, json!(10), "tools/list", json!({}));
    let names: Vec<&str> =
        status["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"ticket"), "a resource is not a tool: {names:?}");
    wire.send_request(Era::Modern, json!(11), "tools/call", json!({"name": "ticket", "arguments": {"ticket_id": 1}}));
    wire.expect_error(-32602, Some(json!(11)));
}

#[test]
fn prompts_are_listed_and_got_in_both_eras() {
    let mut wire = desk();
    let listed = wire.request(Era::Modern, json!(1), "prompts/list", json!({}));
    let prompt = &listed["result"]["prompts"][0];
    assert_eq!(prompt["name"], json!("triage"));
    assert_eq!(
        prompt["arguments"][0],
        json!({"name": "ticket_id", "description": "The ticket to triage, e.g. \"3\".", "required": true})
    );
    let got =
        wire.request(Era::Modern, json!(2), "prompts/get", json!({"name": "triage", "arguments": {"ticket_id": "3"}}));
    let message = &got["result"]["messages"][0];
    assert_eq!(message["role"], json!("user"));
    assert!(message["content"]["text"].as_str().unwrap().contains("ticket://3"), "{got}");
    wire.send_request(Era::Modern, json!(3), "prompts/get", json!({"name": "triage", "arguments": {}}));
    let missing = wire.expect_error(-32602, Some(json!(3)));
    assert!(missing["error"]["message"].as_str().unwrap().contains("$.ticket_id: is required"), "{missing}");
    wire.send_request(Era::Modern, json!(4), "prompts/get", json!({"name": "nope"}));
    wire.expect_error(-32602, Some(json!(4)));
    wire.send_request(Era::Modern, json!(5), "prompts/get", json!({"name": "triage", "arguments": {"ticket_id": 3}}));
    wire.expect_error(-32602, Some(json!(5)));
    wire.initialize();
    let got =
        wire.request(Era::Legacy, json!(6), "prompts/get", json!({"name": "triage", "arguments": {"ticket_id": "4"}}));
    assert!(got["result"]["messages"][0]["content"]["text"].as_str().unwrap().contains("ticket://4"));
}

#[test]
fn completions_offer_the_declared_values_that_match_in_both_eras() {
    let mut wire = desk();
    let discover = wire.request(Era::Modern, json!(1), "server/discover", json!({}));
    assert_eq!(discover["result"]["capabilities"]["completions"], json!({}));
    let prompt = wire.request(
        Era::Modern,
        json!(2),
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "triage"}, "argument": {"name": "ticket_id", "value": "3"}}),
    );
    assert_eq!(prompt["result"]["completion"], json!({"values": ["3"], "total": 1, "hasMore": false}));
    wire.initialize();
    let resource = wire.request(
        Era::Legacy,
        json!(3),
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "ticket://{ticket_id}"}, "argument": {"name": "ticket_id", "value": ""}}),
    );
    assert_eq!(resource["result"]["completion"]["values"], json!(["1", "2", "3", "4", "5", "6"]));
    wire.send_request(
        Era::Legacy,
        json!(4),
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "x", "value": ""}}),
    );
    wire.expect_error(-32602, Some(json!(4)));
}
