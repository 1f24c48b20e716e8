//! What the server serves: the manifest's tools, each with its compiled program, in the
//! manifest's order. Built once at start; any problem stops the server before it answers.

pub mod schema;
pub mod tool_lock;

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::env::Env;
use crate::manifest::kinds;
use crate::manifest::{CapabilityGrant, Grant, Manifest, PromptConfig, ResourceConfig, ToolConfig};
use crate::program::job::Job;
use crate::program::types::ArgType;
use crate::program::Program;

pub struct Tool {
    pub config: ToolConfig,
    pub program: Program,
    /// The operator's own input schema, when the manifest names one (`input_schema`).
    pub schema: Option<schema::OperatorSchema>,
    /// Set when this is the tool a resource's reads run as (not listed, not callable).
    pub resource: Option<ResourceSpec>,
}

/// How a resource is addressed and described.
#[derive(Default)]
pub struct ResourceSpec {
    pub uri_template: String,
    pub variables: Vec<String>,
    pub mime_type: String,
    pub ttl_ms: Option<u64>,
    pub complete: std::collections::BTreeMap<String, Vec<String>>,
}

/// A prompt: its program (no grants) and its arguments (its `str` parameters).
pub struct Prompt {
    pub config: PromptConfig,
    pub program: Program,
}

/// The shortest secret value accepted.
pub const SECRET_BYTES_MIN: usize = 8;

pub struct Catalog {
    pub manifest: Manifest,
    /// The manifest's tools, then the tools its resources' reads run as.
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
}

/// Reads, parses and validates the manifest.
pub async fn read_manifest(env: &Env, path: &Path) -> Result<Manifest, String> {
    let text = env.disk.read(path).await.map_err(|e| format!("{}: cannot read the manifest: {e}", path.display()))?;
    Manifest::parse(path, &text).map_err(|e| e.to_string())
}

impl Catalog {
    /// Loads every tool's program. Reports every broken tool, not just the first.
    pub async fn load(env: &Env, manifest: Manifest) -> Result<Catalog, String> {
        let mut tools = Vec::new();
        let mut problems = Vec::new();
        for config in &manifest.tools {
            // Named, not indexed: `warden check` may load a manifest less its broken tools.
            let at = format!("{}: tool `{}`", manifest.path.display(), config.name);
            let loaded = load_program(env, config).await.and_then(|program| {
                once_keys_are_parameters(config, &program, &at)?;
                mirrored_arguments_are_parameters(config, &program, &at)?;
                Ok(program)
            });
            let loaded = match loaded {
                Ok(program) => schema::OperatorSchema::load(env, config, &program, &at).await.map(|s| (program, s)),
                Err(problem) => Err(problem),
            };
            match loaded {
                Ok((program, schema)) => tools.push(Tool { config: config.clone(), program, schema, resource: None }),
                Err(problem) => problems.push(problem),
            }
        }
        for (index, config) in manifest.resources.iter().enumerate() {
            match load_resource(env, config, index).await {
                Ok(tool) => tools.push(tool),
                Err(problem) => problems.push(problem),
            }
        }
        let mut prompts = Vec::new();
        for (index, config) in manifest.prompts.iter().enumerate() {
            match load_prompt(env, config, index).await {
                Ok(program) => prompts.push(Prompt { config: config.clone(), program }),
                Err(problem) => problems.push(problem),
            }
        }
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        Ok(Catalog { manifest, tools, prompts })
    }

    /// The resources, in manifest order.
    pub fn resources(&self) -> impl Iterator<Item = (&Tool, &ResourceSpec)> {
        self.tools.iter().filter_map(|tool| tool.resource.as_ref().map(|spec| (tool, spec)))
    }

    /// The tools a client may call (not the resources' tools), in manifest order.
    pub fn list_tools(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().filter(|tool| tool.resource.is_none())
    }

    /// A tool a client may call by name (not a resource's).
    pub fn callable(&self, name: &str) -> Option<&Tool> {
        self.tool(name).filter(|tool| tool.resource.is_none())
    }

    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|prompt| prompt.config.name == name)
    }

    /// Every environment variable a grant reads a secret from must be set, and long enough,
    /// before serving (the operator's commands that only read records do not need them).
    pub fn check_secrets(&self, env: &Env) -> Result<(), String> {
        let problems: Vec<String> = missing_secrets(env, &self.manifest).into_iter().map(|(line, _)| line).collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|tool| tool.config.name == name)
    }

    /// The `tools` array of `tools/list`, in manifest order. Era-neutral: both eras'
    /// `Tool` shapes accept it (object-rooted schemas, no `execution`).
    pub fn list(&self) -> Vec<Value> {
        self.list_tools().map(Tool::describe).collect()
    }
}

