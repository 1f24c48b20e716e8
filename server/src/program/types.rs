//! The input types a program's entry `def` may declare, their JSON Schema, and Warden's own
//! input check (seed 000 section 5 step 2: the schema informs, the check decides).
//!
//! The check reports every bad input at once, each with its JSON path, and returns the
//! inputs normalised (defaults filled in, money written canonically), which is the form
//! `once` keys and journals use.

use serde_json::{json, Map, Value};

use crate::base::money::{self, Money};

/// The deepest type nesting accepted in an annotation (`list[list[...]]`).
pub const TYPE_DEPTH_MAX: usize = 8;
/// The most input problems listed in one result; the rest are counted.
pub const INPUT_PROBLEMS_MAX: usize = 50;

/// One bad argument: where (a JSON path from `$`, the arguments object) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputProblem {
    pub path: String,
    pub problem: String,
}

impl InputProblem {
    pub fn new(path: String, problem: String) -> InputProblem {
        InputProblem { path, problem }
    }
}

impl std::fmt::Display for InputProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgType {
    Str,
    Int,
    Float,
    Bool,
    Money,
    /// A content block made by the `mcp` builtins (a return type only).
    Content,
    /// Any JSON value (only as the element of a bare `list` or `dict`).
    Any,
    List(Box<ArgType>),
    Dict(Box<ArgType>),
    Optional(Box<ArgType>),
}

impl ArgType {
    /// Parses a Starlark type annotation as `Ty` displays it, e.g. `None | list[str]`.
    pub fn parse(text: &str) -> Result<ArgType, String> {
        parse_type(text.trim(), 0)
    }

    pub fn schema(&self) -> Value {
        match self {
            ArgType::Str => json!({"type": "string"}),
            ArgType::Int => json!({"type": "integer"}),
            ArgType::Float => json!({"type": "number"}),
            ArgType::Bool => json!({"type": "boolean"}),
            ArgType::Money => json!({
                "type": "object",
                "properties": {
                    "amount": {"type": "string", "pattern": money::AMOUNT_PATTERN},
                    "currency": {"type": "string", "pattern": money::CURRENCY_PATTERN}
                },
                "required": ["amount", "currency"],
                "additionalProperties": false
            }),
            ArgType::Any => json!({}),
            ArgType::Content => json!({"type": "object", "required": ["type"]}),
            ArgType::List(item) if **item == ArgType::Any => json!({"type": "array"}),
            ArgType::List(item) => json!({"type": "array", "items": item.schema()}),
            ArgType::Dict(value) if **value == ArgType::Any => json!({"type": "object"}),
            ArgType::Dict(value) => {
                json!({"type": "object", "additionalProperties": value.schema()})
            }
            ArgType::Optional(inner) => json!({"anyOf": [inner.schema(), {"type": "null"}]}),
        }
    }

    /// Whether a value of this type holds content blocks (only valid as a return type).
    pub fn holds_content(&self) -> bool {
        match self {
            ArgType::Content => true,
            ArgType::List(item) | ArgType::Dict(item) | ArgType::Optional(item) => item.holds_content(),
            _ => false,
        }
    }

    /// Checks `value` at `path`, pushing every problem; returns the normalised value.
    pub fn check(&self, value: &Value, path: &str, problems: &mut Vec<InputProblem>) -> Value {
        let mut wrong = |expected: &str| {
            problems.push(InputProblem::new(path.to_string(), format!("expected {expected}, got {}", describe(value))));
            Value::Null
        };
        match (self, value) {
            (ArgType::Any, _) => value.clone(),
            (ArgType::Optional(_), Value::Null) => Value::Null,
            (ArgType::Optional(inner), _) => inner.check(value, path, problems),
            (ArgType::Str, Value::String(_)) => value.clone(),
            (ArgType::Str, _) => wrong("a string"),
            (ArgType::Int, Value::Number(n)) if n.is_i64() => value.clone(),
            (ArgType::Int, _) => wrong("an integer"),
            (ArgType::Float, Value::Number(n)) => match n.as_f64().and_then(serde_json::Number::from_f64) {
                Some(float) => Value::Number(float),
                None => wrong("a finite number"),
            },
            (ArgType::Float, _) => wrong("a number"),
            (ArgType::Bool, Value::Bool(_)) => value.clone(),
            (ArgType::Bool, _) => wrong("true or false"),
            (ArgType::Money, Value::Object(object)) => check_money(object, path, problems),
            (ArgType::Money, _) => wrong("money, e.g. {\"amount\": \"35.00\", \"currency\": \"USD\"}"),
            (ArgType::Content, Value::Object(block)) if super::content::is_block(block) => value.clone(),
            (ArgType::Content, _) => {
                wrong("a content block made by mcp.text, mcp.image, mcp.audio, mcp.resource_link or mcp.resource")
            }
            (ArgType::List(item), Value::Array(items)) => Value::Array(
                items.iter().enumerate().map(|(i, v)| item.check(v, &format!("{path}[{i}]"), problems)).collect(),
            ),
            (ArgType::List(_), _) => wrong("an array"),
            (ArgType::Dict(item), Value::Object(object)) => Value::Object(
                object.iter().map(|(k, v)| (k.clone(), item.check(v, &format!("{path}.{k}"), problems))).collect(),
            ),
            (ArgType::Dict(_), _) => wrong("an object"),
        }
    }
}

