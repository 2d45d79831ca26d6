#!/usr/bin/env python3
"""Checks what the daemon container stored against what the programs did (tests/e2e/containers.sh).

Every program of the test is the shim's C test program (`mwtest`) over the simulated
runtime, started with a tag as its last argument. Its output, saved as EXPECT_DIR/TAG.txt,
is the capture's ground truth:
  * `basic` prints one `E api kind mem_kind result ptr size device errno=..` line per call
    the shim must record, in call order (agents/preload/tests/c/mwtest.c);
  * `threads N` makes, on each of 8 threads t, hipSetDevice(t) then N pairs
    hipMalloc((t+1)*4096+i) / hipFree of that pointer.
The stored side is read through the daemon's API only: /api/runs, /api/runs/{id} (its
processes and devices) and /api/runs/{id}/events, paged, per device.

  containers_check.py URL TOKEN_FILE total EXPECT_DIR   events the programs made (one number)
  containers_check.py URL TOKEN_FILE stored             events stored in all runs (one number)
  containers_check.py URL TOKEN_FILE snapshot OUT.json  every run's stored event count (one
      request, so that it is taken right before the daemon is killed)
  containers_check.py URL TOKEN_FILE web NODE
      /metrics answers 401 without the token and with it the live and peak bytes of every
      run and device as the API states them, no commit errors; the dashboard's overview
      (naming NODE), a run page and its PNG chart answer; without the token a page sends
      the browser to /login
  containers_check.py URL TOKEN_FILE verify EXPECT_DIR [SNAPSHOT.json]
      each tagged process's stored events equal its program's calls, event for event, in
      order, none twice and none missing; no run holds processes of two containers (tags
      are CONTAINER-NAME); every run's event_count is the sum of its processes' events;
      with SNAPSHOT, every run stored then is still stored, with at least as many events.
Exit 0: all checks passed; 1: a check failed (the differences are printed); 2: bad usage.
"""

import json
import pathlib
import re
import sys
import urllib.error
import urllib.request

# The wire format's numbering (agents/wire/src/event.rs: EventKind, MemKind; "append new
# variants, never renumber"), which mwtest prints and the API names.
KINDS = {1: "alloc", 2: "free", 3: "alloc_failed", 4: "api_span", 5: "free_failed", 6: "set_device"}
MEM_KINDS = {0: "none", 1: "device", 2: "host_pinned", 3: "managed", 4: "vmm_physical",
             5: "vmm_map", 6: "vmm_reserve", 7: "stream_pool", 8: "pool_object", 9: "pjrt_buffer"}
THREADS = re.compile(r"^threads-(\d+)$")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class Api:
    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token
        self.opener = urllib.request.build_opener(NoRedirect)

    def raw(self, path, token=True, accept="*/*"):
        """(status, content type, body bytes), redirects not followed."""
        headers = {"Accept": accept}
        if token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, headers=headers)
        try:
            with self.opener.open(req, timeout=30) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read()

    def get(self, path):
        status, _, body = self.raw(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body[:200]!r}")
        return json.loads(body)

    def runs(self):
        return self.get("/api/runs?limit=10000")["runs"]

    def events(self, run_id, device):
        out, cursor = [], ""
        while True:
            page = self.get(f"/api/runs/{run_id}/events?device={device}&limit=5000"
                            + (f"&cursor={cursor}" if cursor else ""))
            out += page["events"]
            cursor = page["next_cursor"]
            if cursor is None:
                return out


def tag_of(argv):
    """The tag the test gave a program: its last argument, CONTAINER-MODE-INDEX."""
    return argv[-1] if len(argv) >= 4 and argv[-1].count("-") >= 2 else None


def mode_of(tag):
    """`basic` or `threads-N`: the middle of CONTAINER-MODE-INDEX."""
    return tag.split("-", 1)[1].rsplit("-", 1)[0]


