//! Resources, prompts, progress and log messages through the official Rust SDK (rmcp, pinned
//! as the client harness pins it): in each lifecycle mode it lists resource templates and
//! prompts, reads URI, gets the prompt, sets the log level (2025-11-25) or asks for it per
//! request (2026-07-28), and calls the tool with a progress token.
//!
//!   rmcp-surface URI PROMPT PROMPT_ARGS TOOL TOOL_ARGS -- SERVER_CMD [ARGS...]
//!
//! Prints one JSON document; exit 1 unless every mode read contents, got messages and heard
//! progress and log messages.
#![allow(deprecated)] // logging is deprecated in 2026-07-28 (SEP-2577); 2025-11-25 clients still use it

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context, Result};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, GetPromptRequestParams, Implementation,
    LoggingLevel, LoggingMessageNotificationParam, NumberOrString, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ReadResourceRequestParams, RequestMetaObject, SetLevelRequestParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RoleClient};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{json, Value};

#[derive(Clone, Default)]
struct Heard {
    progress: Arc<Mutex<Vec<Value>>>,
    log: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Heard {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("rmcp-surface", "0.1.0"))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(json!(params.message));
    }

    async fn on_logging_message(&self, params: LoggingMessageNotificationParam, _: NotificationContext<RoleClient>) {
        self.log.lock().unwrap().push(params.data);
    }
}

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut results = Vec::new();
    for mode in ["init", "discover"] {
        results.push(match one_mode(&argv, mode).await {
            Ok(out) => out,
            Err(e) => json!({"mode": mode, "ok": false, "error": format!("{e:#}")}),
        });
    }
    let ok = results.iter().all(|r| r["ok"] == json!(true));
    println!("{}", serde_json::to_string_pretty(&results).unwrap());
    std::process::exit(if ok { 0 } else { 1 });
}

async fn one_mode(argv: &[String], mode: &str) -> Result<Value> {
    let sep = argv.iter().position(|a| a == "--").ok_or_else(|| anyhow!("missing -- SERVER_CMD"))?;
    let [uri, prompt, prompt_args, tool, tool_args] = &argv[..sep] else {
        return Err(anyhow!("usage: URI PROMPT PROMPT_ARGS TOOL TOOL_ARGS -- SERVER_CMD [ARGS...]"));
    };
    let cmd = &argv[sep + 1..];
    let mut command = tokio::process::Command::new(cmd.first().context("a server command")?);
    command.args(&cmd[1..]);
    let transport = TokioChildProcess::new(command)?;
    let heard = Heard::default();
    let client = match mode {
        "init" => heard.clone().serve(transport).await?,
        _ => {
            let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
            heard.clone().serve_with_lifecycle(transport, lifecycle).await?
        }
    };
    let templates = client.list_resource_templates(Default::default()).await?;
    let read = client.read_resource(ReadResourceRequestParams::new(uri.as_str())).await?;
    let prompts = client.list_prompts(Default::default()).await?;
    let arguments = serde_json::from_str::<Value>(prompt_args)?.as_object().cloned().unwrap_or_default();
    let got = client.get_prompt(GetPromptRequestParams::new(prompt.as_str()).with_arguments(arguments)).await?;
    let mut meta = RequestMetaObject::with_progress_token(ProgressToken(NumberOrString::String("rmcp-1".into())));
    if mode == "init" {
        client.set_level(SetLevelRequestParams::new(LoggingLevel::Debug)).await?;
    } else {
        meta.0.insert("io.modelcontextprotocol/logLevel".into(), json!("debug"));
    }
    let arguments = serde_json::from_str::<Value>(tool_args)?.as_object().cloned().unwrap_or_default();
    let mut call = CallToolRequestParams::new(tool.clone()).with_arguments(arguments);
    call.meta = Some(meta);
    let result = client.call_tool(call).await?;
    // Notifications may trail the answer by a moment.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    client.cancel().await?;
    let progress = heard.progress.lock().unwrap().clone();
    let log = heard.log.lock().unwrap().clone();
    let read = serde_json::to_value(&read)?;
    let got = serde_json::to_value(&got)?;
    let ok = read["contents"].as_array().is_some_and(|c| !c.is_empty())
        && got["messages"].as_array().is_some_and(|m| !m.is_empty())
        && !progress.is_empty()
        && !log.is_empty()
        && result.is_error != Some(true);
    Ok(json!({
        "mode": mode,
        "templates": serde_json::to_value(&templates)?["resourceTemplates"],
        "prompts": serde_json::to_value(&prompts)?["prompts"].as_array().map(|p| p.len()),
        "read": read["contents"],
        "messages": got["messages"],
        "progress": progress,
        "log": log,
        "ok": ok,
    }))
}
