//! The tool lock, `warden.lock` beside the manifest (seed 004: a digest over each tool's name,
//! description and input and output schemas, recorded so a rewritten description shows as a
//! change; resources and prompts likewise, a resource's address included). `warden lock` writes it; `warden mcp` refuses to start when a tool differs from
//! it, naming the tool and what changed; `tools/list` publishes each tool's digest in its
//! `_meta` so a client can pin it. Without a lock file the tools are served unpinned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::base::json::sha256_hex;
use crate::catalog::{Catalog, Tool};
use crate::env::Env;

pub const LOCK_FILE: &str = "warden.lock";
/// The `_meta` key under which `tools/list` publishes a tool's digest.
pub const META_DIGEST: &str = "dev.warden/digest";
/// The largest lock file read: one short entry per tool of a bounded manifest.
pub const LOCK_BYTES_MAX: usize = 1 << 20;
/// Version 2 records what a client is shown beside the description and schemas (a title,
/// annotations); a version 1 lock did not, and is refused until `warden lock` writes it anew.
const LOCK_VERSION: u64 = 2;

/// What the lock records of one tool: the digest over the whole, and one per part, so a
/// mismatch can say what changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDigest {
    pub digest: String,
    pub description: String,
    #[serde(rename = "inputSchema")]
    pub input_schema: String,
    #[serde(rename = "outputSchema")]
    pub output_schema: String,
    /// Everything else a client is shown: a title, a tool's annotations (a tool that gained a
    /// write grant shows `destructiveHint`).
    pub presentation: String,
}

#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LockFile {
    warden_lock: u64,
    tools: BTreeMap<String, ToolDigest>,
    #[serde(default)]
    resources: BTreeMap<String, ToolDigest>,
    #[serde(default)]
    prompts: BTreeMap<String, ToolDigest>,
}

/// What a lock records, by kind: (kind as the lock and its messages name it, name, digests).
fn entries(catalog: &Catalog) -> Vec<(&'static str, String, ToolDigest)> {
    let mut entries: Vec<(&'static str, String, ToolDigest)> =
        catalog.list_tools().map(|tool| ("tool", tool.config.name.clone(), tool_digest(tool))).collect();
    for (tool, spec) in catalog.resources() {
        // A resource's address and type are part of what a client reads of it.
        let input = serde_json::json!({"uriTemplate": spec.uri_template, "mimeType": spec.mime_type,
            "parameters": tool.program.input_schema()});
        let output = tool.program.output_schema().unwrap_or(Value::Null);
        let presentation = serde_json::json!({"title": tool.config.title});
        entries.push((
            "resource",
            tool.config.name.clone(),
            digests(&tool.config.name, tool.description(), input, output, presentation),
        ));
    }
    for prompt in &catalog.prompts {
        let description = crate::catalog::prompt_description(prompt);
        let arguments = crate::catalog::prompt_arguments(prompt);
        // Its messages come from its program: a rewritten program is a change (of its output).
        let program = Value::String(prompt.program.hash.clone());
        let presentation = serde_json::json!({"title": prompt.config.title});
        entries.push((
            "prompt",
            prompt.config.name.clone(),
            digests(&prompt.config.name, description, arguments, program, presentation),
        ));
    }
    entries
}

/// JSON text with every object's keys sorted, so a digest does not depend on key order.
fn canonical(value: &Value) -> Vec<u8> {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&map[k]))).collect::<Map<_, _>>())
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_vec(&sorted(value)).expect("JSON values serialise")
}

fn digest_of(value: &Value) -> String {
    format!("sha256:{}", sha256_hex(&canonical(value)))
}

/// A tool's digests, over everything a client reads of it in `tools/list`.
pub fn tool_digest(tool: &Tool) -> ToolDigest {
    let output = tool.program.output_schema().unwrap_or(Value::Null);
    let presentation = serde_json::json!({"title": tool.config.title, "annotations": tool.annotations()});
    digests(&tool.config.name, tool.description(), tool.input_schema(), output, presentation)
}

fn digests(name: &str, description: &str, input: Value, output: Value, presentation: Value) -> ToolDigest {
    let description = Value::String(description.to_string());
    let whole = serde_json::json!({
        "name": name, "description": description, "inputSchema": input, "outputSchema": output,
        "presentation": presentation,
    });
    ToolDigest {
        digest: digest_of(&whole),
        description: digest_of(&description),
        input_schema: digest_of(&input),
        output_schema: digest_of(&output),
        presentation: digest_of(&presentation),
    }
}

pub fn lock_path(manifest: &Path) -> PathBuf {
    crate::base::layout::folder_of(manifest).join(LOCK_FILE)
}

