//! Tool programs: Starlark files whose entry `def` is the contract (DESIGN.md section 4).
//!
//! Loading compiles the file once, reads the entry's signature and docstring, and derives
//! the tool's description, input schema, output schema and input check from them. A
//! missing description, an undocumented input or an unsupported annotation is refused
//! here, naming the file and line, so the server never starts with a tool it cannot
//! describe truthfully.

pub mod ask;
mod brackets;
pub mod capability;
pub mod content;
pub mod job;
pub mod progress;
mod run;
mod starlark_money;
pub mod types;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use starlark::docs::{DocItem, DocMember, DocParam};
use starlark::environment::{FrozenModule, Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect, DialectTypes};

pub use run::{execute, execute_with, Execution, Failure, FailureKind, Outcome, RunLimits};
use types::ArgType;
pub use types::{InputProblem, INPUT_PROBLEMS_MAX};

/// The largest program file accepted.
pub const PROGRAM_BYTES_MAX: usize = 1024 * 1024;

/// One input of a tool: a parameter of the entry `def` not named like a grant.
#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub ty: ArgType,
    pub description: String,
    /// The default, as JSON, when the input is optional.
    pub default: Option<Value>,
}

/// A compiled, introspected program. Cheap to share between runs.
#[derive(Clone)]
pub struct Program {
    pub path: PathBuf,
    pub entry: String,
    /// SHA-256 of the source, hex: bound into each journal's header.
    pub hash: String,
    pub description: String,
    pub inputs: Vec<Input>,
    /// Names of the capability parameters, in declaration order.
    pub capabilities: Vec<String>,
    pub returns: Option<ArgType>,
    /// The source it was compiled from, for a worker process to compile again.
    pub source: Arc<str>,
    module: Arc<FrozenModule>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program").field("path", &self.path).field("entry", &self.entry).finish()
    }
}

pub(crate) fn dialect() -> Dialect {
    Dialect {
        enable_keyword_only_arguments: true,
        enable_types: DialectTypes::Enable,
        enable_f_strings: true,
        enable_load: false,
        ..Dialect::Standard
    }
}

/// The globals a program sees: standard Starlark, `print` (to stderr and the journal),
/// `progress` (to a client that asked for it), `json`, typing, and the `money` type. Nothing that reads the clock, the disk or the
/// network: a program acts only through the capabilities it is handed.
pub(crate) fn globals() -> Globals {
    GlobalsBuilder::extended_by(&[LibraryExtension::Print, LibraryExtension::Typing, LibraryExtension::Json])
        .with(starlark_money::money_globals)
        .with(progress::progress_globals)
        .with(ask::ask_globals)
        .with(content::content_globals)
        .build()
}

/// Every bad argument of a call (the first `INPUT_PROBLEMS_MAX`), and how many more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidInputs {
    pub problems: Vec<InputProblem>,
    pub omitted: usize,
}

impl InvalidInputs {
    /// The text a model reads: one line per problem.
    pub fn text(&self) -> String {
        let mut lines: Vec<String> = self.problems.iter().map(|p| format!("- {p}")).collect();
        if self.omitted > 0 {
            lines.push(format!("- ... and {} more", self.omitted));
        }
        format!("invalid arguments:\n{}", lines.join("\n"))
    }

    /// The same problems for programs: each with its JSON path, under `_meta` (never in
    /// `structuredContent`, which must match the tool's output schema).
    pub fn meta(&self) -> Value {
        let problems: Vec<Value> =
            self.problems.iter().map(|p| serde_json::json!({"path": p.path, "problem": p.problem})).collect();
        serde_json::json!({"problems": problems, "omitted": self.omitted})
    }
}

