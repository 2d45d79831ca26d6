#!/usr/bin/env python3
"""Checks the dashboard's pages of real recordings (tests/e2e/dashboard.sh).

    dash_pages.py BASE_URL RUN_ID:SCENARIO_JSON...

For each run page (server HTML as the browser receives it):
- the status badge in the title matches how the program ended (scenario.json: its
  `exit_code` and the truth's `failed`/`kind`): OOM, crashed (exit N), recovered, ok;
  and only an OOM run shows red verdict or refused-request badges, or red failure marks
  on its charts (a recovered run's marks are orange);
- no byte figure is negative, and no figure is written with two signs ("+ +", "+ -");
- the page weighs at most 300 KB;
- every chart line has at most two vertices per pixel of its plot width;
- every chart has a legend (a swatch row above its plot), and the framework memory
  chart draws one pool line per process pool it names.
Prints one line per page; exit 1 when a check failed.
"""

import json
import os
import re
import sys
import urllib.request

MAX_PAGE = 300 * 1024
NEG_BYTES = re.compile(r"(?<![\w.])-\s?\d+(\.\d+)?\s?(B|KiB|MiB|GiB|TiB)\b")
TWO_SIGNS = re.compile(r"[+-]\s*[+-]\s?\d+(\.\d+)?\s?(B|KiB|MiB|GiB|TiB)\b")
TITLE = re.compile(r"<h1>(.*?)</h1>", re.S)
BADGE = re.compile(r'<span[^>]*class="badge (\w+)"[^>]*>([^<]*)</span>')


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


def check_page(base, run, scenario):
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
    return len(raw), sorted(shown), problems


def main():
    base = sys.argv[1]
    failed = False
    for arg in sys.argv[2:]:
        run, _, path = arg.partition(":")
        scenario = json.load(open(path)) if path else None
        size, shown, problems = check_page(base, run, scenario)
        name = os.path.basename(os.path.dirname(os.path.normpath(path))) if path else f"run {run}"
        if problems:
            failed = True
            for p in problems:
                print(f"e2e: FAIL real {name} (run {run}): {p}")
        else:
            print(f"e2e: ok   real {name} (run {run}): status {shown}, {size} bytes")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