fn render(catalog: &Catalog) -> Vec<u8> {
    let mut lock = LockFile {
        warden_lock: LOCK_VERSION,
        tools: BTreeMap::new(),
        resources: BTreeMap::new(),
        prompts: BTreeMap::new(),
    };
    for (kind, name, digest) in entries(catalog) {
        lock.of_kind(kind).insert(name, digest);
    }
    let mut text = serde_json::to_vec_pretty(&lock).expect("the lock serialises");
    text.push(b'\n');
    text
}

/// `warden lock`: writes the lock durably (temporary file, fsync, rename, directory fsync).
pub async fn write(env: &Env, catalog: &Catalog) -> Result<PathBuf, String> {
    let path = lock_path(&catalog.manifest.path);
    let temp = path.with_extension("lock.tmp");
    let dir = crate::base::layout::folder_of(&path).to_path_buf();
    let written = async {
        env.disk.write(&temp, render(catalog)).await?;
        env.disk.fsync(&temp).await?;
        env.disk.rename(&temp, &path).await?;
        env.disk.fsync_dir(&dir).await
    }
    .await;
    written.map_err(|e| format!("{}: writing the lock failed: {e}", path.display()))?;
    Ok(path)
}

/// At start: every tool must be as the lock recorded it, when there is a lock. Returns
/// whether the tools are pinned, or every difference, each naming the tool and what changed.
pub async fn verify(env: &Env, catalog: &Catalog) -> Result<bool, String> {
    let path = lock_path(&catalog.manifest.path);
    let cannot = |problem: String| format!("{}: {problem}", path.display());
    if !env.disk.exists(&path).await.map_err(|e| cannot(format!("cannot see the lock: {e}")))? {
        return Ok(false);
    }
    let bytes = env.disk.read(&path).await.map_err(|e| cannot(format!("cannot read the lock: {e}")))?;
    if bytes.len() > LOCK_BYTES_MAX {
        return Err(cannot(format!("the lock holds {} bytes, over the {LOCK_BYTES_MAX} read", bytes.len())));
    }
    let relock = format!("run `warden lock {}` to write it anew", catalog.manifest.path.display());
    let version = serde_json::from_slice::<Value>(&bytes).ok().and_then(|lock| lock["warden_lock"].as_u64());
    if let Some(version) = version.filter(|&version| version != LOCK_VERSION) {
        return Err(cannot(format!(
            "lock version {version} is not {LOCK_VERSION} (an older Warden's lock, which did not cover titles and \
             annotations); check the tools are as intended, then {relock}"
        )));
    }
    let lock: LockFile =
        serde_json::from_slice(&bytes).map_err(|e| cannot(format!("is not a lock written by `warden lock`: {e}")))?;
    let problems = differences(catalog, lock);
    if problems.is_empty() {
        return Ok(true);
    }
    let mut message: Vec<String> = problems.iter().map(|problem| cannot(problem.clone())).collect();
    message.push(format!(
        "{}: the tools differ from the lock; if the change is intended, run `warden lock {}` and restart",
        path.display(),
        catalog.manifest.path.display()
    ));
    Err(message.join("\n"))
}

impl LockFile {
    fn of_kind(&mut self, kind: &str) -> &mut BTreeMap<String, ToolDigest> {
        match kind {
            "tool" => &mut self.tools,
            "resource" => &mut self.resources,
            _ => &mut self.prompts,
        }
    }
}

fn differences(catalog: &Catalog, mut locked: LockFile) -> Vec<String> {
    let mut problems = Vec::new();
    for (kind, name, now) in entries(catalog) {
        let Some(recorded) = locked.of_kind(kind).remove(&name) else {
            problems.push(format!("{kind} `{name}` is served but not in the lock"));
            continue;
        };
        let changed: Vec<&str> = [
            ("its description", now.description != recorded.description),
            ("its input schema", now.input_schema != recorded.input_schema),
            ("its output schema", now.output_schema != recorded.output_schema),
            ("its title or annotations", now.presentation != recorded.presentation),
        ]
        .into_iter()
        .filter_map(|(part, differs)| differs.then_some(part))
        .collect();
        if !changed.is_empty() {
            problems.push(format!("{kind} `{name}`: {} changed since the lock was written", changed.join(", ")));
        } else if now.digest != recorded.digest {
            problems.push(format!("{kind} `{name}` changed since the lock was written"));
        }
    }
    for kind in ["tool", "resource", "prompt"] {
        for name in locked.of_kind(kind).keys() {
            problems.push(format!("{kind} `{name}` is in the lock but no longer served"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_does_not_depend_on_key_order() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"x": null, "y": [1, {"p": 3, "q": 2}]}, "b": 1}"#).unwrap();
        assert_eq!(digest_of(&a), digest_of(&b));
        let c: Value = serde_json::from_str(r#"{"a": {"x": null, "y": [{"p": 3, "q": 2}, 1]}, "b": 1}"#).unwrap();
        assert_ne!(digest_of(&a), digest_of(&c), "array order is content");
    }
}
