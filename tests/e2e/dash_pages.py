#!/usr/bin/env python3
"""Checks the dashboard's pages of real recordings (tests/e2e/dashboard.sh).

    dash_pages.py [--kinds FILE] BASE_URL RUN_ID:SCENARIO_JSON[:NAME]...

NAME names a run without a scenario (a PyTorch snapshot); otherwise the scenario's folder
does. Prints which run is which of issue 34's kinds of run (and writes that map to FILE).

For each run page (server HTML as the browser receives it):
- the status badge in the title matches how the program ended (scenario.json: its
  `exit_code` and the truth's `failed`/`kind`): OOM, crashed (exit N), recovered, ok;
  and only an OOM run shows red verdict or refused-request badges, or red failure marks
  on its charts (a recovered run's marks are orange);
- no byte figure is negative, and no figure is written with two signs ("+ +", "+ -");
- the page weighs at most 300 KB;
- every chart line has at most two vertices per pixel of its plot width;
- every chart has a legend (a swatch row above its plot), and the framework memory
  chart of each device draws one pool line per process whose allocator statistics in the
  capture (PJRT memory statistics with a pool size) name a pool on that device: one
  "allocator pool" for one process, "pid N pool" for each of several, summed;
- a run whose process exit was not recorded (an attach) says "not recorded", never
  "running", once it has ended;
- an attach's page shows what was held before it (its own line and chart series), calls
  nothing "unexplained" and writes no driver figure of 0 B beside the pool.
Prints one line per page; exit 1 when a check failed.
"""

import json
import os
import re
import struct
import sys
import urllib.request
import zlib

MAX_PAGE = 300 * 1024
NEG_BYTES = re.compile(r"(?<![\w.])-\s?\d+(\.\d+)?\s?(B|KiB|MiB|GiB|TiB)\b")
TWO_SIGNS = re.compile(r"[+-]\s*[+-]\s?\d+(\.\d+)?\s?(B|KiB|MiB|GiB|TiB)\b")
TITLE = re.compile(r"<h1>(.*?)</h1>", re.S)
BADGE = re.compile(r'<span[^>]*class="badge (\w+)"[^>]*>([^<]*)</span>')

# Issue 34's ten kinds of run (and the other real recordings the test loads), by the
# folder of their scenario (or the snapshot's name).
KINDS = {
    "025_leak_torch": "a PyTorch leak",
    "jax_scan_temp": "a scan temp OOM",
    "018_same_process_pool": "JAX + PyTorch in one process",
    "000_no_donation": "an update without donation",
    "034_limit_small": "a fraction too small",
    "005_crash": "a ValueError crash (PyTorch)",
    "009_crash": "a ValueError crash (JAX, after preallocating)",
    "026_recovered": "a run that recovered from refused preallocations",
    "h200_jax_attach_leak": "an attach to a leaking JAX job",
    "jax_train": "two JAX workers (two H100s)",
    "torch-snapshots/leak.pickle": "a PyTorch snapshot",
    "017_launcher": "a launcher of three JAX workers, one leaking",
    "001_no_oom": "a CuPy run that fits",
    "torch_ddp": "two PyTorch DDP workers (two H100s)",
    "jax_leak_bfc": "a JAX leak (H100)",
    "jax_exec_temp": "an execute temp OOM (H100)",
    "jax_mlp_fits": "a JAX model that fits (H100)",
    "torch-snapshots/train_snapshot.pickle": "a PyTorch training snapshot",
}
PJRT_MEMORY_STATS = 9
POOL_BYTES_FLAG = 8


def pools_in_capture(path):
    """{device: {pid}}: the processes whose PJRT memory statistics give a pool size."""
    data = open(path, "rb").read()
    out = {}
    pos = 16
    while pos + 9 <= len(data):
        (ln,) = struct.unpack_from("<I", data, pos)
        body = data[pos + 4: pos + 4 + ln]
        if len(body) < ln or pos + 8 + ln > len(data):
            break
        (crc,) = struct.unpack_from("<I", data, pos + 4 + ln)
        if zlib.crc32(body) == crc and body[0] == PJRT_MEMORY_STATS and ln >= 1 + 20 + 32:
            pid, _ts, device, flags = struct.unpack_from("<IQiI", body, 1)
            (pool,) = struct.unpack_from("<q", body, 1 + 20 + 24)
            if flags & POOL_BYTES_FLAG and pool > 0:
                out.setdefault(device, set()).add(pid)
        pos += 8 + ln
    return out


def expected_status(scenario):
    code = scenario.get("exit_code")
    # The generator's `truth` (testdata/h200-gen) or the corpus' `expect` (oom-corpus).
    truth = scenario.get("truth") or scenario.get("expect") or {}
    if code == 0:
        return {"recovered"} if truth.get("kind") == "recovered" else {"ok", "recovered"}
    if truth.get("failed", truth.get("failure")):
        return {"OOM"}
    return {f"crashed: exit {code}"}


