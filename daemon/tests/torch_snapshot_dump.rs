//! What a stored PyTorch snapshot's dump shows on the dashboard, on the real snapshots of
//! `testdata/torch-snapshots/` (PyTorch 2.11, H100 and H200), each converted as `memwatch
//! import SNAPSHOT.pickle` converts it and stored through the daemon's own ingest. The
//! expected figures are `memwatch report`'s (the analysis crate's `report` of the same
//! file) and, where the fixture has them, what PyTorch itself printed at the dump
//! (`memory_reserved()`, `memory_allocated()`): never the daemon's.
//!
//! - the segments page: per device, the sums over every segment add up to the
//!   reserved bytes, allocated and active are torch's, segment and block counts the
//!   report's;
//! - stacks titled by the user's frame, every frame below;
//! - two snapshots compared at the dump, a missing side as "—", a decrease as "−X";
//! - no machine or device made up: the run page names the snapshot's devices with their
//!   memory size "not recorded", and no node.

mod common;

use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use common::corpus::{store_corpus, store_records, store_snapshot_file, testdata};
use common::*;
use memwatch_analysis::size::format_bytes;
use memwatch_analysis::torch::{report, scan_path, to_records, ReportOptions, SnapshotReport};
use memwatch_wire::Record;

use common::http::text as get;

/// Every real snapshot in testdata, with torch's own figures where recorded.
fn snapshots() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![testdata("torch-snapshots")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "pickle") {
                out.push(p);
            }
        }
    }
    out.sort();
    assert!(out.len() >= 14, "{out:?}");
    out
}

