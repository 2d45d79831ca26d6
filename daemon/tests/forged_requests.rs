//! Requests a web page in the user's browser could forge (issue 33, 6), sent on loopback
//! to a daemon as a browser would send them: without a token, a cross-site `text/plain`
//! POST to `/api/ingest` (CSRF) and a request naming another host (DNS rebinding) are
//! refused and store nothing, while memwatch's own clients still store. With a token,
//! wrong sign-ins are paced and the cookie is a random session id, not the token.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::*;
use memwatch_daemon::{Running, ServeConfig};
use memwatch_wire::{EventKind, Record};

async fn daemon(token: Option<&str>) -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::new(dir.path().join("f.db").display().to_string());
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.ingest = "127.0.0.1:0".parse().unwrap();
    cfg.token = token.map(str::to_string);
    (memwatch_daemon::start(cfg).await.unwrap(), dir)
}

/// One raw HTTP/1.1 request; (status, headers and body as text).
fn request(
    api: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(api).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// A wire stream of one process and one allocation.
fn capture() -> Vec<u8> {
    let mut b = memwatch_wire::frame::encode_preamble().to_vec();
    memwatch_wire::encode_record(&start(42, 1_000), &mut b).unwrap();
    memwatch_wire::encode_record(
        &Record::Events(vec![ev(2_000, EventKind::Alloc, 0x1000, 4096, 0)]),
        &mut b,
    )
    .unwrap();
    b
}

async fn runs(running: &Running) -> usize {
    running.store.runs(100).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_forged_writes_are_refused_and_store_nothing() {
    let (running, _dir) = daemon(None).await;
    let api = running.api_addr;
    let host = format!("Host: {api}");
    let body = capture();
    let forged: Vec<(&str, Vec<String>)> = vec![
        // What a cross-site form or simple fetch sends (the audit's case).
        (
            "cross-site text/plain",
            vec![
                host.clone(),
                "Content-Type: text/plain".into(),
                "Origin: http://evil.example".into(),
            ],
        ),
        (
            "same Host, form type, no Origin",
            vec![
                host.clone(),
                "Content-Type: application/x-www-form-urlencoded".into(),
            ],
        ),
        ("no type at all (a Blob body)", vec![host.clone()]),
        (
            "DNS rebinding: the page's own name as Host",
            vec![
                "Host: evil.example:7373".into(),
                "Content-Type: application/octet-stream".into(),
                "Origin: http://evil.example:7373".into(),
            ],
        ),
        (
            "cross-site with a custom type (a preflight the daemon never grants)",
            vec![
                host.clone(),
                "Content-Type: application/octet-stream".into(),
                "Origin: http://evil.example".into(),
            ],
        ),
    ];
    for (what, headers) in &forged {
        let h: Vec<&str> = headers.iter().map(String::as_str).collect();
        let (code, text) = request(api, "POST", "/api/ingest?node=n&run=r", &h, &body);
        assert_eq!(code, 403, "{what}: {text}");
        assert!(text.contains("\"error\""), "{what}: {text}");
    }
    // A rebound page cannot read either.
    let (code, _) = request(api, "GET", "/api/runs", &["Host: evil.example:7373"], b"");
    assert_eq!(code, 403);
    assert_eq!(runs(&running).await, 0, "a forged request stored data");
    // memwatch's clients (a type a form cannot send, or the client header) still store.
    let (code, text) = request(
        api,
        "POST",
        "/api/ingest?node=n&run=r",
        &[&host, "Content-Type: application/octet-stream"],
        &body,
    );
    assert_eq!(code, 200, "{text}");
    let (code, text) = request(
        api,
        "POST",
        "/api/ingest?node=n&run=r2",
        &[
            "Host: localhost",
            "X-Memwatch-Client: 1",
            "Content-Type: text/plain",
        ],
        &body,
    );
    assert_eq!(code, 200, "{text}");
    assert_eq!(runs(&running).await, 2);
    running.shutdown().await.unwrap();
}

fn login(api: SocketAddr, token: &str) -> (u16, String) {
    let form = format!("token={token}&next=%2Fruns");
    request(
        api,
        "POST",
        "/login",
        &[
            &format!("Host: {api}"),
            "Content-Type: application/x-www-form-urlencoded",
            &format!("Origin: http://{api}"),
        ],
        form.as_bytes(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_sign_ins_are_paced_and_the_cookie_is_a_session_id() {
    let token = "tok-forged-requests-1";
    let (running, _dir) = daemon(Some(token)).await;
    let api = running.api_addr;
    let (code, text) = login(api, token);
    assert_eq!(code, 303, "{text}");
    let cookie = text
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("no cookie: {text}"))
        .to_string();
    let value = cookie
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_string())
        .unwrap();
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!value.contains(&hex) && !value.contains(token), "{cookie}");
    assert_eq!(value.len(), 64, "{cookie}");
    // The session signs in; a second sign-in gets another id.
    let (code, _) = request(
        api,
        "GET",
        "/api/runs",
        &[
            &format!("Host: {api}"),
            &format!("Cookie: memwatch_token={value}"),
        ],
        b"",
    );
    assert_eq!(code, 200);
    let (_, again) = login(api, token);
    assert!(!again.contains(&value), "the same session id twice");
    // The token's hex (the old cookie) is not a session.
    let (code, _) = request(
        api,
        "GET",
        "/api/runs",
        &[
            &format!("Host: {api}"),
            &format!("Cookie: memwatch_token={hex}"),
        ],
        b"",
    );
    assert_eq!(code, 401);
    // Wrong tokens: the first few are answered 401, then attempts are paced (429), even
    // one with the right token, which counted as a guess would be one more try.
    let mut codes = Vec::new();
    for i in 0..8 {
        codes.push(login(api, &format!("guess{i}")).0);
    }
    assert_eq!(&codes[..5], &[401; 5], "{codes:?}");
    assert!(codes[5..].iter().all(|&c| c == 429), "{codes:?}");
    assert_eq!(login(api, token).0, 429);
    running.shutdown().await.unwrap();
}
