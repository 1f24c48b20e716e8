//! The operator's commands, written against `Env` so the simulator can drive them too.
//! The binary (`main.rs`) only parses arguments and prints what these return.

use std::path::Path;
use std::rc::Rc;

use serde_json::json;

use crate::catalog::{read_manifest, Catalog};
use crate::env::Env;
use crate::protocol::Connection;

/// `warden mcp <manifest>`: load everything, then serve on the protocol stream until EOF.
/// An error here stops the server before it answers anything.
pub async fn serve_mcp(env: &Env, manifest_path: &Path) -> Result<(), String> {
    let catalog = load(env, manifest_path).await?;
    env.log(&format!(
        "serving {} tool(s) from {} as `{}`",
        catalog.tools.len(),
        manifest_path.display(),
        catalog.manifest.server.name
    ));
    let connection = Connection::new(env.clone(), Rc::new(catalog));
    connection.serve().await;
    env.log("stdin closed; exiting");
    Ok(())
}

async fn load(env: &Env, manifest_path: &Path) -> Result<Catalog, String> {
    let manifest = read_manifest(env, manifest_path).await?;
    Catalog::load(env, manifest).await
}

/// `warden check <manifest>`: every problem, or a one-line summary per tool.
pub async fn check(env: &Env, manifest_path: &Path) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let mut report = format!(
        "{}: ok, {} tool(s)\n",
        manifest_path.display(),
        catalog.tools.len()
    );
    for tool in &catalog.tools {
        let inputs: Vec<&str> = tool
            .program
            .inputs
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        report.push_str(&format!(
            "  {} ({}): inputs {}\n",
            tool.config.name,
            tool.program.path.display(),
            inputs.join(", ")
        ));
    }
    Ok(report)
}

/// `warden schema <manifest> [tool]`: the tools as `tools/list` describes them.
pub async fn schema(env: &Env, manifest_path: &Path, tool: Option<&str>) -> Result<String, String> {
    let catalog = load(env, manifest_path).await?;
    let described = match tool {
        None => json!(catalog.list()),
        Some(name) => catalog
            .tool(name)
            .map(|t| t.describe())
            .ok_or_else(|| format!("no tool named `{name}` in the manifest"))?,
    };
    Ok(serde_json::to_string_pretty(&described).expect("JSON values serialise") + "\n")
}
