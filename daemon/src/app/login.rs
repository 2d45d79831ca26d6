//! Signing in from a browser when the daemon has a token. Browsers cannot add an
//! `Authorization` header to page loads, so `/login` takes the token in a form and gives
//! back an HttpOnly, SameSite=Strict cookie (`memwatch_token`) holding a random session
//! id (never the token), which the auth check accepts like the header while this daemon
//! runs. Wrong tokens are rate-limited: after [`FREE_FAILURES`] in a row, each later
//! attempt waits a pause that doubles up to [`MAX_PAUSE`] (429 before then, whatever
//! the token). Page loads without either are sent to `/login`; API calls still get a JSON
//! 401. Owns the form, the sessions, the rate limit and where to go back to.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use super::AppState;

/// The cookie that carries the token for page loads.
pub const COOKIE: &str = "memwatch_token";

/// Constant-time comparison of a presented token with the daemon's.
pub fn token_matches(got: &str, want: &str) -> bool {
    got.len() == want.len()
        && got
            .bytes()
            .zip(want.bytes())
            .fold(0u8, |a, (x, y)| a | (x ^ y))
            == 0
}

/// Wrong tokens accepted in a row before attempts are paced.
pub const FREE_FAILURES: u32 = 5;
/// The longest pause between paced attempts.
pub const MAX_PAUSE: Duration = Duration::from_secs(60);
/// Sessions kept; the oldest goes when a new one would exceed it.
const MAX_SESSIONS: usize = 4096;

/// Signed-in sessions: id -> the token it was given for (a daemon of another token in the
/// same process does not accept it), in creation order for eviction.
#[derive(Default)]
struct Sessions {
    by_id: HashMap<String, String>,
    order: VecDeque<String>,
}

/// Failed sign-ins in a row and when the next attempt may come.
#[derive(Default)]
struct Pacing {
    failures: u32,
    next: Option<Instant>,
}