impl Program {
    /// Compiles `source` and derives the tool's contract. `grant_names` are the grants of
    /// the tool: parameters so named are capability handles, never inputs. The contract's
    /// parts (entry, parameters, docstring, annotations) are read from Starlark's
    /// documentation of the entry, collecting every problem with its line.
    pub fn load(path: &Path, source: &str, entry: &str, grant_names: &[String]) -> Result<Program, String> {
        let shown = path.display().to_string();
        let module = compile(&shown, source)?;
        let at = match find_def_line(source, entry) {
            Some(line) => format!("{shown}:{line}"),
            None => shown.clone(),
        };
        let function =
            module.get(entry).map_err(|_| format!("{shown}: the entry `def {entry}(...)` is not defined"))?;
        let DocItem::Member(DocMember::Function(doc)) = function.value().documentation() else {
            return Err(format!("{at}: `{entry}` is not a function"));
        };
        if doc.params.args.is_some() || doc.params.kwargs.is_some() {
            return Err(format!("{at}: `{entry}` may not take *args or **kwargs"));
        }
        let description =
            doc.docs.as_ref().map(|d| first_paragraph(&d.summary, d.details.as_deref())).filter(|d| !d.is_empty());
        let params: Vec<&DocParam> =
            doc.params.pos_only.iter().chain(&doc.params.pos_or_named).chain(&doc.params.named_only).collect();
        let mut problems = Vec::new();
        let (inputs, capabilities) = parameters(&params, grant_names, (&at, entry), &mut problems);
        let returns = return_type(&doc.ret.typ.to_string(), &at, &mut problems);
        let description = description.unwrap_or_else(|| {
            problems.push(format!("{at}: `{entry}` has no docstring; its first paragraph is the tool's description"));
            String::new()
        });
        if !problems.is_empty() {
            return Err(problems.join("\n"));
        }
        Ok(Program {
            path: path.to_path_buf(),
            entry: entry.to_string(),
            hash: crate::base::json::hex(&Sha256::digest(source.as_bytes())),
            description,
            inputs,
            capabilities,
            returns,
            source: Arc::from(source),
            module: Arc::new(module),
        })
    }

    /// The tool's `inputSchema`.
    pub fn input_schema(&self) -> Value {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for input in &self.inputs {
            let mut schema = input.ty.schema();
            let object = schema.as_object_mut().expect("schemas are objects");
            object.insert("description".into(), json!(input.description));
            match &input.default {
                Some(default) => {
                    object.insert("default".into(), default.clone());
                }
                None => required.push(json!(input.name)),
            }
            properties.insert(input.name.clone(), schema);
        }
        let mut schema = json!({"type": "object", "properties": properties, "additionalProperties": false});
        if !required.is_empty() {
            schema["required"] = Value::Array(required);
        }
        schema
    }

    /// Whether the program returns content blocks (`-> content` or `-> list[content]`).
    pub fn returns_content(&self) -> bool {
        self.returns.as_ref().is_some_and(ArgType::holds_content)
    }

    /// The tool's `outputSchema`: `structuredContent` is always `{"result": ...}`; none for a
    /// program returning content.
    pub fn output_schema(&self) -> Option<Value> {
        let returns = self.returns.as_ref().filter(|returns| !returns.holds_content())?;
        Some(json!({
            "type": "object",
            "properties": {"result": returns.schema()},
            "required": ["result"],
            "additionalProperties": false
        }))
    }

    /// Warden's own input check: every problem at once (the first `INPUT_PROBLEMS_MAX`, and
    /// how many more), or the normalised inputs in declaration order with defaults filled in.
    pub fn check_inputs(&self, arguments: &Map<String, Value>) -> Result<Map<String, Value>, InvalidInputs> {
        let mut problems = Vec::new();
        let mut checked = Map::new();
        for name in arguments.keys() {
            if !self.inputs.iter().any(|input| &input.name == name) {
                problems.push(InputProblem::new(format!("$.{name}"), "is not an input of this tool".to_string()));
            }
        }
        for input in &self.inputs {
            let path = format!("$.{}", input.name);
            match (arguments.get(&input.name), &input.default) {
                (Some(value), _) => {
                    checked.insert(input.name.clone(), input.ty.check(value, &path, &mut problems));
                }
                (None, Some(default)) => {
                    checked.insert(input.name.clone(), default.clone());
                }
                (None, None) => problems.push(InputProblem::new(path, "is required".to_string())),
            }
        }
        if problems.is_empty() {
            return Ok(checked);
        }
        let omitted = problems.len().saturating_sub(INPUT_PROBLEMS_MAX);
        problems.truncate(INPUT_PROBLEMS_MAX);
        Err(InvalidInputs { problems, omitted })
    }

    pub(crate) fn module(&self) -> &FrozenModule {
        &self.module
    }
}