def stored(api):
    """{tag: [event, ...] in call order}, plus problems found on the way."""
    by_tag, problems = {}, []
    for run in api.runs():
        detail = api.get(f"/api/runs/{run['id']}")
        evs = [e for d in detail["devices"] for e in api.events(run["id"], d["device"])]
        if len(evs) != run["event_count"]:
            problems.append(f"run {run['id']}: event_count {run['event_count']} but "
                            f"{len(evs)} events readable from its devices")
        containers = set()
        for p in detail["processes"]:
            tag = tag_of(p["argv"])
            if tag is None:
                continue
            containers.add(tag.split("-", 1)[0])
            # Call order: one thread's events by time (threads: thread by thread).
            by_thread = THREADS.match(mode_of(tag))
            mine = sorted((e for e in evs if e["pid"] == p["pid"]),
                          key=lambda e: (e["tid"] if by_thread else 0, e["ts_ns"]))
            if tag in by_tag:
                problems.append(f"process {tag} stored twice (run {run['id']} and another)")
            by_tag[tag] = mine
        if len(containers) > 1:
            problems.append(f"run {run['id']} ({run['run_key']}) holds processes of "
                            f"{len(containers)} containers: {sorted(containers)}")
    return by_tag, problems


def as_tuple(e):
    return (e["api"], e["kind"], e["mem_kind"], e["result"], e["ptr"], e["size"], e["device"])


def expected_basic(text):
    out = []
    for line in text.splitlines():
        if not line.startswith("E "):
            continue
        f = line.split()
        ptr = f[5][1:] if f[5].startswith("h") else f[5]
        out.append((f[1], KINDS[int(f[2])], MEM_KINDS[int(f[3])], int(f[4]), int(ptr, 16),
                    int(f[6]), int(f[7])))
    return out


def check_threads(tag, n, evs):
    """8 threads: set_device(t), then n x (alloc (t+1)*4096+i, free of that pointer)."""
    by_tid = {}
    for e in evs:
        by_tid.setdefault(e["tid"], []).append(e)
    if len(by_tid) != 8:
        return [f"{tag}: events of {len(by_tid)} threads, want 8"]
    problems = []
    for tid, t in by_tid.items():
        dev = t[0]["device"]
        if (t[0]["api"], t[0]["kind"]) != ("hipSetDevice", "set_device"):
            problems.append(f"{tag} tid {tid}: first event {as_tuple(t[0])}, want hipSetDevice")
            continue
        if len(t) != 1 + 2 * n:
            problems.append(f"{tag} tid {tid}: {len(t)} events, want {1 + 2 * n}")
            continue
        for i in range(n):
            a, f = t[1 + 2 * i], t[2 + 2 * i]
            want_a = ("hipMalloc", "alloc", "device", 0, a["ptr"], (dev + 1) * 4096 + i, dev)
            want_f = ("hipFree", "free", "device", 0, a["ptr"], 0, dev)
            if as_tuple(a) != want_a or as_tuple(f) != want_f:
                problems.append(f"{tag} tid {tid} pair {i}: {as_tuple(a)} {as_tuple(f)}, "
                                f"want {want_a} {want_f}")
                break
    return problems


def expectations(expect_dir):
    """{tag: list of expected tuples, or ("threads", n)}."""
    out = {}
    for f in sorted(pathlib.Path(expect_dir).glob("*.txt")):
        tag = f.stem
        m = THREADS.match(mode_of(tag))
        out[tag] = ("threads", int(m.group(1))) if m else expected_basic(f.read_text())
    return out


def count(exp):
    return 8 * (1 + 2 * exp[1]) if exp and exp[0] == "threads" else len(exp)


def verify(api, expect_dir, snapshot):
    want = expectations(expect_dir)
    got, problems = stored(api)
    compared = 0
    for tag, exp in want.items():
        evs = got.get(tag)
        if evs is None:
            problems.append(f"{tag}: no process with this tag stored")
            continue
        if exp and exp[0] == "threads":
            problems += check_threads(tag, exp[1], evs)
            compared += len(evs)
            continue
        have = [as_tuple(e) for e in evs]
        for i, (h, w) in enumerate(zip(have, exp)):
            if h != w:
                problems.append(f"{tag}: event {i} stored as {h}, the program made {w}")
                break
        if len(have) != len(exp):
            problems.append(f"{tag}: {len(have)} events stored, the program made {len(exp)} "
                            "recorded calls")
        compared += min(len(have), len(exp))
    for tag in sorted(set(got) - set(want)):
        problems.append(f"{tag}: stored, but no program of the test has this tag")
    if snapshot:
        before = json.loads(pathlib.Path(snapshot).read_text())
        now = {str(r["id"]): r["event_count"] for r in api.runs()}
        for run, n in before.items():
            if now.get(run, -1) < n:
                problems.append(f"run {run}: {n} events stored before the daemon was killed, "
                                f"{now.get(run)} now")
        print(f"check: {len(before)} runs with {sum(before.values())} events stored before the "
              "kill are all still stored")
    for p in problems[:40]:
        print("check: FAIL", p)
    if len(problems) > 40:
        print(f"check: ... and {len(problems) - 40} more")
    print(f"check: {len(want)} programs, {compared} events compared event for event, "
          f"{len(problems)} problems")
    return 1 if problems else 0


