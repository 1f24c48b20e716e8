//! A local model provider on 127.0.0.1 speaking the Anthropic messages API and the OpenAI chat
//! completions API. What it does follows the last message's text: `busy` is answered 429 once
//! (with `retry-after: 0`) then answered; `broken` is always a 500; `slow` answers after two
//! seconds; `no usage` is answered without usage; `html`, `no text` and `huge` are answered
//! 200 with a proxy's error page, JSON without the completion, and a body over the model
//! response limit; `leaky` is a 400 quoting the API key it was sent past the first 260
//! characters; anything else is answered at once with `echo: <text>`. It records every request.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{json, Value};

#[derive(Clone, Debug)]
pub struct Asked {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

pub struct Provider {
    pub port: u16,
    pub asked: Arc<Mutex<Vec<Asked>>>,
}

impl Provider {
    pub fn start() -> Provider {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&asked);
        let port = super::loopback::listen(move |stream| serve(stream, &shared));
        Provider { port, asked }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many requests asked about `text`.
    pub fn count(&self, text: &str) -> usize {
        self.asked.lock().unwrap().iter().filter(|a| last_text(&a.body) == text).count()
    }
}

fn last_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    messages.last().and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

fn serve(stream: TcpStream, asked: &Mutex<Vec<Asked>>) {
    let Some(request) = super::loopback::read_request(&stream) else { return };
    let (path, headers, body) = (request.path, request.headers, request.body);
    let key = headers.get("x-api-key").cloned().or_else(|| headers.get("authorization").cloned()).unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = last_text(&body);
    let earlier = {
        let mut asked = asked.lock().unwrap();
        let earlier = asked.iter().filter(|a| last_text(&a.body) == text).count();
        asked.push(Asked { path: path.clone(), headers, body });
        earlier
    };
    let raw = |status: u16, body: String| (status, "", Value::String(body));
    let (status, extra, answer) = match text.as_str() {
        "html" => raw(200, "<html><body>502 Bad Gateway</body></html>".into()),
        "no text" => (200, "", json!({"id": "msg_1", "usage": {"input_tokens": 7, "output_tokens": 3}})),
        "huge" => raw(200, format!("{{\"pad\":\"{}\"}}", "x".repeat(4 * 1024 * 1024 + 10))),
        "leaky" => raw(400, format!("{} invalid key {key}", "x".repeat(260))),
        "busy" if earlier == 0 => (429, "retry-after: 0\r\n", json!({"error": {"message": "rate limited"}})),
        "broken" => (500, "", json!({"error": {"message": "overloaded"}})),
        _ => {
            if text == "slow" {
                thread::sleep(std::time::Duration::from_secs(2));
            }
            let reply = format!("echo: {text}");
            let answer = match path.as_str() {
                "/v1/messages" if text == "no usage" => json!({"content": [{"type": "text", "text": reply}]}),
                "/v1/messages" => {
                    json!({"content": [{"type": "text", "text": reply}], "usage": {"input_tokens": 7, "output_tokens": 3}})
                }
                _ => {
                    json!({"choices": [{"message": {"role": "assistant", "content": reply}}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
                }
            };
            (200, "", answer)
        }
    };
    let text = match answer {
        Value::String(raw) => raw,
        json => json.to_string(),
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
}