def text_of(html):
    """The page without its SVG markup and tags (figures a reader sees)."""
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    html = re.sub(r"<script.*?</script>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def svg_texts(html):
    return [t.strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", html, re.S)]


def check_charts(html, problems):
    for svg in re.findall(r"<svg.*?</svg>", html, re.S):
        width = int(re.search(r'width="(\d+)"', svg).group(1))
        for pts in re.findall(r'points="([^"]*)"', svg):
            n = len(pts.split())
            if n > 2 * width + 8:
                problems.append(f"a chart line has {n} vertices for a {width} px chart")
        labels = svg_texts(svg)
        # Every chart has a colour legend: its first row of entries sits at y = 16, above
        # the plot (which starts at y >= 26).
        if not re.search(r'<text[^>]* y="16"', svg):
            problems.append(f"a chart has no legend (its texts: {labels[:4]})")
        for t in labels:
            if NEG_BYTES.search(t):
                problems.append(f"negative figure in a chart: {t!r}")
        ticks = [t for t in labels if re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB|TiB)", t)]
        if len(ticks) != len(set(ticks)):
            problems.append(f"repeated axis labels: {ticks}")


def check_pools(html, pools, problems):
    """Each framework memory chart draws one pool line per process pool of its device."""
    for m in re.finditer(r"Inside the pool: JAX / PJRT on GPU (\d+)", html):
        svg = re.search(r"<svg.*?</svg>", html[m.end():], re.S)
        if not svg:
            problems.append(f"GPU {m.group(1)}: the framework section has no chart")
            continue
        labels = svg_texts(svg.group(0))
        want = pools.get(int(m.group(1)), set())
        per_pid = [int(x) for t in labels for x in re.findall(r"^pid (\d+) pool$", t)]
        single = labels.count("allocator pool")
        if len(want) > 1:
            ok = sorted(per_pid) == sorted(want) and single == 0 and any(
                t == f"pools summed ({len(want)} processes)" for t in labels)
        else:
            ok = not per_pid and single == len(want)
        if not ok:
            problems.append(f"GPU {m.group(1)}: pool lines {per_pid or single} for the "
                            f"capture's process pools {sorted(want)}")


def check_attach(base, run, html, text, problems):
    """An attach's page: what was held before it, no 0 B driver figure, nothing unexplained."""
    for needle in ("Held before attach:", "held before attach (device used at attach)"):
        if needle not in html:
            problems.append(f"the attach's page lacks {needle!r}")
    for bad in ("unexplained", "peak 0 B", "The driver saw 0 B"):
        if bad in text:
            problems.append(f"the attach's page says {bad!r}")
    if any(t == "peak 0 B" for t in svg_texts(html)):
        problems.append("an attach's chart marks a peak of 0 B")
    with urllib.request.urlopen(f"{base}/runs/{run}/peak?device=0") as r:
        if "unexplained" in text_of(r.read().decode()):
            problems.append("the attach's Peak page calls something unexplained")


def check_page(base, run, scenario, capture):
    with urllib.request.urlopen(f"{base}/runs/{run}") as r:
        raw = r.read()
    html = raw.decode()
    problems = []
    if len(raw) > MAX_PAGE:
        problems.append(f"page weighs {len(raw)} bytes (> {MAX_PAGE})")
    title = TITLE.search(html)
    badges = BADGE.findall(title.group(1)) if title else []
    shown = {b[1] for b in badges}
    want = expected_status(scenario) if scenario else None
    if want is not None and not shown & want:
        problems.append(f"status {sorted(shown)}, expected one of {sorted(want)}")
    # Red is for a run that ran out of memory: anything else (recovered, ok, crashed)
    # shows no red verdict or refused-request badge.
    if want is not None and "OOM" not in want:
        # The charts' failure marks in the red of an OOM (render::chart::FAIL).
        for red in ('class="badge bad"', "verdict failure", "refused failure", "#C8001E"):
            if red in html:
                problems.append(f"a run that did not run out of memory shows {red}")
    text = text_of(html)
    for m in NEG_BYTES.finditer(text):
        problems.append(f"negative figure: {text[max(0, m.start() - 60):m.end()]!r}")
    for m in TWO_SIGNS.finditer(text):
        problems.append(f"two signs: {text[max(0, m.start() - 60):m.end()]!r}")
    check_charts(html, problems)
    if capture:
        check_pools(html, pools_in_capture(capture), problems)
    if "live" not in shown and re.search(r"<td>\s*running[^<]*</td>", html):
        problems.append("a process of an ended run is said to be running")
    if "pre-attach-baseline" in html:
        check_attach(base, run, html, re.sub(r"\s+", " ", text), problems)
    return len(raw), sorted(shown), problems


def main():
    args = sys.argv[1:]
    kinds_file = None
    if args[:1] == ["--kinds"]:
        kinds_file, args = args[1], args[2:]
    base = args[0]
    failed = False
    kinds = []
    for arg in args[1:]:
        run, _, rest = arg.partition(":")
        path, _, name = rest.partition(":")
        scenario = json.load(open(path)) if path else None
        if path:
            name = os.path.basename(os.path.dirname(os.path.normpath(path)))
        capture = os.path.join(os.path.dirname(path), "capture.mwcap") if path else None
        if capture and not os.path.isfile(capture):
            capture = None
        size, shown, problems = check_page(base, run, scenario, capture)
        kind = KINDS.get(name, "")
        kinds.append(f"run {run}: {name}: {kind or '-'}: status {', '.join(shown)}")
        if problems:
            failed = True
            for p in problems:
                print(f"e2e: FAIL real {name} (run {run}): {p}")
        else:
            print(f"e2e: ok   real {name} (run {run}): status {shown}, {size} bytes")
    for line in kinds:
        print(f"e2e: kind {line}")
    if kinds_file:
        with open(kinds_file, "w") as f:
            f.write("\n".join(kinds) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
