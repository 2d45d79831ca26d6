//! Requests that a web page in the user's own browser could forge. A page on any site can
//! send the daemon a cross-origin form or "simple" fetch (CSRF), and a page on a name
//! that its owner rebinds to 127.0.0.1 is even same-origin with it (DNS rebinding). The
//! rules, checked before everything else:
//!
//! - Without a token (the daemon then listens on loopback only), every request must name
//!   this machine in `Host`: a loopback address or `localhost` (a rebound page names its
//!   own host), and a state-changing one (any method but GET, HEAD, OPTIONS) must carry a
//!   proof that a cross-site page cannot forge without a CORS preflight, which the daemon
//!   never grants: the `X-Memwatch-Client` header, or a `Content-Type` that is neither
//!   missing nor one a form can send (`text/plain`, `application/x-www-form-urlencoded`,
//!   `multipart/form-data`).
//! - With or without a token, a state-changing request whose `Origin` is another origin
//!   than its `Host` (or `null`), or that the browser marks `Sec-Fetch-Site: cross-site`,
//!   is refused.
//!
//! Refusals are 403 with a message naming the rule.

use axum::http::{header, HeaderMap, Method, StatusCode};

use super::error::AppError;

/// The header memwatch's own clients send on state-changing requests.
pub const CLIENT_HEADER: &str = "x-memwatch-client";

/// Why the request is refused, or None when it may go on.
pub(crate) fn refusal(method: &Method, headers: &HeaderMap, has_token: bool) -> Option<AppError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if !has_token {
        if let Some(h) = host.filter(|h| !is_loopback_host(h)) {
            return Some(forbidden(format!(
                "Host {h:?} is not this machine: without a token the daemon answers only \
                 requests to a loopback address or localhost (DNS rebinding)"
            )));
        }
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    if let Some(why) = cross_site(headers, host) {
        return Some(forbidden(why));
    }
    if !has_token && !headers.contains_key(CLIENT_HEADER) && form_content_type(headers) {
        return Some(forbidden(format!(
            "a {method} without a token needs a Content-Type a web form cannot send (e.g. \
             application/octet-stream, application/json) or the {CLIENT_HEADER} header \
             (cross-site request forgery)"
        )));
    }
    None
}

fn forbidden(message: String) -> AppError {
    AppError::new(StatusCode::FORBIDDEN, message)
}

/// `localhost`, `*.localhost`, `127.x.y.z`, `[::1]`, each with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, tail)) if tail.is_empty() || tail.starts_with(':') => v6,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Why a state-changing request comes from another site, if it does.
fn cross_site(headers: &HeaderMap, host: Option<&str>) -> Option<String> {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if fetch_site.eq_ignore_ascii_case("cross-site") {
        return Some("a cross-site request (Sec-Fetch-Site: cross-site) cannot change data".into());
    }
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("null");
    let same = host.is_some_and(|h| {
        origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(h))
    });
    (!same).then(|| {
        format!(
            "Origin {origin:?} is not this daemon ({}): a page of another site cannot change \
             data",
            host.unwrap_or("no Host")
        )
    })
}

/// Whether the body's type is one a cross-site form or simple fetch may send (or none).
fn form_content_type(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return true;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    matches!(
        essence.as_str(),
        "" | "text/plain" | "application/x-www-form-urlencoded" | "multipart/form-data"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("a header value"));
        }
        h
    }

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "LOCALHOST:7373",
            "a.localhost:1",
            "127.0.0.1",
            "127.9.9.9:7373",
            "[::1]:7373",
            "[::1]",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7373",
            "localhost.evil.example",
            "10.0.0.1:7373",
            "[::2]:1",
            "[::1]x",
            "",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn without_a_token_a_post_needs_a_type_a_form_cannot_send() {
        let post = Method::POST;
        let host = ("host", "127.0.0.1:7373");
        for refused in [
            vec![host],
            vec![host, ("content-type", "text/plain")],
            vec![host, ("content-type", "text/plain; charset=utf-8")],
            vec![host, ("content-type", "application/x-www-form-urlencoded")],
            vec![host, ("content-type", "multipart/form-data; boundary=x")],
            vec![
                ("host", "evil.example:7373"),
                ("content-type", "application/json"),
            ],
            vec![
                host,
                ("content-type", "application/json"),
                ("origin", "http://evil.example"),
            ],
            vec![
                host,
                ("content-type", "application/json"),
                ("origin", "null"),
            ],
            vec![
                host,
                ("content-type", "application/json"),
                ("sec-fetch-site", "cross-site"),
            ],
        ] {
            assert!(
                refusal(&post, &headers(&refused), false).is_some(),
                "{refused:?}"
            );
        }
        for allowed in [
            vec![host, ("content-type", "application/octet-stream")],
            vec![host, ("content-type", "application/json")],
            vec![("content-type", "application/json")],
            vec![host, (CLIENT_HEADER, "1"), ("content-type", "text/plain")],
            vec![
                host,
                ("content-type", "application/json"),
                ("origin", "http://127.0.0.1:7373"),
            ],
        ] {
            assert!(
                refusal(&post, &headers(&allowed), false).is_none(),
                "{allowed:?}"
            );
        }
        // Reads need only the Host rule.
        assert!(refusal(&Method::GET, &headers(&[host]), false).is_none());
        assert!(refusal(&Method::GET, &headers(&[("host", "evil.example")]), false).is_some());
    }

    #[test]
    fn with_a_token_only_the_origin_rule_applies() {
        let post = Method::POST;
        let form = [
            ("host", "box.example:7373"),
            ("content-type", "application/x-www-form-urlencoded"),
        ];
        assert!(refusal(&post, &headers(&form), true).is_none());
        let mut cross = form.to_vec();
        cross.push(("origin", "http://evil.example"));
        assert!(refusal(&post, &headers(&cross), true).is_some());
        let mut same = form.to_vec();
        same.push(("origin", "http://box.example:7373"));
        assert!(refusal(&post, &headers(&same), true).is_none());
    }
}