/// The secrets `manifest`'s grants (and its model, for a tool that calls it) read from the
/// environment that are unset or too short, each a line naming the variable and the field,
/// and whether it is unset (not a mistake where the secrets are not given, as in CI).
pub fn missing_secrets(env: &Env, manifest: &Manifest) -> Vec<(String, bool)> {
    let mut problems = Vec::new();
    // Named, not indexed: `warden check` may hold a manifest less its broken tools.
    let tools = manifest.tools.iter().map(|tool| (format!("tool `{}`", tool.name), tool));
    let resources =
        manifest.resources.iter().map(|resource| (format!("resource `{}`", resource.uri_template), &resource.tool));
    for (at, tool) in tools.chain(resources) {
        for variable in secret_variables(&tool.grants) {
            // A secret too short is scrubbed unreliably (its bytes turn up in ordinary data);
            // an empty one is no secret at all.
            let length = env.process.var(&variable).map(|value| value.len());
            let problem = match length {
                None => "is not set".to_string(),
                Some(length) if length < SECRET_BYTES_MIN => {
                    format!("holds {length} bytes; a secret must have at least {SECRET_BYTES_MIN}")
                }
                Some(_) => continue,
            };
            let line = format!(
                "{}: {at}: grants: the environment variable {variable} {problem} (it holds a secret the grants attach)",
                manifest.path.display()
            );
            problems.push((line, length.is_none()));
        }
    }
    let grants = manifest.tools.iter().chain(manifest.resources.iter().map(|resource| &resource.tool));
    let calls_model = (grants.flat_map(|tool| tool.grants.values()))
        .any(|grant| matches!(grant, Grant::Capability(g) if g.cap == crate::broker::Kind::Model));
    if let (true, Some(model)) = (calls_model, &manifest.model) {
        let length = env.process.var(&model.api_key_env).map(|value| value.len());
        if length.is_none_or(|length| length < SECRET_BYTES_MIN) {
            let line = format!(
                "{}: model.api_key.env: the environment variable {} is not set or shorter than {SECRET_BYTES_MIN} bytes",
                manifest.path.display(),
                model.api_key_env
            );
            problems.push((line, length.is_none()));
        }
    }
    problems
}

impl Tool {
    /// The `inputSchema` listed: the operator's schema as written, or the one the program's
    /// signature gives; each argument mirrored in a header marked `x-mcp-header`.
    pub fn input_schema(&self) -> Value {
        let mut schema = match &self.schema {
            Some(schema) => schema.value.clone(),
            None => self.program.input_schema(),
        };
        for (argument, header) in &self.config.headers {
            if let Some(property) = schema.pointer_mut(&format!("/properties/{argument}")) {
                property["x-mcp-header"] = json!(header);
            }
        }
        schema
    }

    /// A call's arguments checked: the program's signature first (the normalised inputs),
    /// then the operator's schema, if the manifest names one.
    pub fn check_arguments(
        &self,
        arguments: &serde_json::Map<String, Value>,
    ) -> Result<serde_json::Map<String, Value>, crate::program::InvalidInputs> {
        let inputs = self.program.check_inputs(arguments)?;
        let Some(schema) = &self.schema else { return Ok(inputs) };
        let problems = schema.problems(&Value::Object(arguments.clone()));
        match problems.is_empty() {
            true => Ok(inputs),
            false => Err(crate::program::InvalidInputs { problems, omitted: 0 }),
        }
    }

    pub fn description(&self) -> &str {
        self.config.description.as_deref().unwrap_or(&self.program.description)
    }

