//! An operator's own input schema (`input_schema`: a JSON Schema 2020-12 file): what the
//! program's signature cannot say (`$defs`, `allOf`/`anyOf`, `if`/`then`/`else`, closed
//! objects). Read and compiled at start, and held to the signature: its properties are the
//! program's parameters and it requires every parameter without a default. It is listed as
//! the tool's `inputSchema` as written, and a call's arguments must pass it after the
//! program's own check: the schema a client is shown is one the server enforces.

use serde_json::Value;

use crate::env::Env;
use crate::manifest::ToolConfig;
use crate::program::{InputProblem, Program};

/// The largest schema file read.
pub const SCHEMA_BYTES_MAX: usize = 64 * 1024;
/// The longest problem message kept from the validator (it may quote a value).
const PROBLEM_CHARS_MAX: usize = 200;

/// A schema as written and as compiled.
pub struct OperatorSchema {
    pub value: Value,
    validator: jsonschema::Validator,
}

impl OperatorSchema {
    /// Reads, compiles and checks `config`'s schema against `program`; `at` names the tool.
    pub async fn load(env: &Env, config: &ToolConfig, program: &Program, at: &str) -> Result<Option<Self>, String> {
        let Some(path) = &config.input_schema else { return Ok(None) };
        let file = path.display();
        let bytes = env.disk.read(path).await.map_err(|e| format!("{at}: input_schema {file}: cannot read it: {e}"))?;
        if bytes.len() > SCHEMA_BYTES_MAX {
            return Err(format!("{at}: input_schema {file}: {} bytes; at most {SCHEMA_BYTES_MAX}", bytes.len()));
        }
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("{at}: input_schema {file}: not JSON: {e}"))?;
        if crate::base::json::depth(&value) > crate::limits::VALUE_DEPTH_MAX {
            return Err(format!("{at}: input_schema {file}: nests deeper than {}", crate::limits::VALUE_DEPTH_MAX));
        }
        if value.get("type") != Some(&Value::String("object".into())) {
            return Err(format!("{at}: input_schema {file}: must be an object schema (\"type\": \"object\")"));
        }
        let validator = jsonschema::draft202012::new(&value)
            .map_err(|e| format!("{at}: input_schema {file}: not a JSON Schema 2020-12: {e}"))?;
        agrees_with_signature(&value, program).map_err(|why| format!("{at}: input_schema {file}: {why}"))?;
        Ok(Some(OperatorSchema { value, validator }))
    }

    /// Every way `arguments` fails the schema (each with its JSON path), the first few.
    pub fn problems(&self, arguments: &Value) -> Vec<InputProblem> {
        (self.validator.iter_errors(arguments))
            .take(crate::program::INPUT_PROBLEMS_MAX)
            .map(|error| {
                let pointer = error.instance_path.to_string();
                let path = format!("${}", pointer.replace('/', "."));
                let problem: String = error.to_string().chars().take(PROBLEM_CHARS_MAX).collect();
                InputProblem::new(path, problem)
            })
            .collect()
    }
}

/// The schema's properties are the program's parameters, and it requires each parameter the
/// program has no default for.
fn agrees_with_signature(schema: &Value, program: &Program) -> Result<(), String> {
    let parameters: Vec<&str> = program.inputs.iter().map(|input| input.name.as_str()).collect();
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in properties.into_iter().flat_map(|properties| properties.keys()) {
        if !parameters.contains(&name.as_str()) {
            return Err(format!("property `{name}` is not a parameter of the program ({})", parameters.join(", ")));
        }
    }
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    for input in program.inputs.iter().filter(|input| input.default.is_none()) {
        if !required.contains(&input.name.as_str()) {
            return Err(format!("the program requires `{}`, which the schema does not", input.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A schema whose properties are not the program's parameters, or that leaves out one
    /// the program requires, is refused: a client shown it would send what the program refuses.
    #[test]
    fn a_schema_must_agree_with_the_signature() {
        let source = "def main(name: str, note: None | str = None) -> str:\n    \"\"\"Echo.\n\n    Args:\n        name: a name\n        note: a note\n    \"\"\"\n    return name\n";
        let program = Program::load(std::path::Path::new("t.star"), source, "main", &[]).expect("a program");
        let agrees = |schema: Value| agrees_with_signature(&schema, &program);
        assert!(
            agrees(json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})).is_ok()
        );
        let stranger = agrees(json!({"type": "object", "properties": {"age": {}}, "required": ["name"]}));
        assert!(stranger.is_err_and(|why| why.contains("`age` is not a parameter")));
        let loose = agrees(json!({"type": "object", "properties": {"name": {}}}));
        assert!(loose.is_err_and(|why| why.contains("requires `name`")));
    }
}