/// Parses and evaluates a program's top level (bounded in size and in ticks), frozen.
fn compile(shown: &str, source: &str) -> Result<FrozenModule, String> {
    if source.len() > PROGRAM_BYTES_MAX {
        return Err(format!("{shown}: is {} bytes; the limit is {PROGRAM_BYTES_MAX}", source.len()));
    }
    let ast = AstModule::parse(shown, source.to_string(), &dialect()).map_err(|e| {
        match brackets::first_unpaired(source) {
            Some(unpaired) => format!("{}\n{shown}: {unpaired}", e.to_string().trim_end()),
            None => format!("{e}"),
        }
    })?;
    let globals = globals();
    Module::with_temp_heap(|module| {
        {
            let mut eval = Evaluator::new(&module);
            eval.set_max_tick_count(run::LOAD_TICKS_MAX).map_err(|e| format!("{e}"))?;
            eval.eval_module(ast, &globals).map_err(|e| format!("{e}"))?;
        }
        module.freeze().map_err(|e| format!("{shown}: {e:?}"))
    })
}

/// The entry's parameters: the inputs, and the capability handles (named as grants, never
/// defaulted); every grant must be one of them.
fn parameters(
    params: &[&DocParam],
    grant_names: &[String],
    (at, entry): (&str, &str),
    problems: &mut Vec<String>,
) -> (Vec<Input>, Vec<String>) {
    let mut inputs = Vec::new();
    let mut capabilities = Vec::new();
    for param in params {
        if grant_names.contains(&param.name) {
            if param.default_value.is_some() {
                problems.push(format!("{at}: capability `{}` may not have a default", param.name));
            }
            capabilities.push(param.name.clone());
            continue;
        }
        match input(param, at) {
            Ok(input) => inputs.push(input),
            Err(problem) => problems.push(problem),
        }
    }
    for grant in grant_names {
        if !capabilities.contains(grant) {
            problems.push(format!(
                "{at}: grant `{grant}` is not a parameter of `{entry}`; add it as one (`def {entry}({grant}, ...)`) \
                 or remove the grant from the manifest"
            ));
        }
    }
    (inputs, capabilities)
}

/// The entry's return annotation (`text`), if it names a type; content only as `content`
/// or `list[content]`.
fn return_type(text: &str, at: &str, problems: &mut Vec<String>) -> Option<ArgType> {
    match text {
        "typing.Any" | "Any" => None,
        text => match ArgType::parse(text) {
            Ok(ty)
                if ty.holds_content()
                    && !matches!(&ty, ArgType::Content)
                    && ty != ArgType::List(Box::new(ArgType::Content)) =>
            {
                problems.push(format!(
                    "{at}: return annotation `{text}`: content is returned as `content` or `list[content]`"
                ));
                None
            }
            Ok(ty) => Some(ty),
            Err(e) => {
                problems.push(format!("{at}: return annotation {e}"));
                None
            }
        },
    }
}

fn input(param: &DocParam, at: &str) -> Result<Input, String> {
    let name = &param.name;
    let annotation = param.typ.to_string();
    if annotation == "typing.Any" || annotation == "Any" {
        return Err(format!("{at}: input `{name}` has no type annotation"));
    }
    let ty = ArgType::parse(&annotation).map_err(|e| format!("{at}: input `{name}`: {e}"))?;
    if ty.holds_content() {
        return Err(format!("{at}: input `{name}`: `content` is a return type only"));
    }
    let description = match &param.docs {
        Some(docs) if !docs.summary.trim().is_empty() => first_paragraph(&docs.summary, docs.details.as_deref()),
        _ => return Err(format!("{at}: input `{name}` is not described in the docstring's `Args:` section")),
    };
    let default = match &param.default_value {
        None => None,
        Some(repr) => {
            let value = default_json(repr).map_err(|e| format!("{at}: input `{name}`: default `{repr}` {e}"))?;
            let mut problems = Vec::new();
            let value = ty.check(&value, &format!("default of `{name}`"), &mut problems);
            if !problems.is_empty() {
                let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
                return Err(format!("{at}: input `{name}`: {}", problems.join("; ")));
            }
            Some(value)
        }
    };
    Ok(Input { name: name.clone(), ty, description, default })
}

