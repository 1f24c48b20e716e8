//! Resources and prompts, era-neutral (seed 004, "Resources and prompts"): their listings,
//! matching a URI to a resource's template, turning a read's run into contents, and getting
//! a prompt's messages. The eras wrap these results; a resource read is a run of the tool
//! the resource's reads run as (`call::call_tool`), so it has the same grants, journal and
//! quotas as a tool call.

use serde_json::{json, Map, Value};

use crate::catalog::{prompt_arguments, prompt_description, Catalog, Prompt, ResourceSpec, Tool};
use crate::env::Env;
use crate::program::job::{Executed, Job};
use crate::program::types::ArgType;
use crate::program::Outcome;

/// The longest URI a read may name.
pub const URI_CHARS_MAX: usize = 8192;
/// The most messages a prompt may return, and the longest message text.
pub const PROMPT_MESSAGES_MAX: usize = 100;
pub const PROMPT_TEXT_BYTES_MAX: usize = 256 * 1024;

fn described(tool: &Tool, mut item: Map<String, Value>) -> Value {
    item.insert("name".into(), json!(tool.config.name));
    if let Some(title) = &tool.config.title {
        item.insert("title".into(), json!(title));
    }
    item.insert("description".into(), json!(tool.description()));
    Value::Object(item)
}

/// `resources/list`: the resources whose URI has no variable.
pub fn resources(catalog: &Catalog) -> Vec<Value> {
    addressed(catalog, false, "uri")
}

/// `resources/templates/list`: the resources addressed by a template with variables.
pub fn templates(catalog: &Catalog) -> Vec<Value> {
    addressed(catalog, true, "uriTemplate")
}

fn addressed(catalog: &Catalog, templated: bool, key: &str) -> Vec<Value> {
    catalog
        .resources()
        .filter(|(_, spec)| spec.variables.is_empty() != templated)
        .map(|(tool, spec)| {
            let mut item = Map::new();
            item.insert(key.into(), json!(spec.uri_template));
            item.insert("mimeType".into(), json!(spec.mime_type));
            described(tool, item)
        })
        .collect()
}

/// `prompts/list`.
pub fn prompts(catalog: &Catalog) -> Vec<Value> {
    catalog
        .prompts
        .iter()
        .map(|prompt| {
            let mut item = json!({"name": prompt.config.name, "description": prompt_description(prompt),
                "arguments": prompt_arguments(prompt)});
            if let Some(title) = &prompt.config.title {
                item["title"] = json!(title);
            }
            item
        })
        .collect()
}

/// The resource `uri` names, and its read's arguments: each template variable's text
/// (percent-decoded; a whole number for an `int` parameter). None: no resource has it.
pub fn find<'a>(catalog: &'a Catalog, uri: &str) -> Option<(&'a Tool, Map<String, Value>)> {
    if uri.chars().count() > URI_CHARS_MAX {
        return None;
    }
    catalog.resources().find_map(|(tool, spec)| {
        let texts = match_template(&spec.uri_template, uri)?;
        let mut arguments = Map::new();
        for (name, text) in spec.variables.iter().zip(texts) {
            let int = tool.program.inputs.iter().any(|input| &input.name == name && input.ty == ArgType::Int);
            let value = match text.parse::<i64>() {
                Ok(number) if int => json!(number),
                _ => json!(text),
            };
            arguments.insert(name.clone(), value);
        }
        Some((tool, arguments))
    })
}