fn torch_at_dump(pickle: &Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(pickle.with_extension("json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(v["at_dump"].clone()).filter(|v| v.is_object())
}

fn report_of(path: &Path) -> SnapshotReport {
    let scan = scan_path(path).unwrap();
    let opts = ReportOptions {
        sites: 10_000,
        ..ReportOptions::default()
    };
    report(&scan, &opts).unwrap()
}

/// Text as the dashboard's templates write it (askama's HTML escaping).
fn html(s: &str) -> String {
    s.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// The value of `data-NAME="…"` on the page's `segment-totals` table.
fn total(page: &str, name: &str) -> u64 {
    let at = page
        .find("class=\"segment-totals\"")
        .expect("segment totals");
    let tag = &page[at..at + page[at..].find('>').unwrap()];
    let key = format!("data-{name}=\"");
    let from = tag.find(&key).unwrap_or_else(|| panic!("{name} in {tag}")) + key.len();
    tag[from..from + tag[from..].find('"').unwrap()]
        .parse()
        .unwrap()
}

#[tokio::test]
async fn segments_add_up_to_what_torch_reserved() {
    for url in dbs("torch_dump_segments").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        for (i, path) in snapshots().iter().enumerate() {
            let name = path.display().to_string();
            let run = store_snapshot_file(&store, path, &format!("snap:{i}"), i as u64 + 1).await;
            let r = report_of(path);
            for d in &r.devices {
                let (s, page) =
                    get(&app, &format!("/runs/{run}/segments?device={}", d.device)).await;
                assert_eq!(s, StatusCode::OK, "{name}: {page}");
                let reserved = total(&page, "reserved");
                let allocated = total(&page, "allocated");
                let pending = total(&page, "pending-free");
                let free = total(&page, "free");
                let uncovered = total(&page, "uncovered");
                assert_eq!(reserved, d.reserved_bytes, "{name}: reserved = report's");
                assert_eq!(allocated, d.allocated_bytes, "{name}: allocated = report's");
                assert_eq!(allocated + pending, d.active_bytes, "{name}: active");
                assert_eq!(
                    allocated + pending + free + uncovered,
                    reserved,
                    "{name}: sums"
                );
                assert_eq!(uncovered, 0, "{name}: PyTorch's blocks tile its segments");
                assert_eq!(total(&page, "segments"), d.segments, "{name}");
                // Every block of the dump (the report counts the active ones).
                let scan = scan_path(path).unwrap();
                let blocks: usize = scan
                    .segments
                    .iter()
                    .filter(|s| s.device == d.device)
                    .map(|s| s.blocks.len())
                    .sum();
                assert_eq!(total(&page, "blocks"), blocks as u64, "{name}");
                if let Some(t) = torch_at_dump(path).filter(|_| d.device == 0) {
                    if let Some(v) = t["memory_reserved"].as_u64() {
                        assert_eq!(reserved, v, "{name}: memory_reserved()");
                    }
                    if let Some(v) = t["memory_allocated"].as_u64() {
                        assert_eq!(allocated, v, "{name}: memory_allocated()");
                    }
                }
                // Every segment listed (the fixtures have at most 99, two pages), each
                // with its size; the pages' sizes sum to reserved.
                let mut sum = 0u64;
                let mut rows = 0;
                let mut offset = 0;
                loop {
                    let (_, p) = get(
                        &app,
                        &format!("/runs/{run}/segments?device={}&offset={offset}", d.device),
                    )
                    .await;
                    for part in p.split("<tr class=\"segment\"").skip(1) {
                        let k = part.find("data-size=\"").unwrap() + 11;
                        sum += part[k..k + part[k..].find('"').unwrap()]
                            .parse::<u64>()
                            .unwrap();
                        rows += 1;
                    }
                    offset += 50;
                    if offset as u64 >= d.segments {
                        break;
                    }
                }
                assert_eq!(rows as u64, d.segments, "{name}: every segment listed");
                assert_eq!(sum, reserved, "{name}: segment sizes sum to reserved");
                if d.largest_segments.iter().any(|s| s.is_expandable) {
                    assert!(page.contains("· expandable"), "{name}: expandable shown");
                }
            }
            // The run page links the segments and names the device.
            let (_, page) = get(&app, &format!("/runs/{run}")).await;
            assert!(
                page.contains(&format!("/runs/{run}/segments?device=0")),
                "{name}"
            );
        }
        // A run that is no snapshot has no segments page.
        let cap = store_corpus(&store, "jax_leak_bfc", 99).await;
        let (s, _) = get(&app, &format!("/runs/{cap}/segments")).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
}

/// The texts of every `<summary><code>…</code>` (a stack's title) on a page.
fn stack_titles(page: &str) -> Vec<String> {
    page.split("<details class=\"stack\"><summary><code>")
        .skip(1)
        .map(|p| p[..p.find("</code>").unwrap()].to_string())
        .collect()
}

#[tokio::test]
async fn stacks_are_titled_by_the_users_frame() {
    for url in dbs("torch_dump_stacks").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        for (stream, name, want) in [
            (1, "leak", "torch_leak.py:24 in &#60;module&#62;"),
            (2, "train_snapshot", "torch_train_snapshot.py:"),
            (3, "paths/ring", "torch_snapshots.py:"),
        ] {
            let path = testdata(&format!("torch-snapshots/{name}.pickle"));
            let run = store_snapshot_file(&store, &path, &format!("snap:{name}"), stream).await;
            for uri in [
                format!("/runs/{run}/segments?device=0"),
                format!("/runs/{run}"),
            ] {
                let (_, page) = get(&app, &uri).await;
                let titles = stack_titles(&page);
                assert!(!titles.is_empty(), "{name} {uri}: stacks shown");
                for t in &titles {
                    for bad in ["c10::", "at::", "torch::", "??", "/site-packages/torch/"] {
                        assert!(!t.contains(bad), "{name} {uri}: title {t}");
                    }
                }
                assert!(
                    titles.iter().any(|t| t.contains(want)),
                    "{name} {uri}: {want} among {titles:?}"
                );
                // The whole stack below the title: C++ frames and the torch frames too.
                let first = page
                    .split("<details class=\"stack\">")
                    .skip(1)
                    .find(|d| d.contains(want))
                    .unwrap();
                let body = &first[..first.find("</details>").unwrap()];
                assert!(body.contains("<ol class=\"frames\">"), "{name}");
                assert!(body.contains("c10::"), "{name}: C++ frames listed: {body}");
                assert!(
                    body.contains("<strong><code>"),
                    "{name}: the user's frame marked in the list"
                );
            }
            // Stacks are data, not annotations.
            let (_, page) = get(&app, &format!("/runs/{run}")).await;
            assert!(!page.contains("torch.stack "), "{name}");
            assert!(!page.contains("torch.segment "), "{name}");
        }
    }
}

/// The row of `key` in the snapshot comparison: (A, B, difference).
fn compare_row(page: &str, key: &str) -> (String, String, String) {
    let table = &page[page
        .find("class=\"snapshot-compare\"")
        .expect("snapshot table")..];
    let at = table
        .find(&format!("<td>{key}</td>"))
        .unwrap_or_else(|| panic!("row {key}"));
    let cells: Vec<String> = table[at..]
        .split("<td")
        .skip(2)
        .take(3)
        .map(|c| {
            let s = &c[c.find('>').unwrap() + 1..];
            s[..s.find("</td>").unwrap()].to_string()
        })
        .collect();
    (cells[0].clone(), cells[1].clone(), cells[2].clone())
}

#[tokio::test]
async fn two_snapshots_compare_at_the_dump() {
    for url in dbs("torch_dump_compare").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        let leak_path = testdata("torch-snapshots/leak.pickle");
        let train_path = testdata("torch-snapshots/train_snapshot.pickle");
        let a = store_snapshot_file(&store, &leak_path, "snap:leak", 1).await;
        let b = store_snapshot_file(&store, &train_path, "snap:train", 2).await;
        let (ra, rb) = (report_of(&leak_path), report_of(&train_path));
        let (da, db) = (&ra.devices[0], &rb.devices[0]);
        let (s, page) = get(&app, &format!("/compare?a={a}&b={b}")).await;
        assert_eq!(s, StatusCode::OK);
        assert!(page.contains("Difference B − A"));
        let minus = |x: u64, y: u64| {
            if y >= x {
                format!("+{}", format_bytes(y - x))
            } else {
                format!("\u{2212}{}", format_bytes(x - y))
            }
        };
        for (key, x, y) in [
            (
                "allocated (held by the program)",
                da.allocated_bytes,
                db.allocated_bytes,
            ),
            ("reserved (segments)", da.reserved_bytes, db.reserved_bytes),
        ] {
            let (ca, cb, cd) = compare_row(&page, key);
            assert_eq!((ca, cb), (format_bytes(x), format_bytes(y)), "{key}");
            assert_eq!(cd, minus(x, y), "{key}");
            assert!(
                !cd.starts_with('-'),
                "a decrease is a difference, never a size"
            );
        }
        assert_eq!(
            compare_row(&page, "segments"),
            (
                da.segments.to_string(),
                db.segments.to_string(),
                minus(da.segments, db.segments).replace(" B", "")
            )
        );
        // Per site at the dump: the report's bytes by site at the end of the trace
        // (the dump's blocks); a site only one snapshot holds is "none" in the other.
        let top = &da.at_end.by_site[0];
        let row_at = page.find("class=\"snapshot-compare\"").unwrap();
        let site_row = page[row_at..]
            .split("<tr class=\"site\">")
            .skip(1)
            .find(|r| r.contains(&html(&top.site)))
            .expect("the leak's largest site");
        assert!(site_row.contains(&format!(">{}</td>", format_bytes(top.bytes))));
        assert!(site_row.contains(">none</td>"), "{site_row}");
        assert!(site_row.contains(&format!("\u{2212}{}", format_bytes(top.bytes))));
        // A run without a dump is missing, not 0 B.
        let cap = store_corpus(&store, "jax_leak_bfc", 3).await;
        let (_, page) = get(&app, &format!("/compare?a={a}&b={cap}")).await;
        let (ca, cb, cd) = compare_row(&page, "reserved (segments)");
        assert_eq!(ca, format_bytes(da.reserved_bytes));
        assert_eq!((cb.as_str(), cd.as_str()), ("—", "—"));
        assert!(page.contains("was not stored from a PyTorch snapshot"));
    }
}

#[tokio::test]
async fn a_snapshot_names_its_devices_and_no_machine() {
    for url in dbs("torch_dump_devices").await.urls.clone() {
        let (app, store) = test_app(&url, None, 16 << 20).await;
        // As `memwatch import SNAPSHOT --db` stores it: node "import", no host name.
        let path = testdata("torch-snapshots/leak.pickle");
        let scan = scan_path(&path).unwrap();
        let mut records: Vec<Record> = Vec::new();
        to_records(&scan, "", &mut |r| {
            records.push(r);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(
            !records.iter().any(|r| matches!(r, Record::DeviceInfo(_))),
            "a snapshot names no device's name or memory: no device record"
        );
        let run = store_records(&store, "import", "import:leak", 1, records, 64).await;
        let (_, nodes) = get(&app, "/api/nodes").await;
        let nodes: serde_json::Value = serde_json::from_str(&nodes).unwrap();
        for n in nodes["nodes"].as_array().unwrap() {
            assert!(
                n["devices"].as_array().unwrap().is_empty(),
                "no device made up: {n}"
            );
        }
        let (_, page) = get(&app, &format!("/runs/{run}")).await;
        assert!(
            !page.contains("<dt>Node</dt>"),
            "no node shown as a machine"
        );
        assert!(page.contains("<dt>Taken on</dt><dd>not recorded"));
        let devices = &page[page.find("class=\"snapshot-devices\"").expect("devices")..];
        let row = &devices[devices.find("<tr data-device=\"0\">").expect("GPU 0")..];
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(row.contains("<td>GPU 0</td><td>not recorded in the snapshot</td>"));
        let d = &report_of(&path).devices[0];
        assert!(row.contains(&format!(">{}</td>", format_bytes(d.reserved_bytes))));
        assert!(!page.contains("total 0 B") && !page.contains("(unknown)"));
        // The run list: no node "import" as the run's machine.
        let (_, overview) = get(&app, "/").await;
        let row = &overview[overview
            .find(&format!("href=\"/runs/{run}\""))
            .expect("listed")..];
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(row.contains("not recorded (snapshot)"), "{row}");
        assert!(!row.contains(">import<"), "{row}");
        // With `--node NAME` the import says where it was taken.
        let named = store_snapshot_file(&store, &path, "snap:named", 2).await;
        let (_, page) = get(&app, &format!("/runs/{named}")).await;
        assert!(page.contains("<dt>Taken on</dt><dd>h100</dd>"));
    }
}