fn check_money(object: &Map<String, Value>, path: &str, problems: &mut Vec<InputProblem>) -> Value {
    let before = problems.len();
    for key in object.keys() {
        if key != "amount" && key != "currency" {
            problems.push(InputProblem::new(
                format!("{path}.{key}"),
                "is not a field of money (only amount and currency)".to_string(),
            ));
        }
    }
    let field = |name: &str, problems: &mut Vec<InputProblem>| match object.get(name) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            problems.push(InputProblem::new(
                format!("{path}.{name}"),
                format!("expected a string, got {}", describe(other)),
            ));
            None
        }
        None => {
            problems.push(InputProblem::new(format!("{path}.{name}"), "is required".to_string()));
            None
        }
    };
    let amount = field("amount", problems);
    let currency = field("currency", problems);
    if problems.len() > before {
        return Value::Null;
    }
    let (amount, currency) = (amount.expect("checked"), currency.expect("checked"));
    let mut parsed = None;
    // An unknown currency still has its amount's form checked, so every problem is told.
    let exponent = money::check_currency(&currency);
    match money::parse_amount(&amount, &currency, *exponent.as_ref().unwrap_or(&money::MONEY_SCALE_MAX)) {
        Ok(minor) => parsed = Some(minor),
        Err(e) => problems.push(InputProblem::new(format!("{path}.amount"), e.to_string())),
    }
    if let Err(e) = exponent {
        problems.push(InputProblem::new(format!("{path}.currency"), e.to_string()));
    }
    match parsed {
        Some(minor) if problems.len() == before => Money { minor, currency }.to_json(),
        _ => Value::Null,
    }
}

/// A short description of a JSON value for error messages. Never echoes a long value.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a string".to_string(),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

fn parse_type(text: &str, depth: usize) -> Result<ArgType, String> {
    if depth > TYPE_DEPTH_MAX {
        return Err(format!("type nests deeper than {TYPE_DEPTH_MAX} levels"));
    }
    if let Some(parts) = split_union(text) {
        let (none, other): (Vec<&str>, Vec<&str>) = parts.into_iter().partition(|p| *p == "None");
        return match (none.len(), other.as_slice()) {
            (1, [one]) => Ok(ArgType::Optional(Box::new(parse_type(one, depth + 1)?))),
            _ => Err(format!("`{text}`: only `None | T` unions are supported")),
        };
    }
    let unsupported = || {
        Err(format!(
            "`{text}` is not a supported input type (str, int, float, bool, money, list[T], dict[str, T], None | T)"
        ))
    };
    match text {
        "str" => Ok(ArgType::Str),
        "int" => Ok(ArgType::Int),
        "float" => Ok(ArgType::Float),
        "bool" => Ok(ArgType::Bool),
        "money" => Ok(ArgType::Money),
        "content" => Ok(ArgType::Content),
        "list" => Ok(ArgType::List(Box::new(ArgType::Any))),
        "dict" => Ok(ArgType::Dict(Box::new(ArgType::Any))),
        _ => {
            if let Some(inner) = text.strip_prefix("list[").and_then(|t| t.strip_suffix(']')) {
                return Ok(ArgType::List(Box::new(parse_type(inner.trim(), depth + 1)?)));
            }
            if let Some(inner) = text.strip_prefix("dict[").and_then(|t| t.strip_suffix(']')) {
                let Some((key, value)) = split_top_level(inner, ',') else {
                    return unsupported();
                };
                if key.trim() != "str" {
                    return Err(format!("`{text}`: dict keys must be str"));
                }
                return Ok(ArgType::Dict(Box::new(parse_type(value.trim(), depth + 1)?)));
            }
            unsupported()
        }
    }
}

/// Splits `a | b | c` at top-level bars; `None` when there is no top-level bar.
fn split_union(text: &str) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            '|' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        return None;
    }
    parts.push(text[start..].trim());
    Some(parts)
}

fn split_top_level(text: &str, separator: char) -> Option<(&str, &str)> {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if c == separator && depth == 0 => return Some((&text[..i], &text[i + 1..])),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_supported_annotations() {
        assert_eq!(
            ArgType::parse("None | list[str]"),
            Ok(ArgType::Optional(Box::new(ArgType::List(Box::new(ArgType::Str)))))
        );
        assert_eq!(ArgType::parse("dict[str, int]"), Ok(ArgType::Dict(Box::new(ArgType::Int))));
        assert_eq!(ArgType::parse("int | None"), Ok(ArgType::Optional(Box::new(ArgType::Int))));
        assert!(ArgType::parse("tuple").is_err());
        assert!(ArgType::parse("dict[int, str]").is_err());
        assert!(ArgType::parse("int | str").is_err());
        assert!(ArgType::parse("typing.Any").is_err());
    }

    #[test]
    fn check_reports_every_problem_with_its_path() {
        let ty = ArgType::List(Box::new(ArgType::Money));
        let mut problems = Vec::new();
        ty.check(&json!([{"amount": "1.23456", "currency": "usd"}, 3, {"amount": "2"}]), "$.refunds", &mut problems);
        assert_eq!(problems.len(), 4, "{problems:?}");
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert!(problems[0].starts_with("$.refunds[0].amount"));
        assert!(problems[1].starts_with("$.refunds[0].currency"));
        assert!(problems[2].starts_with("$.refunds[1]: expected money"));
        assert!(problems[3].starts_with("$.refunds[2].currency: is required"));
    }

    #[test]
    fn money_is_normalised() {
        let mut problems = Vec::new();
        let value = ArgType::Money.check(&json!({"amount": "35", "currency": "USD"}), "$.a", &mut problems);
        assert!(problems.is_empty());
        assert_eq!(value, json!({"amount": "35.00", "currency": "USD"}));
    }
}