/// Each variable's text where `uri` matches `template`: a variable takes a non-empty run of
/// characters up to the next literal part, never a `/`.
fn match_template(template: &str, uri: &str) -> Option<Vec<String>> {
    let mut texts = Vec::new();
    let mut rest_template = template;
    let mut rest_uri = uri;
    loop {
        let Some(open) = rest_template.find('{') else {
            return (rest_template == rest_uri).then_some(texts);
        };
        let literal = &rest_template[..open];
        rest_uri = rest_uri.strip_prefix(literal)?;
        let close = open + rest_template[open..].find('}')?;
        rest_template = &rest_template[close + 1..];
        let next_literal_end = rest_template.find('{').unwrap_or(rest_template.len());
        let next_literal = &rest_template[..next_literal_end];
        let taken = if next_literal.is_empty() { rest_uri.len() } else { rest_uri.find(next_literal)? };
        let text = &rest_uri[..taken];
        // Decoded, a variable still takes no `/` (nor `%2F`): one segment, as the template says.
        let decoded = percent_decode(text)?;
        if decoded.is_empty() || decoded.contains('/') {
            return None;
        }
        texts.push(decoded);
        rest_uri = &rest_uri[taken..];
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The most completion values one answer carries (MCP: 100).
pub const COMPLETION_VALUES_MAX: usize = 100;

/// Whether any prompt or resource offers completions.
pub fn completes(catalog: &Catalog) -> bool {
    catalog.prompts.iter().any(|p| !p.config.complete.is_empty())
        || catalog.resources().any(|(_, spec)| !spec.complete.is_empty())
}

/// `completion/complete`: the declared values of a prompt's argument or a resource template's
/// variable that start with what the user typed.
pub fn complete(catalog: &Catalog, params: &Value) -> Result<Value, String> {
    let reference = &params["ref"];
    let lists = match reference["type"].as_str() {
        Some("ref/prompt") => {
            let name = reference["name"].as_str().unwrap_or_default();
            &catalog.prompt(name).ok_or_else(|| format!("Unknown prompt: {name}"))?.config.complete
        }
        Some("ref/resource") => {
            let uri = reference["uri"].as_str().unwrap_or_default();
            let found = catalog.resources().find(|(_, spec)| spec.uri_template == uri);
            &found.ok_or_else(|| format!("no resource template `{uri}`"))?.1.complete
        }
        _ => {
            return Err(
                "`ref` must be {\"type\": \"ref/prompt\", \"name\"} or {\"type\": \"ref/resource\", \"uri\"}".into()
            )
        }
    };
    let (Some(argument), Some(typed)) = (params["argument"]["name"].as_str(), params["argument"]["value"].as_str())
    else {
        return Err("`argument` must be {\"name\": string, \"value\": string}".into());
    };
    let matching: Vec<&String> = lists.get(argument).into_iter().flatten().filter(|v| v.starts_with(typed)).collect();
    let values: Vec<&String> = matching.iter().copied().take(COMPLETION_VALUES_MAX).collect();
    Ok(json!({"completion": {"values": values, "total": matching.len(), "hasMore": matching.len() > values.len()}}))
}

/// A read's contents from its run's answer, or why it failed (the answer's text).
pub fn contents(spec: &ResourceSpec, uri: &str, answer: &Value) -> Result<Value, String> {
    let text_of = |answer: &Value| answer["content"][0]["text"].as_str().unwrap_or("").to_string();
    if answer["isError"] == json!(true) {
        return Err(text_of(answer));
    }
    let result = &answer["structuredContent"]["result"];
    if is_binary_type(&spec.mime_type) {
        // Bytes travel as base64: the program returns them so, and the read sends a `blob`.
        return match result.as_str() {
            Some(data) if crate::program::content::is_base64(data) => {
                Ok(json!({"contents": [{"uri": uri, "mimeType": spec.mime_type, "blob": data}]}))
            }
            _ => Err(format!("a resource of type {} returns its bytes as a base64 string", spec.mime_type)),
        };
    }
    let json_type = spec.mime_type.contains("json");
    let text = match result {
        Value::String(text) if !json_type => text.clone(),
        _ => text_of(answer),
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": spec.mime_type, "text": text}]}))
}

/// A MIME type whose contents are bytes, not text: images, audio, video, fonts and the
/// common binary application types.
pub fn is_binary_type(mime_type: &str) -> bool {
    let mime_type = mime_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    ["image/", "audio/", "video/", "font/"].iter().any(|prefix| mime_type.starts_with(prefix))
        && mime_type != "image/svg+xml"
        || ["application/octet-stream", "application/pdf", "application/zip", "application/gzip"]
            .contains(&mime_type.as_str())
}

/// `prompts/get`: runs the prompt's program (no grants, nothing journaled: it only computes)
/// and returns its messages. A program returns a string or a content block (one user
/// message), or a list of those and `{"role": "user" | "assistant", "content": str | block}`.
pub async fn get_prompt(env: &Env, prompt: &Prompt, arguments: &Map<String, Value>) -> Result<Value, String> {
    for (name, value) in arguments {
        if !value.is_string() {
            return Err(format!("argument `{name}` must be a string"));
        }
    }
    let inputs = prompt.program.check_inputs(arguments).map_err(|invalid| invalid.text())?;
    let mut job = Job::load(
        prompt.program.path.clone(),
        prompt.program.source.to_string(),
        prompt.config.entry.clone(),
        Vec::new(),
        prompt.config.execution_ms,
    );
    job.load_only = false;
    job.inputs = inputs;
    job.max_steps = prompt.config.max_steps;
    job.compiled = Some(prompt.program.clone());
    let Executed { execution, .. } = env.sandbox.execute(job).await.map_err(|stopped| stopped.to_string())?;
    let value = match execution.outcome {
        Outcome::Done(value) => value,
        Outcome::Failed(failure) => return Err(failure.message),
        Outcome::Suspended(_) => return Err("a prompt has no grants and cannot act".to_string()),
        Outcome::Asking(_) => {
            return Err("a prompt cannot ask its client for input (only a tool's run can)".to_string())
        }
    };
    let items = match value {
        Value::Array(items) => items,
        single => vec![single],
    };
    if items.len() > PROMPT_MESSAGES_MAX {
        return Err(format!("the prompt returned {} messages; the limit is {PROMPT_MESSAGES_MAX}", items.len()));
    }
    let messages = items.iter().map(message).collect::<Result<Vec<Value>, String>>()?;
    let result = json!({"description": prompt_description(prompt), "messages": messages});
    // As large as a tool's result may be, measured as sent (escapes included).
    let size = serde_json::to_vec(&result).map_or(usize::MAX, |bytes| bytes.len());
    if size > crate::limits::RESULT_BYTES_MAX {
        return Err(format!(
            "the prompt's messages are {size} bytes; the limit is {}",
            crate::limits::RESULT_BYTES_MAX
        ));
    }
    Ok(result)
}

fn message(item: &Value) -> Result<Value, String> {
    let (role, content) = match item {
        Value::Object(block) if crate::program::content::is_block(block) => ("user", item),
        Value::Object(object) if object.contains_key("role") => {
            let role = match object.get("role").and_then(Value::as_str) {
                Some(role @ ("user" | "assistant")) => role,
                _ => return Err("a prompt message's `role` must be \"user\" or \"assistant\"".to_string()),
            };
            (role, object.get("content").unwrap_or(&Value::Null))
        }
        Value::String(_) => ("user", item),
        _ => {
            return Err(
                "a prompt returns a string or a content block, or a list of those and {role, content}".to_string()
            )
        }
    };
    let content = match content {
        Value::String(text) if text.len() > PROMPT_TEXT_BYTES_MAX => {
            return Err(format!("a prompt message holds {} bytes; the limit is {PROMPT_TEXT_BYTES_MAX}", text.len()))
        }
        Value::String(text) => json!({"type": "text", "text": text}),
        Value::Object(block) if crate::program::content::is_block(block) => content.clone(),
        _ => {
            return Err(
                "a prompt message's `content` must be a string or a content block (mcp.text, mcp.image...)".to_string()
            )
        }
    };
    Ok(json!({"role": role, "content": content}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_resource_is_read_as_a_blob_and_must_be_base64() {
        let spec = |mime_type: &str| ResourceSpec { mime_type: mime_type.to_string(), ..ResourceSpec::default() };
        let answer = |result: Value| json!({"isError": false, "structuredContent": {"result": result}, "content": [{"type": "text", "text": ""}]});
        let png = contents(&spec("image/png"), "test://b", &answer(json!("iVBORw0KGgo="))).unwrap();
        assert_eq!(png["contents"][0]["blob"], json!("iVBORw0KGgo="));
        assert!(png["contents"][0].get("text").is_none());
        let refused =
            contents(&spec("application/octet-stream"), "test://b", &answer(json!("not base64!"))).unwrap_err();
        assert!(refused.contains("base64"), "{refused}");
        let text = contents(&spec("text/plain"), "test://t", &answer(json!("hello"))).unwrap();
        assert_eq!(text["contents"][0]["text"], json!("hello"));
        assert!(
            is_binary_type("image/png; q=1") && !is_binary_type("image/svg+xml") && !is_binary_type("application/json")
        );
    }

    #[test]
    fn prompt_messages_hold_text_or_content_blocks() {
        let image = json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"});
        assert_eq!(message(&image).unwrap(), json!({"role": "user", "content": image}));
        let said = message(&json!({"role": "assistant", "content": "ok"})).unwrap();
        assert_eq!(said, json!({"role": "assistant", "content": {"type": "text", "text": "ok"}}));
        let embedded =
            json!({"type": "resource", "resource": {"uri": "test://r", "text": "t", "mimeType": "text/plain"}});
        assert_eq!(message(&json!({"role": "user", "content": embedded})).unwrap()["content"], embedded);
        assert!(message(&json!({"role": "user", "content": {"type": "image", "data": "!"}})).is_err());
        assert!(message(&json!({"role": "robot", "content": "x"})).is_err());
        assert!(message(&json!(3)).is_err());
    }

    #[test]
    fn templates_match_whole_segments_and_decode_them() {
        assert_eq!(match_template("ticket://{id}", "ticket://42"), Some(vec!["42".to_string()]));
        assert_eq!(match_template("ticket://{id}", "ticket://"), None);
        assert_eq!(match_template("ticket://{id}", "ticket://4/2"), None);
        assert_eq!(match_template("ticket://{id}", "tickets://42"), None);
        assert_eq!(
            match_template("desk://{queue}/tickets/{id}.json", "desk://vip%20line/tickets/7.json"),
            Some(vec!["vip line".to_string(), "7".to_string()])
        );
        assert_eq!(match_template("desk://all", "desk://all"), Some(vec![]));
        assert_eq!(match_template("desk://{id}", "desk://%zz"), None);
        assert_eq!(match_template("desk://{id}", "desk://a%2Fb"), None, "an encoded slash is still a slash");
        assert_eq!(match_template("desk://{id}", "desk://%+5"), None, "only hex digits after %");
    }
}