    pub fn describe(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), json!(self.config.name));
        if let Some(title) = &self.config.title {
            tool.insert("title".into(), json!(title));
        }
        tool.insert("description".into(), json!(self.description()));
        // The schemas a signature gives name their dialect (an operator's schema is listed as
        // written); the digest is of the schemas without it, so pinned tools keep their pin.
        let mut input = self.input_schema();
        if self.schema.is_none() {
            input = with_dialect(input);
        }
        tool.insert("inputSchema".into(), input);
        if let Some(output) = self.program.output_schema() {
            tool.insert("outputSchema".into(), with_dialect(output));
        }
        tool.insert("annotations".into(), self.annotations());
        if self.config.task != crate::manifest::TaskSupport::Forbidden {
            tool.insert("execution".into(), json!({"taskSupport": self.config.task.name()}));
        }
        // The digest a client can pin (and `warden.lock` records): a rewritten description
        // or schema changes it.
        tool.insert(
            "_meta".into(),
            json!({crate::catalog::tool_lock::META_DIGEST: crate::catalog::tool_lock::tool_digest(self).digest}),
        );
        Value::Object(tool)
    }

    /// Hints derived from the grants (seed 000 section 5), never claiming more than the
    /// broker enforces. A tool without grants can only compute. Read-only means every grant
    /// only reads. Idempotent is claimed only with `once`, which makes a repeated call the same
    /// run; an idempotency key guards retries within a run, not repeated calls. Open world
    /// means a grant reaches the network.
    pub fn annotations(&self) -> Value {
        let grants: Vec<&CapabilityGrant> = self
            .config
            .grants
            .values()
            .filter_map(|grant| match grant {
                Grant::Capability(grant) => Some(grant),
                Grant::Secret { .. } => None,
            })
            .collect();
        let read_only = grants.iter().all(|grant| crate::manifest::kinds::grant_reads_only(grant));
        let open_world = grants.iter().any(|grant| kinds::spec(grant.cap).network);
        let mut hints = json!({"readOnlyHint": read_only, "openWorldHint": open_world});
        if !read_only {
            hints["destructiveHint"] = json!(true);
            hints["idempotentHint"] = json!(self.config.once.is_some());
        }
        hints
    }
}

/// The environment variables a tool's grants read secrets from.
pub fn secret_variables(grants: &std::collections::BTreeMap<String, Grant>) -> Vec<String> {
    fn collect(grant: &Grant, out: &mut Vec<String>) {
        match grant {
            Grant::Secret { env } => out.push(env.clone()),
            Grant::Capability(grant) => {
                out.extend(grant.headers.values().map(|(_, env)| env.clone()));
                out.extend(grant.url_env.iter().cloned());
                grant.needs.values().for_each(|need| collect(need, out));
            }
        }
    }
    let mut out = Vec::new();
    grants.values().for_each(|grant| collect(grant, &mut out));
    out.sort();
    out.dedup();
    out
}