/// Evaluates a default's Starlark repr and converts it to JSON.
fn default_json(repr: &str) -> Result<Value, String> {
    let ast =
        AstModule::parse("default", format!("value = {repr}"), &dialect()).map_err(|_| "cannot be read".to_string())?;
    let globals = globals();
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        eval.set_max_tick_count(run::LOAD_TICKS_MAX).map_err(|e| e.to_string())?;
        eval.eval_module(ast, &globals).map_err(|_| "cannot be evaluated".to_string())?;
        let value = module.get("value").ok_or("cannot be evaluated")?;
        let text = value.to_json().map_err(|_| "has no JSON form".to_string())?;
        serde_json::from_str(&text).map_err(|_| "has no JSON form".to_string())
    })
}

fn first_paragraph(summary: &str, details: Option<&str>) -> String {
    // Starlark splits the first line off as the summary; a paragraph may run on.
    let mut text = summary.trim().to_string();
    if let Some(details) = details {
        let continuation: Vec<&str> = details.lines().take_while(|l| !l.trim().is_empty()).collect();
        let starts_section = continuation.first().is_some_and(|l| l.trim_end().ends_with(':'));
        if !starts_section && !details.starts_with('\n') && !summary.ends_with('.') {
            for line in continuation {
                text.push(' ');
                text.push_str(line.trim());
            }
        }
    }
    text
}