fn lock<T: Default>(cell: &'static OnceLock<Mutex<T>>) -> MutexGuard<'static, T> {
    cell.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

static SESSIONS: OnceLock<Mutex<Sessions>> = OnceLock::new();
/// By the daemon's token (one per daemon; tests run several in one process).
static PACING: OnceLock<Mutex<HashMap<String, Pacing>>> = OnceLock::new();

/// 32 random bytes in hex, from the kernel.
fn random_id() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A new session for `token`; its id goes into the cookie.
fn new_session(token: &str) -> std::io::Result<String> {
    let id = random_id()?;
    let mut s = lock(&SESSIONS);
    while s.order.len() >= MAX_SESSIONS {
        if let Some(old) = s.order.pop_front() {
            s.by_id.remove(&old);
        }
    }
    s.by_id.insert(id.clone(), token.to_string());
    s.order.push_back(id.clone());
    Ok(id)
}

/// Whether the request's cookie names a session given for `token`.
pub fn session_valid(headers: &HeaderMap, token: &str) -> bool {
    let Some(id) = cookie_token(headers) else {
        return false;
    };
    lock(&SESSIONS)
        .by_id
        .get(id)
        .is_some_and(|t| token_matches(t, token))
}

/// How long until a sign-in attempt is taken, when it must wait.
fn paced(token: &str) -> Option<Duration> {
    lock(&PACING)
        .get(token)
        .and_then(|p| p.next)
        .and_then(|n| n.checked_duration_since(Instant::now()))
        .filter(|d| !d.is_zero())
}

/// Records an attempt's result: a success clears the count, a failure past
/// [`FREE_FAILURES`] sets the next pause (1 s, doubling, at most [`MAX_PAUSE`]).
fn attempt(token: &str, ok: bool) {
    let mut all = lock(&PACING);
    if ok {
        all.remove(token);
        return;
    }
    let p = all.entry(token.to_string()).or_default();
    p.failures = p.failures.saturating_add(1);
    if p.failures >= FREE_FAILURES {
        let doublings = (p.failures - FREE_FAILURES).min(6);
        let pause = Duration::from_secs(1 << doublings).min(MAX_PAUSE);
        p.next = Some(Instant::now() + pause);
    }
}

/// The `memwatch_token` cookie's value (a session id), if any.
pub fn cookie_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// Whether a request is a browser asking for a page (not an API or metrics client).
pub fn wants_page(path: &str, headers: &HeaderMap) -> bool {
    !path.starts_with("/api/")
        && path != "/metrics"
        && headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"))
}

/// Only a path on this server: `/runs/3`, never `//evil.example` or `https://…`.
fn local_path(next: Option<&str>) -> &str {
    match next {
        // Printable ASCII only: browsers drop tabs and newlines from URLs, so "/\t/evil"
        // would become "//evil", another site; CR/LF cannot go into a header at all.
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n
        }
        _ => "/",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn form(next: &str, wrong: bool) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>memwatch: sign in</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:28em;margin:4em auto}}\
         input{{font-size:1em;padding:.3em;width:100%;box-sizing:border-box;margin:.4em 0}}\
         .err{{color:#b00}}</style></head><body><h1>memwatch</h1>\
         <p>This daemon needs its token (<code>memwatch serve --token</code> or \
         <code>MEMWATCH_TOKEN</code>).</p>{}\
         <form method=\"post\" action=\"/login\"><input type=\"hidden\" name=\"next\" value=\"{}\">\
         <input type=\"password\" name=\"token\" placeholder=\"token\" autofocus>\
         <input type=\"submit\" value=\"Sign in\"></form></body></html>",
        if wrong {
            "<p class=\"err\">Wrong token.</p>"
        } else {
            ""
        },
        escape(next)
    )
}

#[derive(Deserialize)]
pub struct Next {
    next: Option<String>,
}

#[derive(Deserialize)]
pub struct Login {
    token: String,
    next: Option<String>,
}

/// `GET /login`: the form.
pub async fn page(Query(q): Query<Next>) -> Html<String> {
    Html(form(local_path(q.next.as_deref()), false))
}

/// `POST /login`: sets the cookie and goes back, or shows the form again (429 while
/// wrong attempts are paced).
pub async fn submit(State(st): State<AppState>, Form(f): Form<Login>) -> Response {
    let next = local_path(f.next.as_deref()).to_string();
    let Some(want) = &st.token else {
        return Redirect::to(&next).into_response();
    };
    if let Some(wait) = paced(want) {
        let secs = wait.as_secs() + 1;
        let mut r = (
            StatusCode::TOO_MANY_REQUESTS,
            Html(format!(
                "<!doctype html><p>Too many wrong tokens: try again in {secs} s.</p>"
            )),
        )
            .into_response();
        if let Ok(v) = secs.to_string().parse() {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    let ok = token_matches(&f.token, want);
    attempt(want, ok);
    if !ok {
        return (StatusCode::UNAUTHORIZED, Html(form(&next, true))).into_response();
    }
    let id = match new_session(want) {
        Ok(id) => id,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Html(format!(
                    "<!doctype html><p>cannot make a session id: {e}</p>"
                )),
            )
                .into_response()
        }
    };
    let cookie = format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict");
    let mut r = Redirect::to(&next).into_response();
    if let Ok(v) = cookie.parse() {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Where a page load without a token is sent.
pub fn to_login(path_and_query: &str) -> Response {
    let next: String = url_encode(local_path(Some(path_and_query)));
    Redirect::to(&format!("/login?next={next}")).into_response()
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_and_cookies_are_found() {
        assert_eq!(local_path(Some("/runs/3?device=0")), "/runs/3?device=0");
        for bad in [
            "//evil.example/x",
            "https://evil.example",
            "\\\\x",
            "runs",
            "/\t/evil.example",
            "/\r\nSet-Cookie: x=1",
            "/ /evil",
            "/caf\u{e9}",
        ] {
            assert_eq!(local_path(Some(bad)), "/", "{bad}");
        }
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; memwatch_token=733363; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_token(&h), Some("733363"));
        assert!(!session_valid(&h, "s3c"));
        let id = new_session("s3c").expect("an id");
        assert_eq!(id.len(), 64);
        assert_ne!(id, new_session("s3c").expect("an id"));
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, format!("{COOKIE}={id}").parse().unwrap());
        assert!(session_valid(&h, "s3c") && !session_valid(&h, "other"));
        assert!(token_matches("s3cret", "s3cret") && !token_matches("s3creT", "s3cret"));
        assert!(!token_matches("s3cre", "s3cret"));
        assert_eq!(url_encode("/runs/3?device=0&x"), "/runs/3%3Fdevice%3D0%26x");
    }
}
