//! The manifest's resources and prompts: URI templates, their variables, `complete` lists.

use super::*;

/// Resources: each validated as the tool its reads run as (its name shares the tools' names:
/// it names its journals), with only grants that read, and a URI template.
pub(super) fn resource_configs(
    raw: Vec<RawResource>,
    base: &Path,
    server: &ServerConfig,
    names: &mut BTreeSet<String>,
    problems: &mut Problems,
) -> Vec<ResourceConfig> {
    if raw.len() > TOOLS_MAX {
        problems.add("resources", format!("has {} resources; the limit is {TOOLS_MAX}", raw.len()));
    }
    let mut resources = Vec::new();
    for (index, resource) in raw.into_iter().enumerate() {
        let at = format!("resources[{index}]");
        let (tool, address) = resource.into_tool();
        let ResourceAddress { uri, mime_type, ttl, complete } = address;
        check_complete(&complete, &at, problems);
        if !names.insert(tool.name.clone()) {
            problems.add(&format!("{at}.name"), format!("`{}` is used by an earlier tool or resource", tool.name));
        }
        let config = tool_config(&tool, &at, base, server, problems);
        for (name, grant) in &config.grants {
            let Grant::Capability(grant) = grant else { continue };
            if !crate::manifest::kinds::grant_reads_only(grant) {
                problems.add(
                    &format!("{at}.grants.{name}"),
                    format!("`{}` can write; a resource is read-only, so its grants may only read", grant.cap.name()),
                );
            }
        }
        let variables = uri_variables(&uri).map_err(|e| problems.add(&format!("{at}.uri"), e)).unwrap_or_default();
        if mime_type.trim().is_empty() || !mime_type.contains('/') {
            problems.add(
                &format!("{at}.mime_type"),
                format!("`{mime_type}` is not a MIME type, e.g. \"application/json\""),
            );
        }
        let ttl_ms = ttl.as_ref().and_then(|text| {
            parse_duration_ms(text, DurationUnits::SecondsUp).map_err(|e| problems.add(&format!("{at}.ttl"), e)).ok()
        });
        for name in complete.keys().filter(|name| !variables.contains(name)) {
            problems.add(&format!("{at}.complete.{name}"), "is not a variable of the URI template");
        }
        resources.push(ResourceConfig { tool: config, uri_template: uri, variables, mime_type, ttl_ms, complete });
    }
    resources
}

/// The variables of an RFC 6570 level-1 template (`{name}`, no operators), in order; the
/// template needs a scheme.
pub fn uri_variables(template: &str) -> Result<Vec<String>, String> {
    if template.chars().count() > URI_TEMPLATE_CHARS_MAX {
        return Err(format!("is longer than {URI_TEMPLATE_CHARS_MAX} characters"));
    }
    let scheme_ok = template.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    if !scheme_ok {
        return Err(format!("`{template}` needs a scheme, e.g. \"ticket://{{ticket_id}}\""));
    }
    let mut variables = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(format!("`{template}` has a `}}` without its `{{`"));
        }
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| format!("`{template}` has a `{{` without its `}}`"))?;
        let name = &after[..close];
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`{{{name}}}` is not a variable: write `{{name}}` with letters, digits and _"));
        }
        if variables.iter().any(|v| v == name) {
            return Err(format!("variable `{name}` appears twice"));
        }
        variables.push(name.to_string());
        rest = &after[close + 1..];
    }
    Ok(variables)
}

pub(super) fn prompt_configs(raw: &[RawPrompt], base: &Path, problems: &mut Problems) -> Vec<PromptConfig> {
    if raw.len() > TOOLS_MAX {
        problems.add("prompts", format!("has {} prompts; the limit is {TOOLS_MAX}", raw.len()));
    }
    let mut names = BTreeSet::new();
    let mut prompts = Vec::new();
    for (index, prompt) in raw.iter().enumerate() {
        let at = format!("prompts[{index}]");
        check_tool_name(&prompt.name, &format!("{at}.name"), problems);
        if !names.insert(prompt.name.clone()) {
            problems.add(&format!("{at}.name"), format!("`{}` is used by an earlier prompt", prompt.name));
        }
        let (max_steps, execution_ms) = limits_config(prompt.limits.as_ref(), &at, problems);
        let complete = prompt.complete.clone().unwrap_or_default();
        check_complete(&complete, &at, problems);
        prompts.push(PromptConfig {
            name: prompt.name.clone(),
            title: prompt.title.clone(),
            description: prompt.description.clone(),
            program: base.join(&prompt.program),
            entry: prompt.entry.clone().unwrap_or_else(|| "main".to_string()),
            max_steps,
            execution_ms,
            complete,
        });
    }
    prompts
}

/// `complete`: bounded lists of bounded values.
pub(super) fn check_complete(complete: &BTreeMap<String, Vec<String>>, at: &str, problems: &mut Problems) {
    for (name, values) in complete {
        if values.len() > COMPLETE_VALUES_MAX {
            problems.add(
                &format!("{at}.complete.{name}"),
                format!("has {} values; the limit is {COMPLETE_VALUES_MAX}", values.len()),
            );
        }
        if let Some(long) = values.iter().find(|v| v.chars().count() > COMPLETE_VALUE_CHARS_MAX) {
            problems.add(
                &format!("{at}.complete.{name}"),
                format!("`{long}` is longer than {COMPLETE_VALUE_CHARS_MAX} characters"),
            );
        }
    }
}
