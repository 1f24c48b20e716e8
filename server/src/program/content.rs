//! Content results (seed 004's reply table: "Content or list[Content]: text, images or
//! resource links, with no output schema"). A program built with `-> content` or
//! `-> list[content]` returns blocks made by the `mcp` builtins; its answer carries them as
//! the result's `content`, with no `structuredContent` and no `outputSchema`. The result
//! size limit applies as to any result.

use allocative::Allocative;
use serde::Serialize;
use starlark::any::ProvidesStaticType;
use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::starlark_value;
use starlark::values::{StarlarkPagable, StarlarkValue};

use super::capability::refused;

/// Whether `block` is a content block as the builtins make it (a program may build a dict
/// by hand: it must hold what MCP's `ContentBlock` requires, base64 data included).
pub fn is_block(block: &serde_json::Map<String, serde_json::Value>) -> bool {
    let text = |key: &str| block.get(key).and_then(serde_json::Value::as_str);
    match text("type") {
        Some("text") => text("text").is_some(),
        Some(kind @ ("image" | "audio")) => {
            text("data").is_some_and(is_base64) && text("mimeType").is_some_and(|m| m.starts_with(&format!("{kind}/")))
        }
        Some("resource_link") => text("uri").is_some() && text("name").is_some(),
        Some("resource") => {
            let inner = block.get("resource").cloned().unwrap_or_default();
            inner["uri"].is_string() && (inner["text"].is_string() || inner["blob"].as_str().is_some_and(is_base64))
        }
        _ => false,
    }
}

/// One content block, as the JSON the client receives.
#[derive(Debug, Clone, ProvidesStaticType, Allocative, StarlarkPagable)]
pub struct StarlarkContent {
    json: String,
}

impl Serialize for StarlarkContent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value: serde_json::Value = serde_json::from_str(&self.json).map_err(serde::ser::Error::custom)?;
        value.serialize(serializer)
    }
}

impl std::fmt::Display for StarlarkContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "content({})", self.json)
    }
}

starlark::starlark_simple_value!(StarlarkContent);

#[starlark_value(type = "content")]
impl<'v> StarlarkValue<'v> for StarlarkContent {}

fn block(value: serde_json::Value) -> StarlarkContent {
    StarlarkContent { json: value.to_string() }
}

/// Base64 as MCP carries binary data: the standard alphabet, padded.
pub fn is_base64(data: &str) -> bool {
    data.len() % 4 == 0
        && data.trim_end_matches('=').bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
        && data.len() - data.trim_end_matches('=').len() <= 2
}

fn binary(kind: &str, data: &str, mime_type: &str) -> starlark::Result<StarlarkContent> {
    if !mime_type.starts_with(&format!("{kind}/")) {
        return Err(refused(format!("mcp.{kind}: `{mime_type}` is not an {kind}/* MIME type")));
    }
    if !is_base64(data) {
        return Err(refused(format!("mcp.{kind}: the data is not base64")));
    }
    Ok(block(serde_json::json!({"type": kind, "data": data, "mimeType": mime_type})))
}

#[starlark_module]
fn mcp_members(builder: &mut GlobalsBuilder) {
    /// A text block.
    fn text(#[starlark(require = pos)] text: &str) -> starlark::Result<StarlarkContent> {
        Ok(block(serde_json::json!({"type": "text", "text": text})))
    }

    /// An image block: base64 `data` of an image/* `mime_type`.
    fn image(
        #[starlark(require = pos)] data: &str,
        #[starlark(require = pos)] mime_type: &str,
    ) -> starlark::Result<StarlarkContent> {
        binary("image", data, mime_type)
    }

    /// An audio block: base64 `data` of an audio/* `mime_type`.
    fn audio(
        #[starlark(require = pos)] data: &str,
        #[starlark(require = pos)] mime_type: &str,
    ) -> starlark::Result<StarlarkContent> {
        binary("audio", data, mime_type)
    }

    /// A link to a resource the client may read.
    fn resource_link(
        #[starlark(require = pos)] uri: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = named)] mime_type: Option<&str>,
        #[starlark(require = named)] description: Option<&str>,
    ) -> starlark::Result<StarlarkContent> {
        let mut link = serde_json::json!({"type": "resource_link", "uri": uri, "name": name});
        if let Some(mime_type) = mime_type {
            link["mimeType"] = serde_json::json!(mime_type);
        }
        if let Some(description) = description {
            link["description"] = serde_json::json!(description);
        }
        Ok(block(link))
    }

    /// An embedded text resource.
    fn resource(
        #[starlark(require = pos)] uri: &str,
        #[starlark(require = pos)] text: &str,
        #[starlark(require = named)] mime_type: Option<&str>,
    ) -> starlark::Result<StarlarkContent> {
        let mut contents = serde_json::json!({"uri": uri, "text": text});
        if let Some(mime_type) = mime_type {
            contents["mimeType"] = serde_json::json!(mime_type);
        }
        Ok(block(serde_json::json!({"type": "resource", "resource": contents})))
    }
}

#[starlark_module]
#[starlark_types(StarlarkContent as content)]
fn content_type(globals: &mut GlobalsBuilder) {}

/// `mcp.text`, `mcp.image`, `mcp.audio`, `mcp.resource_link`, `mcp.resource`, and the
/// `content` type for return annotations.
pub fn content_globals(globals: &mut GlobalsBuilder) {
    content_type(globals);
    globals.namespace("mcp", mcp_members);
}