/// A resource's program: every template variable must be one of its inputs, and every other
/// input optional (a read has nothing else to fill it with).
async fn load_resource(env: &Env, config: &ResourceConfig, index: usize) -> Result<Tool, String> {
    let program = load_program(env, &config.tool).await?;
    let at = format!("{}: resources[{index}]", program.path.display());
    let mut problems = Vec::new();
    for variable in &config.variables {
        if !program.inputs.iter().any(|input| &input.name == variable) {
            problems.push(format!(
                "{at}: URI template variable `{variable}` of `{}` is not a parameter of `{}`",
                config.uri_template, config.tool.entry
            ));
        }
    }
    if program.returns_content() {
        problems.push(format!("{at}: a resource returns data (its contents), not `content` blocks"));
    }
    for input in &program.inputs {
        if !config.variables.contains(&input.name) && input.default.is_none() {
            problems.push(format!(
                "{at}: parameter `{}` is not in the URI template `{}` and has no default",
                input.name, config.uri_template
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("\n"));
    }
    let resource = ResourceSpec {
        uri_template: config.uri_template.clone(),
        variables: config.variables.clone(),
        mime_type: config.mime_type.clone(),
        ttl_ms: config.ttl_ms,
        complete: config.complete.clone(),
    };
    Ok(Tool { config: config.tool.clone(), program, schema: None, resource: Some(resource) })
}

/// A prompt's program: no grants, and every parameter `str` or `None | str` (MCP prompt
/// arguments are strings).
async fn load_prompt(env: &Env, config: &PromptConfig, index: usize) -> Result<Program, String> {
    let path = &config.program;
    let what = format!("prompt `{}`", config.name);
    let program = load_source(env, path, &what, &config.entry, &[], config.execution_ms).await?;
    let mut problems = Vec::new();
    for name in config.complete.keys().filter(|name| !program.inputs.iter().any(|input| &input.name == *name)) {
        problems.push(format!(
            "{}: prompts[{index}].complete: `{name}` is not a parameter of `{}`",
            path.display(),
            config.entry
        ));
    }
    for input in &program.inputs {
        let string = match &input.ty {
            ArgType::Str => true,
            ArgType::Optional(inner) => **inner == ArgType::Str,
            _ => false,
        };
        if !string {
            problems.push(format!(
                "{}: prompts[{index}]: parameter `{}` of `{}` is not `str` or `None | str` (prompt arguments are strings)",
                path.display(),
                input.name,
                config.entry
            ));
        }
    }
    if problems.is_empty() {
        Ok(program)
    } else {
        Err(problems.join("\n"))
    }
}

/// Every name in `once.by` is a parameter of the entry `def`: a name that is not would make
/// every call after the first "the same operation with different arguments" for the key's
/// whole `keep`.
fn once_keys_are_parameters(config: &ToolConfig, program: &Program, at: &str) -> Result<(), String> {
    let Some(once) = &config.once else { return Ok(()) };
    let names: Vec<&str> = program.inputs.iter().map(|input| input.name.as_str()).collect();
    let problems: Vec<String> = (once.by.iter().enumerate())
        .filter(|(_, name)| !names.contains(&name.as_str()))
        .map(|(index, name)| {
            format!(
                "{at}: once.by[{index}]: `{name}` is not a parameter of `{}` (its parameters: {})",
                config.entry,
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            )
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Every argument `headers` mirrors is a parameter of the entry `def`.
fn mirrored_arguments_are_parameters(config: &ToolConfig, program: &Program, at: &str) -> Result<(), String> {
    let names: Vec<&str> = program.inputs.iter().map(|input| input.name.as_str()).collect();
    let problems: Vec<String> = (config.headers.keys())
        .filter(|name| !names.contains(&name.as_str()))
        .map(|name| format!("{at}: headers.{name}: `{name}` is not a parameter of `{}`", config.entry))
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

async fn load_program(env: &Env, config: &ToolConfig) -> Result<Program, String> {
    let grant_names: Vec<String> = config.grants.keys().cloned().collect();
    let what = format!("tool `{}`", config.name);
    load_source(env, &config.program, &what, &config.entry, &grant_names, config.execution_ms).await
}

/// Reads and compiles a program (`what` names its tool, resource or prompt in errors).
async fn load_source(
    env: &Env,
    path: &Path,
    what: &str,
    entry: &str,
    grant_names: &[String],
    execution_ms: u64,
) -> Result<Program, String> {
    let bytes =
        env.disk.read(path).await.map_err(|e| format!("{}: cannot read the program of {what}: {e}", path.display()))?;
    let source = String::from_utf8(bytes).map_err(|_| format!("{}: is not UTF-8", path.display()))?;
    // Loading runs the program's top level, which one builtin can make spin or allocate
    // without bound: load it first where that can be stopped, then here.
    let job = Job::load(path.to_path_buf(), source.clone(), entry.to_string(), grant_names.to_vec(), execution_ms);
    if let Err(stopped) = env.sandbox.execute(job).await {
        return Err(format!("{}: loading the program was stopped: {stopped}", path.display()));
    }
    Program::load(path, &source, entry, grant_names)
}
/// A prompt's arguments as `prompts/list` gives them: its parameters, all strings.
pub fn prompt_arguments(prompt: &Prompt) -> Value {
    let arguments = prompt.program.inputs.iter().map(|input| {
        let required = input.default.is_none();
        json!({"name": input.name, "description": input.description, "required": required})
    });
    Value::Array(arguments.collect())
}

/// A prompt's description: the manifest's, else its program's docstring.
pub fn prompt_description(prompt: &Prompt) -> &str {
    prompt.config.description.as_deref().unwrap_or(&prompt.program.description)
}

/// The JSON Schema dialect of the schemas Warden derives from signatures.
pub const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// `schema` with `$schema` first, naming the dialect.
fn with_dialect(schema: Value) -> Value {
    let mut named = Map::new();
    named.insert("$schema".into(), json!(SCHEMA_DIALECT));
    if let Value::Object(fields) = schema {
        named.extend(fields);
    }
    Value::Object(named)
}
