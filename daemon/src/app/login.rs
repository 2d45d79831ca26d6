//! Signing in from a browser when the daemon has a token. Browsers cannot add an
//! `Authorization` header to page loads, so `/login` takes the token in a form and keeps
//! it in an HttpOnly, SameSite=Strict cookie (`memwatch_token`) that the auth check
//! accepts like the header. Page loads without either are sent to `/login`; API calls
//! still get a JSON 401. Owns the form, the cookie and where to go back to.

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

/// A token as the cookie carries it: hex, so that any token is a valid cookie value.
pub fn cookie_value(token: &str) -> String {
    token.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The `memwatch_token` cookie's value (hex of the token), if any.
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

/// `POST /login`: sets the cookie and goes back, or shows the form again.
pub async fn submit(State(st): State<AppState>, Form(f): Form<Login>) -> Response {
    let next = local_path(f.next.as_deref()).to_string();
    match &st.token {
        Some(want) if token_matches(&f.token, want) => {
            let cookie = format!(
                "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
                cookie_value(&f.token)
            );
            let mut r = Redirect::to(&next).into_response();
            if let Ok(v) = cookie.parse() {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Some(_) => (StatusCode::UNAUTHORIZED, Html(form(&next, true))).into_response(),
        None => Redirect::to(&next).into_response(),
    }
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
        assert_eq!(cookie_value("s3c"), "733363");
        assert!(token_matches("s3cret", "s3cret") && !token_matches("s3creT", "s3cret"));
        assert!(!token_matches("s3cre", "s3cret"));
        assert_eq!(url_encode("/runs/3?device=0&x"), "/runs/3%3Fdevice%3D0%26x");
    }
}