def web(api, node):
    problems = []
    status, _, _ = api.raw("/metrics", token=False)
    if status != 401:
        problems.append(f"/metrics without the token: {status}, want 401")
    status, ctype, body = api.raw("/metrics")
    if status != 200 or not ctype.startswith("text/plain"):
        problems.append(f"/metrics: {status} {ctype}")
    values, newest = {}, None
    for line in body.decode().splitlines():
        # "# HELP memwatch_run_live_bytes ... (newest 100 runs)": the gauges' own scope.
        m = re.match(r"# HELP memwatch_run_live_bytes .*\(newest (\d+) runs\)", line)
        if m:
            newest = int(m.group(1))
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    if values.get("memwatch_ingest_commit_errors_total") != 0:
        problems.append("memwatch_ingest_commit_errors_total is "
                        f"{values.get('memwatch_ingest_commit_errors_total')}, want 0")
    runs = api.runs()
    gauges = 0
    for run in sorted(runs, key=lambda r: -r["id"])[:newest]:
        for d in run["devices"]:
            labels = f'{{run="{run["id"]}",run_key="{run["run_key"]}",device="{d["device"]}"}}'
            for metric, field in (("memwatch_run_live_bytes", "live_bytes"),
                                  ("memwatch_run_peak_bytes", "peak_bytes")):
                got = values.get(metric + labels)
                gauges += 1
                if got != d[field]:
                    problems.append(f"{metric}{labels} = {got}, the API says {d[field]}")
    html = "text/html,application/xhtml+xml"
    status, ctype, body = api.raw("/", accept=html)
    if status != 200 or not ctype.startswith("text/html") or node.encode() not in body:
        problems.append(f"dashboard /: {status} {ctype}, node {node} named: {node.encode() in body}")
    status, _, _ = api.raw("/", token=False, accept=html)
    if status != 303:
        problems.append(f"dashboard / without the token: {status}, want 303 to /login")
    if runs:
        rid = runs[0]["id"]
        status, ctype, body = api.raw(f"/runs/{rid}", accept=html)
        if status != 200 or f"Run #{rid}".encode() not in body:
            problems.append(f"dashboard /runs/{rid}: {status} {ctype}")
        status, ctype, body = api.raw(f"/runs/{rid}/export/chart.png")
        if status != 200 or ctype != "image/png" or not body.startswith(b"\x89PNG"):
            problems.append(f"/runs/{rid}/export/chart.png: {status} {ctype}")
    else:
        problems.append("no run stored")
    for p in problems:
        print("check: FAIL", p)
    print(f"check: /metrics ({gauges} run gauges of the newest {newest} runs equal to the API's "
          "figures), dashboard "
          f"pages: {len(problems)} problems")
    return 1 if problems else 0


def main(argv):
    if len(argv) < 4 or argv[3] not in ("total", "stored", "snapshot", "verify", "web"):
        print(__doc__, file=sys.stderr)
        return 2
    token = pathlib.Path(argv[2]).read_text().splitlines()[0].strip()
    api = Api(argv[1], token)
    cmd, rest = argv[3], argv[4:]
    if cmd == "total":
        print(sum(count(e) for e in expectations(rest[0]).values()))
    elif cmd == "stored":
        print(sum(r["event_count"] for r in api.runs()))
    elif cmd == "snapshot":
        counts = {str(r["id"]): r["event_count"] for r in api.runs()}
        pathlib.Path(rest[0]).write_text(json.dumps(counts))
        print(sum(counts.values()))
    elif cmd == "web":
        return web(api, rest[0])
    else:
        return verify(api, rest[0], rest[1] if len(rest) > 1 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
