//! The OOM doctor's verdict stored with a run and shown (issue 22 item 6), and the run
//! page's basics (issue 23 item 3), on real H100 recordings of `testdata/oom-corpus`:
//! each capture stored through the daemon's ingest, its diagnosis (capture + stderr +
//! XLA dump, as `memwatch import --log` computes it) posted to
//! `/api/runs/{id}/diagnosis`. Checked: the stored document round-trips; bad documents
//! are refused with a reason; the run page leads with the badge, headline and evidence;
//! the incidents list names the executable and the error (`RESOURCE_EXHAUSTED`, not 8);
//! the Peak page of an OOM run leads with the failed request; no phantom "GPU -1"; runs
//! are titled by their command, not their machine-made key.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::corpus::{corpus_diagnosis, store_corpus};
use common::*;
use tower::ServiceExt;

async fn send(app: &axum::Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 30)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, String) {
    send(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

async fn post(app: &axum::Router, uri: &str, body: String) -> (StatusCode, String) {
    send(
        app,
        Request::post(uri)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap(),
    )
    .await
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[tokio::test]
async fn verdicts_are_stored_and_shown_with_their_runs() {
    for url in dbs("verdict").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        // A leak that ended in RESOURCE_EXHAUSTED, a temp buffer too large at execute
        // time, and a compile-time OOM (autotuning: no failed execute, no incident).
        let leak = store_corpus(&store, "jax_leak_bfc", 1).await;
        let temp = store_corpus(&store, "jax_exec_temp", 2).await;
        let compile = store_corpus(&store, "jax_autotune", 3).await;
        let mut docs = Vec::new();
        for (run, scenario) in [
            (leak, "jax_leak_bfc"),
            (temp, "jax_exec_temp"),
            (compile, "jax_autotune"),
        ] {
            let doc = corpus_diagnosis(scenario);
            let (s, body) = post(
                &app,
                &format!("/api/runs/{run}/diagnosis?source=test"),
                doc.to_string(),
            )
            .await;
            assert_eq!(s, StatusCode::OK, "{scenario}: {body}");
            docs.push(doc);
        }
        // Stored whole, read back as given.
        let (s, body) = get(&app, &format!("/api/runs/{leak}/diagnosis")).await;
        assert_eq!(s, StatusCode::OK);
        let back = json(&body);
        assert_eq!(back["diagnosis"], docs[0]);
        assert_eq!(back["source"], "test");
        assert_eq!(back["diagnosis"]["verdicts"][0]["kind"], "leak");
        // Storing again replaces it.
        let (s, _) = post(
            &app,
            &format!("/api/runs/{leak}/diagnosis"),
            docs[0].to_string(),
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        let (_, body) = get(&app, &format!("/api/runs/{leak}/diagnosis")).await;
        assert_eq!(json(&body)["source"], "POST /api/runs/{id}/diagnosis");

        // Bad input: a clear reason, nothing stored.
        for (body, needle) in [
            ("not json".to_string(), "not JSON"),
            ("[1]".to_string(), "not a JSON object"),
            (
                serde_json::json!({"schema": 7, "failed": true, "headline": "", "verdicts": []})
                    .to_string(),
                "schema 7",
            ),
            (
                serde_json::json!({"schema": 1, "headline": "", "verdicts": []}).to_string(),
                "`failed`",
            ),
        ] {
            let (s, answer) = post(&app, &format!("/api/runs/{temp}/diagnosis"), body).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{answer}");
            assert!(answer.contains(needle), "{answer} lacks {needle}");
        }
        let (_, body) = get(&app, &format!("/api/runs/{temp}/diagnosis")).await;
        assert_eq!(
            json(&body)["diagnosis"],
            docs[1],
            "a refused document replaced one"
        );
        let (s, _) = post(&app, "/api/runs/999/diagnosis", docs[0].to_string()).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        let (s, body) = get(&app, "/api/runs/999/diagnosis").await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{body}");

        // The run page: badge, the verdict's own headline, what/who, the evidence.
        let (s, page) = get(&app, &format!("/runs/{leak}")).await;
        assert_eq!(s, StatusCode::OK);
        let headline = docs[0]["verdicts"][0]["headline"].as_str().unwrap();
        assert!(
            page.contains("class=\"badge verdict failure\""),
            "no failure badge on a run that ran out of memory"
        );
        assert!(page.contains(">leak<"));
        assert!(page.contains(&escape(headline)), "no headline {headline}");
        assert!(page.contains("executable jit_update"));
        assert!(
            page.contains("stderr.log:1</code>"),
            "no file:line evidence"
        );
        // Titled by its command, not its key; no phantom device -1.
        assert!(page.contains("python3 jax_leak.py 200 4096 4096"));
        assert!(
            !page.contains("GPU -1"),
            "phantom device -1 on the run page"
        );
        // The incident names the executable and the error by name.
        assert!(page.contains("<code>jit_update</code>"));
        assert!(page.contains(">RESOURCE_EXHAUSTED<"));
        // Every run has a start.
        assert!(!page.contains("<dd>-</dd>"), "a fact is empty");

        // The compile-time OOM: no failed call was recorded, the verdict says it.
        let (_, page) = get(&app, &format!("/runs/{compile}")).await;
        assert!(
            page.contains(">compile_scratch<"),
            "compile verdict not shown"
        );
        assert!(
            page.contains("badge bad\">OOM"),
            "a failed verdict marks the run OOM"
        );

        // The incidents list: executable and error name, and every stored verdict.
        let (_, page) = get(&app, "/incidents").await;
        assert!(page.contains("<code>jit_update</code>"));
        assert!(page.contains("<code>jit_forward_loss</code>"));
        assert!(page.contains(">RESOURCE_EXHAUSTED<"));
        assert!(!page.contains("class=\"num\">8<"), "a bare result code");
        for kind in ["leak", "execute_temp", "compile_scratch"] {
            assert!(page.contains(&format!(">{kind}<")), "incidents lack {kind}");
        }
        let (_, body) = get(&app, &format!("/api/incidents?run={leak}")).await;
        let inc = &json(&body)["incidents"][0];
        assert_eq!(inc["executable"], "jit_update");
        assert_eq!(inc["error"], "RESOURCE_EXHAUSTED");

        // The Peak page of an OOM run leads with the request that failed.
        let (_, page) = get(&app, &format!("/runs/{leak}/peak")).await;
        let failed = page
            .find("The request that failed")
            .expect("no failed request");
        let peak = page.find("<dt>Peak</dt>").unwrap();
        assert!(failed < peak, "the failed request does not lead");
        assert!(page.contains("jit_update (PJRT_LoadedExecutable_Execute:complete)"));
        assert!(page.contains("What was live when it failed"));
        assert!(!page.contains(">GPU -1<"), "phantom device in the selector");

        // A run whose preallocations were refused and which went on and exited 0: its
        // status and its verdict read as warnings (orange), never as a failure (red).
        let recovered = store_corpus(&store, "h200_jax_recovered", 4).await;
        let doc = corpus_diagnosis("h200_jax_recovered");
        let url = format!("/api/runs/{recovered}/diagnosis");
        let (s, body) = post(&app, &url, doc.to_string()).await;
        assert_eq!(s, StatusCode::OK, "{body}");
        let (_, page) = get(&app, &format!("/runs/{recovered}")).await;
        assert!(page.contains("class=\"badge warn\">recovered<"), "status");
        assert!(
            page.contains("class=\"badge verdict warning\"")
                && page.contains("class=\"verdict warning\"")
                && !page.contains("verdict failure")
                && !page.contains("badge bad"),
            "a recovered run is drawn as a failure"
        );
        // Its refused requests are marked on its charts in the warning's orange, never in
        // the red of a run that ended out of memory; the leak's failures stay red.
        let (red, orange) = ("#C8001E", "#D67800");
        let marks = |page: &str| (page.contains(red), page.contains(orange));
        assert_eq!(marks(&page), (false, true), "recovered run page marks");
        for part in ["chart.svg?device=0", "framework/memory.svg?device=0"] {
            let (s, svg) = get(&app, &format!("/runs/{recovered}/{part}")).await;
            assert_eq!(s, StatusCode::OK, "{part}: {svg}");
            assert_eq!(marks(&svg), (false, true), "recovered {part}");
        }
        let (_, page) = get(&app, &format!("/runs/{leak}")).await;
        assert_eq!(marks(&page), (true, false), "leak run page marks");

        // The overview: titles, verdict badges.
        let (_, page) = get(&app, "/").await;
        let runs = &page[page.find("id=\"runs-h\"").unwrap()..];
        let row = |run: i64| {
            let at = runs.find(&format!("href=\"/runs/{run}\">#{run} ")).unwrap();
            runs[at..at + runs[at..].find("</tr>").unwrap()].to_string()
        };
        assert!(row(leak).contains("badge verdict failure"), "{}", row(leak));
        let r = row(recovered);
        assert!(
            r.contains("badge verdict warning") && !r.contains("failure"),
            "{r}"
        );
        assert!(page.contains("python3 jax_leak.py 200 4096 4096"));
        assert!(
            !page.contains(&format!("#{leak} import:")),
            "titled by its machine-made key"
        );
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}
