//! `warden serve-http` as an OAuth 2.1 resource server, the real binary: the test plays the
//! issuer (a P-256 key of its own, its JWKS in a file) and signs access tokens for several
//! principals. Refused tokens get a 401 pointing at the resource metadata; each principal's
//! quota and `once` keys are its own; a tool's scopes are required; the ledger and the journal
//! record whom each run is for.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "http://warden.test/mcp";

const NOTE: &str = r#"
def main(text: str) -> str:
    """Keep a note.

    Args:
        text: The note.
    """
    return text
"#;

/// An issuer's signing key and its public JWK.
struct Issuer {
    key: EncodingKey,
    jwk: Value,
}

impl Issuer {
    fn new(kid: &str) -> Issuer {
        let random = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &random).unwrap();
        let point = pair.public_key().as_ref();
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let jwk = json!({"kty": "EC", "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..65]),
                         "kid": kid, "alg": "ES256", "use": "sig"});
        Issuer { key: EncodingKey::from_ec_der(pkcs8.as_ref()), jwk }
    }

    fn token(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = self.jwk["kid"].as_str().map(str::to_string);
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

fn claims(subject: &str, scope: &str) -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "exp": now_s() + 600, "scope": scope})
}

struct Server {
    dir: tempfile::TempDir,
    child: Child,
    address: std::net::SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(issuer: &Issuer) -> Server {
    start_with_keys(issuer, None)
}

/// Keys from the JWKS file, or from `url` when given.
fn start_with_keys(issuer: &Issuer, url: Option<&str>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("note.star"), NOTE).unwrap();
    let record = "def main(id: str) -> str:\n    \"\"\"A record.\n\n    Args:\n        id: Which.\n    \"\"\"\n    return \"record \" + id\n";
    std::fs::write(dir.path().join("record.star"), record).unwrap();
    let confirm = "def main(text: str) -> str:\n    \"\"\"Save a note once its user confirms.\n\n    Args:\n        text: The note.\n    \"\"\"\n    answers = ask({\"ok\": {\"method\": \"elicitation/create\", \"params\": {\"message\": \"Save \" + text + \"?\", \"requestedSchema\": {\"type\": \"object\", \"properties\": {}}}}})\n    return answers.get(\"ok\", {}).get(\"action\", \"none\")\n";
    std::fs::write(dir.path().join("confirm.star"), confirm).unwrap();
    let manifest = json!({
        "server": {"name": "oauth-test", "journals": "journals"},
        "tools": [
            {"name": "note", "program": "note.star", "quota": {"window": "1h", "calls": 2, "per": "principal"}},
            {"name": "keyed_note", "program": "note.star", "once": {"by": ["text"], "per": "principal"}},
            {"name": "admin_note", "program": "note.star", "scopes": ["notes:admin"]},
            {"name": "confirm_note", "program": "confirm.star"}
        ],
        "resources": [
            {"name": "record", "uri": "rec://{id}", "mime_type": "text/plain", "program": "record.star", "scopes": ["notes:admin"]}
        ]
    });
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    // A key this server cannot use (another curve, a symmetric key) is left out, not fatal.
    let unusable = [
        json!({"kty": "EC", "crv": "P-521", "alg": "ES512", "kid": "other", "x": "AA", "y": "AA"}),
        json!({"kty": "oct", "k": "c2VjcmV0", "kid": "sym"}),
    ];
    let keys = json!({"keys": [unusable[0], issuer.jwk, unusable[1]]});
    std::fs::write(dir.path().join("jwks.json"), keys.to_string()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_warden"));
    command.arg("serve-http").arg(dir.path().join("manifest.json")).args([
        "--listen",
        "127.0.0.1:0",
        "--oauth-issuer",
        ISSUER,
        "--oauth-audience",
        AUDIENCE,
    ]);
    match url {
        Some(url) => command.args(["--oauth-jwks-url", url]),
        None => command.arg("--oauth-jwks-file").arg(dir.path().join("jwks.json")),
    };
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines.next().expect("the server logs where it listens").unwrap();
        if let Some(rest) = line.split_once("warden: listening on http://").map(|(_, rest)| rest) {
            break rest.strip_suffix("/mcp").unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    Server { dir, child, address }
}

/// One request: (status, the WWW-Authenticate header, body).
fn send(server: &Server, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> (u16, String, String) {
    let mut stream = TcpStream::connect(server.address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        server.address,
        body.len()
    );
    if let Some(token) = token {
        request.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    if let Ok(message) = serde_json::from_str::<Value>(&body) {
        if let Some(method) = message["method"].as_str() {
            request.push_str(&format!("mcp-method: {method}\r\n"));
        }
        let name = message.pointer("/params/name").or_else(|| message.pointer("/params/uri"));
        if let Some(name) = name.and_then(Value::as_str) {
            request.push_str(&format!("mcp-name: {name}\r\n"));
        }
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let challenge = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase().starts_with("www-authenticate:").then(|| line[17..].trim().to_string())
        })
        .unwrap_or_default();
    (status, challenge, body.to_string())
}

fn call(server: &Server, token: &str, tool: &str, text: &str) -> Value {
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": {"text": text},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (status, _, body) = send(server, "POST", "/mcp", Some(token), Some(&message));
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    common::assert_valid(&answer, common::Era::Modern, Some("tools/call"));
    answer["result"].clone()
}

#[test]
fn refused_tokens_get_a_401_that_points_at_the_metadata() {
    let issuer = Issuer::new("k1");
    let server = start(&issuer);
    let (status, _, body) = send(&server, "GET", "/.well-known/oauth-protected-resource/mcp", None, None);
    assert_eq!(status, 200);
    // The metrics name every principal with a quota of its own: no principal reads them.
    let (status, _, body_of_metrics) =
        send(&server, "GET", "/metrics", Some(&issuer.token(&claims("alice", ""))), None);
    assert_eq!(status, 404, "{body_of_metrics}");
    assert!(body_of_metrics.contains("--metrics-listen"), "{body_of_metrics}");
    let metadata: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (metadata["resource"].clone(), metadata["authorization_servers"].clone()),
        (json!(AUDIENCE), json!([ISSUER]))
    );

    let stranger = Issuer::new("k1"); // the same key id, another key
    let mut expired = claims("alice", "");
    expired["exp"] = json!(now_s() - 3600);
    let mut elsewhere = claims("alice", "");
    elsewhere["aud"] = json!("http://other.test/mcp");
    let mut impostor = claims("alice", "");
    impostor["iss"] = json!("https://impostor.test");
    let hmac = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims("alice", ""),
        &EncodingKey::from_secret(issuer.jwk.to_string().as_bytes()),
    )
    .unwrap();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    for (token, why) in [
        (None, "required"),
        (Some(issuer.token(&expired)), "expired"),
        (Some(issuer.token(&elsewhere)), "another audience"),
        (Some(issuer.token(&impostor)), "another issuer"),
        (Some(stranger.token(&claims("alice", ""))), "signature"),
        (Some(hmac), "public-key"),
        (Some("not.a.jwt".to_string()), "not a JWT"),
        (Some(issuer.token(&claims("x): in progress\u{2028}  note (for root", ""))), "formatting character"),
    ] {
        let (status, challenge, body) = send(&server, "POST", "/mcp", token.as_deref(), Some(&list));
        assert_eq!(status, 401, "{why}: {body}");
        assert!(body.contains(why), "{why}: {body}");
        assert!(
            challenge.contains("resource_metadata=\"http://warden.test/.well-known/oauth-protected-resource/mcp\""),
            "{challenge}"
        );
        if let Some(token) = &token {
            assert!(!body.contains(token.as_str()) && !challenge.contains(token.as_str()), "the token is repeated");
        }
    }
    let (status, _, body) = send(&server, "POST", "/mcp", Some(&issuer.token(&claims("alice", ""))), Some(&list));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn each_principal_has_its_own_quota_once_keys_and_scopes() {
    let issuer = Issuer::new("k1");
    let server = start(&issuer);
    let alice = issuer.token(&claims("alice", "notes:read"));
    let bob = issuer.token(&claims("bob", "notes:read"));
    let admin = issuer.token(&claims("carol", "notes:read notes:admin"));

    // A quota of 2 calls an hour, per principal: Alice's third is refused, Bob's first is not.
    assert_eq!(call(&server, &alice, "note", "one")["isError"], json!(false));
    assert_eq!(call(&server, &alice, "note", "two")["isError"], json!(false));
    let third = call(&server, &alice, "note", "three");
    assert_eq!(third["isError"], json!(true), "{third}");
    assert!(third.to_string().contains("over the quota"), "{third}");
    assert_eq!(call(&server, &bob, "note", "one")["isError"], json!(false), "Bob's quota is his own");
    // Issue 23 item 15: `warden mcp status` shows each principal's use against the quota each
    // has, never their sum against one principal's quota ("3 of 2 calls").
    let report = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "status"])
        .arg(server.dir.path().join("manifest.json"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(report.contains("note for alice: 2 of 2 calls"), "{report}");
    assert!(report.contains("note for bob: 1 of 2 calls"), "{report}");
    assert!(!report.contains("3 of 2"), "{report}");

    // `once` keys per principal: Alice's repeat is her first run; Bob's same key is his own run.
    for token in [&alice, &alice, &bob] {
        assert_eq!(call(&server, token, "keyed_note", "same")["isError"], json!(false));
    }
    let ledger = std::fs::read_to_string(server.dir.path().join("journals/server.ledger")).unwrap();
    let keyed: Vec<&str> =
        ledger.lines().filter(|line| line.contains("keyed_note") && line.contains("\"reserve\"")).collect();
    assert_eq!(keyed.len(), 2, "one run for Alice's key, one for Bob's: {keyed:?}");
    assert!(keyed[0].contains("\"principal\":\"alice\"") && keyed[1].contains("\"principal\":\"bob\""), "{keyed:?}");

    // Scopes: only a principal granted `notes:admin` may call `admin_note`.
    // Without it, 403 and the scope wanted, so the client can ask for it (step-up).
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "admin_note", "arguments": {"text": "x"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (status, challenge, body) = send(&server, "POST", "/mcp", Some(&alice), Some(&message));
    assert_eq!(status, 403, "{body}");
    assert_eq!(challenge, "Bearer error=\"insufficient_scope\", scope=\"notes:admin\"");
    assert_eq!(call(&server, &admin, "admin_note", "x")["isError"], json!(false));

    // A resource's scopes too.
    let read = |token: &str| {
        let message = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": "rec://7",
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
        let (_, _, body) = send(&server, "POST", "/mcp", Some(token), Some(&message));
        serde_json::from_str::<Value>(&body).unwrap()
    };
    assert!(read(&alice)["error"].to_string().contains("notes:admin"), "{}", read(&alice));
    assert_eq!(read(&admin)["result"]["contents"][0]["text"], json!("record 7"));

    // The journal's header records whom the run is for.
    let headers: Vec<String> = common::walk(&server.dir.path().join("journals/admin_note"))
        .into_iter()
        .filter(|path| path.extension().is_some_and(|e| e == "journal"))
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    assert_eq!(headers.len(), 1, "the refused call started no run");
    assert!(headers[0].lines().next().unwrap().contains("\"principal\":\"carol\""), "{}", headers[0]);

    // A run's status is its principal's alone: to another, the run does not exist.
    let ledger = std::fs::read_to_string(server.dir.path().join("journals/server.ledger")).unwrap();
    let carols = ledger.lines().find(|line| line.contains("admin_note") && line.contains("\"reserve\"")).unwrap();
    let run = carols.split("\"run\":\"").nth(1).unwrap()[..32].to_string();
    let status = |token: &str| {
        let message = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "warden_run_status",
            "arguments": {"run": run}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
        send(&server, "POST", "/mcp", Some(token), Some(&message)).2
    };
    assert!(status(&admin).contains("\"status\":\"done\""), "{}", status(&admin));
    assert!(status(&bob).contains("\"status\":\"unknown\""), "{}", status(&bob));
    assert!(!status(&bob).contains("\"x\""), "Carol's result is not shown to Bob");

    // `warden mcp status` names whom an unfinished run is for.
    let unfinished = warden::store::ledger::Event::Reserve {
        run: "dd000000000000000000000000000000".into(),
        tool: "note".into(),
        at_ms: now_s() * 1000,
        calls: 1,
        money: vec![],
        once: None,
        principal: Some("dave".into()),
        tokens: 0,
    };
    let mut ledger =
        std::fs::OpenOptions::new().append(true).open(server.dir.path().join("journals/server.ledger")).unwrap();
    ledger.write_all(&warden::store::record::encode(&unfinished)).unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "status"])
        .arg(server.dir.path().join("manifest.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("note dd000000000000000000000000000000 (for dave), reserved "), "{text}");
    // Each principal's use against the quota each has (issue 23 item 15; their sum was shown).
    for expected in ["note for alice: 2 of 2 calls", "note for bob: 1 of 2 calls", "note for dave: 1 of 2 calls"] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
}

/// The issuer's keys fetched from a URL (a loopback server standing in for the issuer).
/// A `requestState` is bound to the principal whose call was asked: another principal's
/// retry with it is refused (HTTP 400, -32602) and takes nothing; the asker's goes on.
#[test]
fn a_request_state_serves_only_the_principal_it_was_issued_to() {
    let issuer = Issuer::new("k1");
    let server = start(&issuer);
    let alice = issuer.token(&claims("alice", "notes:read"));
    let bob = issuer.token(&claims("bob", "notes:read"));
    let message = |id: i64, extra: Value| {
        let mut params = json!({"name": "confirm_note", "arguments": {"text": "hi"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
        for (key, value) in extra.as_object().unwrap() {
            params[key] = value.clone();
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    let (status, _, body) = send(&server, "POST", "/mcp", Some(&alice), Some(&message(1, json!({}))));
    let asked: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, asked["result"]["resultType"].clone()), (200, json!("input_required")), "{body}");
    let retry =
        json!({"requestState": asked["result"]["requestState"], "inputResponses": {"ok": {"action": "accept"}}});
    let (status, _, body) = send(&server, "POST", "/mcp", Some(&bob), Some(&message(2, retry.clone())));
    assert_eq!(status, 400, "{body}");
    let refused: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refused["error"]["code"], json!(-32602), "{body}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("another caller"), "{body}");
    // Issue 23 item 8: with the key read off the disk, bob re-seals alice's state as his own;
    // the ledger says the run is alice's, so it is refused all the same.
    let hex = std::fs::read_to_string(server.dir.path().join("journals/request-state.key")).unwrap();
    let hex = hex.trim();
    let key: Vec<u8> = (0..hex.len()).step_by(2).map(|at| u8::from_str_radix(&hex[at..at + 2], 16).unwrap()).collect();
    let inputs = warden::run::input::Inputs::default();
    inputs.set_key(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key));
    let mut claims = inputs.open(asked["result"]["requestState"].as_str().unwrap()).unwrap();
    claims.principal = Some("bob".into());
    let forged = json!({"requestState": inputs.seal(&claims), "inputResponses": {"ok": {"action": "accept"}}});
    let (status, _, body) = send(&server, "POST", "/mcp", Some(&bob), Some(&message(4, forged)));
    assert_eq!(status, 400, "a re-sealed state took another principal's run: {body}");
    let (status, _, body) = send(&server, "POST", "/mcp", Some(&alice), Some(&message(3, retry)));
    let done: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((status, done["result"]["content"][0]["text"].clone()), (200, json!("\"accept\"")), "{body}");
    // Issue 23 item 8: every file the server wrote is its owner's alone (0600), and so is
    // every directory it made (0700), whatever the umask.
    use std::os::unix::fs::PermissionsExt;
    let journals = server.dir.path().join("journals");
    let mut dirs = vec![journals.clone()];
    while let Some(dir) = dirs.pop() {
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            match path.is_dir() {
                true => dirs.push(path),
                false => assert_eq!(mode, 0o600, "{}", path.display()),
            }
        }
    }
}

#[test]
fn keys_can_come_from_the_issuer_s_url() {
    let issuer = Issuer::new("k1");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let jwks = json!({"keys": [issuer.jwk]}).to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{jwks}",
                jwks.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    let server = start_with_keys(&issuer, Some(&url));
    let alice = issuer.token(&claims("alice", ""));
    assert_eq!(call(&server, &alice, "note", "from a fetched key")["isError"], json!(false));
    let stranger = Issuer::new("k1");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}});
    assert_eq!(send(&server, "POST", "/mcp", Some(&stranger.token(&claims("alice", ""))), Some(&list)).0, 401);
}

/// Settings a careless operator might write are refused at start, naming the setting.
#[test]
fn careless_oauth_settings_are_refused_at_start() {
    let issuer = Issuer::new("k1");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("note.star"), NOTE).unwrap();
    let manifest = json!({"server": {"name": "oauth-test", "journals": "journals"},
                          "tools": [{"name": "note", "program": "note.star"}]});
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    std::fs::write(dir.path().join("jwks.json"), json!({"keys": [issuer.jwk]}).to_string()).unwrap();
    let jwks = dir.path().join("jwks.json");
    let jwks = jwks.to_str().unwrap();
    for (args, says) in [
        (vec!["--oauth-audience", "http://warden.test/mcp?x=/mcp", "--oauth-jwks-file", jwks], "--oauth-audience"),
        (vec!["--oauth-audience", "https://user:pw@warden.test/mcp", "--oauth-jwks-file", jwks], "no user"),
        (
            vec!["--oauth-audience", AUDIENCE, "--oauth-jwks-url", "http://127.0.0.1:1@example.invalid/jwks"],
            "with no user",
        ),
        (
            vec!["--oauth-audience", AUDIENCE, "--oauth-jwks-url", "http://example.invalid/jwks"],
            "http only on loopback",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("serve-http")
            .arg(dir.path().join("manifest.json"))
            .args(["--listen", "127.0.0.1:0", "--oauth-issuer", ISSUER])
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("listening on"), "{stderr}");
    }
}