fn find_def_line(source: &str, entry: &str) -> Option<usize> {
    let needle = format!("def {entry}(");
    source.lines().position(|line| line.trim_start().starts_with(&needle)).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(source: &str) -> Result<Program, String> {
        Program::load(Path::new("tool.star"), source, "main", &["pay".to_string()])
    }

    const GOOD: &str = r#"
def main(pay, order: str, amount: money, note: None | str = None, tags: list[str] = ["a"]) -> dict:
    """Refund part of an order.

    Args:
        order: The order id.
        amount: How much to refund.
        note: A note for the customer.
        tags: Labels.
    """
    return {}
"#;

    #[test]
    fn the_def_is_the_contract() {
        let program = load(GOOD).unwrap();
        assert_eq!(program.description, "Refund part of an order.");
        assert_eq!(program.capabilities, vec!["pay"]);
        let names: Vec<&str> = program.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, vec!["order", "amount", "note", "tags"]);
        let schema = program.input_schema();
        assert_eq!(schema["required"], json!(["order", "amount"]));
        assert_eq!(schema["properties"]["tags"]["default"], json!(["a"]));
        assert_eq!(schema["properties"]["note"]["default"], json!(null));
        assert_eq!(schema["properties"]["order"]["description"], json!("The order id."));
        assert!(schema["properties"].get("pay").is_none(), "a capability is never an input");
        assert_eq!(program.output_schema().unwrap()["properties"]["result"], json!({"type": "object"}));
    }

    #[test]
    fn problems_name_the_file_and_line() {
        let no_doc = "\n\ndef main(x: str) -> str:\n    return x\n";
        let error = Program::load(Path::new("t.star"), no_doc, "main", &[]).unwrap_err();
        assert!(error.contains("t.star:3: `main` has no docstring"), "{error}");

        let undocumented = "def main(x: str, y: int) -> str:\n    \"\"\"Do it.\n\n    Args:\n        x: The x.\n    \"\"\"\n    return x\n";
        let error = Program::load(Path::new("t.star"), undocumented, "main", &[]).unwrap_err();
        assert!(error.contains("t.star:1: input `y` is not described"), "{error}");

        let unannotated =
            "def main(x) -> str:\n    \"\"\"Do it.\n\n    Args:\n        x: The x.\n    \"\"\"\n    return x\n";
        let error = Program::load(Path::new("t.star"), unannotated, "main", &[]).unwrap_err();
        assert!(error.contains("t.star:1: input `x` has no type annotation"), "{error}");

        let unsupported =
            "def main(x: tuple) -> str:\n    \"\"\"Do it.\n\n    Args:\n        x: The x.\n    \"\"\"\n    return x\n";
        let error = Program::load(Path::new("t.star"), unsupported, "main", &[]).unwrap_err();
        assert!(error.contains("t.star:1: input `x`: `tuple` is not a supported input type"), "{error}");

        let error = Program::load(Path::new("t.star"), "def other():\n    pass\n", "main", &[]).unwrap_err();
        assert!(error.contains("the entry `def main(...)` is not defined"), "{error}");

        let error = Program::load(Path::new("t.star"), "def main(:\n", "main", &[]).unwrap_err();
        assert!(error.contains("t.star:1"), "{error}");

        let error = load("def main(order: str) -> str:\n    \"\"\"Do it.\n\n    Args:\n        order: The order.\n    \"\"\"\n    return order\n").unwrap_err();
        assert!(error.contains("grant `pay` is not a parameter of `main`"), "{error}");
    }

    /// A syntax error after an unclosed bracket is found by the parser at the next token it
    /// cannot take, often a line or more later; the message names where the bracket opened.
    #[test]
    fn an_unclosed_bracket_is_named_where_it_opened() {
        let source = "def main(x: str) -> str:\n    y = max(1,\n            \"(\", # )\n    return x\n";
        let error = Program::load(Path::new("t.star"), source, "main", &[]).unwrap_err();
        assert!(error.contains("the `(` opened at line 2, column 12 is never closed"), "{error}");

        let mismatched = "x = [1, 2)\n";
        let error = Program::load(Path::new("t.star"), mismatched, "main", &[]).unwrap_err();
        assert!(error.contains("the `[` opened at line 1, column 5 is closed by `)` at line 1, column 10"), "{error}");

        let balanced = "x = = 1\n";
        let error = Program::load(Path::new("t.star"), balanced, "main", &[]).unwrap_err();
        assert!(!error.contains("opened at"), "{error}");
    }

    #[test]
    fn execution_is_deterministic_and_bounded() {
        let source = "def main(n: int) -> list[int]:\n    \"\"\"Squares.\n\n    Args:\n        n: How many.\n    \"\"\"\n    print(\"n is\", n)\n    return [i * i for i in range(n)]\n";
        let program = Program::load(Path::new("t.star"), source, "main", &[]).unwrap();
        let inputs = program.check_inputs(&serde_json::from_value(json!({"n": 4})).unwrap()).unwrap();
        let first = execute(&program, &inputs, RunLimits { max_steps: 10_000 });
        let second = execute(&program, &inputs, RunLimits { max_steps: 10_000 });
        assert_eq!(first, second);
        assert_eq!(first.outcome, Outcome::Done(json!([0, 1, 4, 9])));
        assert_eq!(first.prints, vec!["n is 4"]);
        let big = program.check_inputs(&serde_json::from_value(json!({"n": 100000})).unwrap()).unwrap();
        let Outcome::Failed(failure) = execute(&program, &big, RunLimits { max_steps: 1000 }).outcome else { panic!() };
        assert_eq!(failure.kind, FailureKind::Budget);
    }

    #[test]
    fn content_is_a_return_type_only() {
        let doc = "    \"\"\"Doc.\n\n    Args:\n        x: The x.\n    \"\"\"\n    return []\n";
        let input = load(&format!("def main(pay, x: content) -> list[content]:\n{doc}")).unwrap_err();
        assert!(input.contains("input `x`: `content` is a return type only"), "{input}");
        let nested = load(&format!("def main(pay, x: str) -> dict[str, content]:\n{doc}")).unwrap_err();
        assert!(nested.contains("content is returned as `content` or `list[content]`"), "{nested}");
        let fine = load(&format!("def main(pay, x: str) -> list[content]:\n{doc}")).unwrap();
        assert!(fine.returns_content() && fine.output_schema().is_none());
    }

    #[test]
    fn only_blocks_the_builtins_made_are_content() {
        let doc = "    \"\"\"Doc.\n\n    Args:\n        x: The x.\n    \"\"\"\n";
        let run = |body: &str| {
            let source = format!("def main(x: str) -> content:\n{doc}    return {body}\n");
            let program = Program::load(Path::new("tool.star"), &source, "main", &[]).unwrap();
            let inputs = serde_json::from_value(json!({"x": "a"})).unwrap();
            execute(&program, &inputs, RunLimits { max_steps: 10_000 }).outcome
        };
        let made = run("mcp.text(x)");
        assert!(matches!(made, Outcome::Done(_)), "{made:?}");
        // Starlark checks the annotation at return: only blocks the builtins made pass (and
        // the result check would refuse an incomplete one besides).
        for bad in [
            "{\"type\": \"text\", \"text\": \"hi\"}",
            "{\"type\": \"text\"}",
            "{\"type\": \"image\", \"data\": \"!!\", \"mimeType\": \"text/html\"}",
            "{\"type\": \"resource_link\", \"uri\": \"a://b\"}",
            "{\"type\": \"video\"}",
        ] {
            assert!(matches!(run(bad), Outcome::Failed(_)), "{bad} was accepted");
        }
    }
}
