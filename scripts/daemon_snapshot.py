#!/usr/bin/env python3
"""Helper of scripts/daemon-snapshot.sh.

  daemon_snapshot.py URL OUTDIR             save the daemon's answers, one file per request
  daemon_snapshot.py --compare A B [--mask] compare two such folders

Each file holds the status, the headers that carry meaning (content type, download name,
the chart's plot edges) and the body.
"""
import hashlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

HEADERS = ["content-type", "content-disposition", "x-plot-left", "x-plot-right",
           "x-range-from", "x-range-to", "x-memwatch-warning", "location"]


def fetch(base, path):
    req = urllib.request.Request(base + path, headers={"Accept": "text/html,application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def wait_up(base):
    for _ in range(300):
        try:
            fetch(base, "/api/runs")
            return
        except OSError:
            time.sleep(0.1)
    sys.exit("daemon-snapshot: the daemon did not start")


def save(base, out, name, path, seen):
    status, headers, body = fetch(base, path)
    head = [f"GET {path}", f"status {status}"]
    for h in HEADERS:
        if headers.get(h) is not None:
            head.append(f"{h}: {headers.get(h)}")
    if (headers.get("content-type") or "").startswith("image/png"):
        body = f"png {len(body)} bytes sha256 {hashlib.sha256(body).hexdigest()}\n".encode()
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)
    assert safe not in seen, safe
    seen.add(safe)
    with open(os.path.join(out, safe), "wb") as f:
        f.write(("\n".join(head) + "\n\n").encode())
        f.write(body)
    return status, body


def snapshot(base, out):
    os.makedirs(out, exist_ok=True)
    wait_up(base)
    seen = set()
    get = lambda name, path: save(base, out, name, path, seen)  # noqa: E731
    for name, path in [
        ("api-nodes", "/api/nodes"), ("api-runs", "/api/runs"),
        ("api-runs-limit2", "/api/runs?limit=2"), ("api-incidents", "/api/incidents"),
        ("api-openapi", "/api/openapi.json"), ("api-run-missing", "/api/runs/9999"),
        ("api-run-bad", "/api/runs/x"), ("api-timeline-bad", "/api/runs/1/timeline?from=5&to=2"),
        ("api-events-badcursor", "/api/runs/1/events?cursor=zz"),
        ("page-overview", "/"), ("page-incidents", "/incidents"), ("page-xla", "/xla"),
        ("page-xla-json", "/xla?format=json"), ("page-gates", "/gates"),
        ("page-gates-json", "/gates?format=json"), ("page-gates-png", "/gates?format=png"),
        ("page-run-missing", "/runs/9999"), ("page-run-bad", "/runs/x"),
        ("page-compare-default", "/compare"), ("page-compare-12", "/compare?a=1&b=2"),
        ("page-compare-marker", "/compare?a=1&b=2&align=marker:nope"),
        ("page-compare-missing", "/compare?a=1&b=999"),
        ("static-css", "/static/memwatch.css"), ("static-js", "/static/memwatch.js"),
    ]:
        get(name, path)
    runs = json.loads(get("api-runs-all", "/api/runs?limit=10000")[1])["runs"]
    for node in json.loads(fetch(base, "/api/nodes")[2])["nodes"]:
        n = node["name"]
        get(f"api-ingest-pos-{n}", f"/api/ingest?node={n}&stream=1")
    for r in runs:
        rid = r["id"]
        p = f"/api/runs/{rid}"
        get(f"r{rid}-api", p)
        get(f"r{rid}-annotations", f"{p}/annotations")
        get(f"r{rid}-annotations-page", f"{p}/annotations?limit=2")
        get(f"r{rid}-page", f"/runs/{rid}")
        get(f"r{rid}-lanes", f"/runs/{rid}/lanes")
        get(f"r{rid}-perfetto", f"/runs/{rid}/export/perfetto.json")
        dur = max(r["duration_ns"], 1)
        get(f"r{rid}-page-zoom", f"/runs/{rid}?from={dur // 3}&to={dur // 3 + dur // 50 + 1}")
        get(f"r{rid}-lanes-zoom", f"/runs/{rid}/lanes?from={dur // 3}&to={dur // 3 + dur // 50 + 1}")
        devices = [d["device"] for d in r["devices"]] or [0]
        for d in devices:
            q = f"device={d}"
            get(f"r{rid}-d{d}-timeline", f"{p}/timeline?{q}")
            get(f"r{rid}-d{d}-timeline-50", f"{p}/timeline?{q}&points=50")
            get(f"r{rid}-d{d}-timeline-raw", f"{p}/timeline?{q}&from={dur // 2}&to={dur // 2 + 2000}&points=100")
            get(f"r{rid}-d{d}-timeline-mid", f"{p}/timeline?{q}&from={dur // 4}&to={dur // 4 * 3}&points=300")
            get(f"r{rid}-d{d}-peak", f"{p}/peak?{q}")
            get(f"r{rid}-d{d}-peak-top3", f"{p}/peak?{q}&top=3")
            get(f"r{rid}-d{d}-runtime", f"{p}/runtime?{q}")
            get(f"r{rid}-d{d}-runtime-small", f"{p}/runtime?{q}&points=10&limit=5&top=2")
            cursor, page = "", 0
            while page < 4:
                _, body = get(f"r{rid}-d{d}-events-{page}", f"{p}/events?{q}&limit=500&cursor={cursor}")
                cursor = json.loads(body).get("next_cursor")
                page += 1
                if not cursor:
                    break
            get(f"r{rid}-d{d}-events-window", f"{p}/events?{q}&from={dur // 3}&to={dur // 2}")
            get(f"r{rid}-d{d}-page-peak", f"/runs/{rid}/peak?{q}")
            get(f"r{rid}-d{d}-page-peak-json", f"/runs/{rid}/peak?{q}&format=json")
            for k, at in enumerate([0, dur // 5, dur // 2, dur * 9 // 10, dur]):
                get(f"r{rid}-d{d}-page-live-{k}", f"/runs/{rid}/peak?{q}&at={at}&format=json")
            get(f"r{rid}-d{d}-page-live-html", f"/runs/{rid}/peak?{q}&at={dur // 2}")
            get(f"r{rid}-d{d}-chart", f"/runs/{rid}/chart.svg?{q}")
            get(f"r{rid}-d{d}-export-svg", f"/runs/{rid}/export/chart.svg?{q}")
            get(f"r{rid}-d{d}-trace", f"/runs/{rid}/export/trace.jsonl?{q}")
        if rid == 1:
            get(f"r{rid}-export-png", f"/runs/{rid}/export/chart.png?device={devices[0]}")
    logs = re.findall(r"/incidents/logs/(\d+)", fetch(base, "/incidents")[2].decode())
    for lid in sorted(set(logs)):
        for fmt in ["", "?format=json", "?format=png"]:
            get(f"log{lid}{fmt}", f"/incidents/logs/{lid}{fmt}")
    mods = json.loads(fetch(base, "/xla?format=json")[2])["modules"]
    dumps = sorted({m["dump_id"] for m in mods})
    for dmp in dumps:
        get(f"xla-dump{dmp}", f"/xla?dump={dmp}&format=json")
    for m in mods[:12]:
        for fmt in ["", "?format=json"]:
            get(f"mod{m['id']}{fmt}", f"/xla/modules/{m['id']}{fmt}")
    if len(mods) > 1:
        get("mod-diff", f"/xla/modules/{mods[0]['id']}?diff={mods[1]['id']}")
        get("mod-diff-json", f"/xla/modules/{mods[0]['id']}?diff={mods[1]['id']}&format=json")
    print(f"daemon-snapshot: wrote {len(seen)} answers to {out}")


MASK_KEYS = ("created_unix_ns", "first_seen_unix_ns", "last_seen_unix_ns")
# Charts drawn over the wall clock of the imports (the gate history): compared only when
# the same database is served.
MASK_SKIP = ("page-gates", "page-gates-png")
WALL = re.compile(rb"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")


def masked(b):
    b = re.sub(rb'"(%s)":\s*-?\d+' % b"|".join(k.encode() for k in MASK_KEYS), rb'"\1":0', b)
    return WALL.sub(b"WALL", b)


def compare(a, b, mask):
    fa, fb = set(os.listdir(a)), set(os.listdir(b))
    bad = 0
    for n in sorted(fa ^ fb):
        print(f"only in {'A' if n in fa else 'B'}: {n}")
        bad += 1
    for n in sorted(fa & fb):
        if mask and n in MASK_SKIP:
            continue
        x = open(os.path.join(a, n), "rb").read()
        y = open(os.path.join(b, n), "rb").read()
        if mask:
            x, y = masked(x), masked(y)
        if x != y:
            print(f"differs: {n}")
            bad += 1
    print(f"daemon-snapshot: {len(fa & fb)} answers compared, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3], len(sys.argv) > 4 and sys.argv[4] == "--mask"))
    snapshot(sys.argv[1], sys.argv[2])
