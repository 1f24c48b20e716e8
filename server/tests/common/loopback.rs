//! What the local test services share: a listener on 127.0.0.1 that serves each connection on
//! a thread of its own, and one HTTP/1.1 request read from a connection (`Connection: close`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::thread;

/// One request as a test service sees it: header names lowercased.
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// Listens on a free loopback port and hands every connection to `serve`; returns the port.
pub fn listen(serve: impl Fn(TcpStream) + Send + Sync + Clone + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1");
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let serve = serve.clone();
            thread::spawn(move || serve(stream));
        }
    });
    port
}

/// Reads one request (its body by `content-length`); none when the connection ends first.
pub fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let mut headers = BTreeMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let length: usize = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    Some(Request { method, path, headers, body })
}
