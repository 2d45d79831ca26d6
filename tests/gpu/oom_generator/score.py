"""Scores the OOM doctor on recorded generator scenarios against their truth.

    python3 score.py OUTDIR --from-run [NAME ...]      # the verdict `memwatch run` printed at exit
    python3 score.py OUTDIR --mw BIN [NAME ...]        # re-diagnosed now with `BIN diagnose`
    (--json FILE writes the per-scenario results)

A scenario is right when the doctor's `failed` matches the truth, the verdict's kind matches
(the first failure verdict for a failed run; for a run that did not fail, no failure verdict
and, where the truth names a warning kind, a warning of that kind), and the holder matches:
the verdict's `holder` names the framework and the process (the program itself, one worker of
a launcher by pid, or another process). Figures the scenario knows exactly are compared within
1 %. Needs only Python's standard library: it runs here or on the GPU machine.
"""
import json
import os
import re
import statistics
import subprocess
import sys
from collections import Counter, defaultdict

TIMING = re.compile(r"report and verdict done ([0-9.]+) s after the command exited")


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def diagnosis(d, mw):
    """The doctor's JSON for scenario folder d: from run.json, or from `mw diagnose` now."""
    if mw is None:
        run = load_json(os.path.join(d, "run.json")) or {}
        return run.get("diagnosis"), None
    args = [mw, "diagnose"]
    for f in ("capture.mwcap", "stderr.log", "snapshot.pickle"):
        if os.path.isfile(os.path.join(d, f)):
            args.append(os.path.join(d, f))
    if os.environ.get("GEN_USE_NVSMI") == "1" and os.path.isfile(os.path.join(d, "nvsmi.csv")):
        args.append(os.path.join(d, "nvsmi.csv"))
    if os.path.isdir(os.path.join(d, "dump")):
        args += ["--xla-dump", os.path.join(d, "dump")]
    p = subprocess.run(args + ["--json"], capture_output=True, text=True)
    try:
        return json.loads(p.stdout), None
    except ValueError:
        return None, f"diagnose exited {p.returncode}: {p.stderr.strip()[:200]}"


def truth_pids(d, sc):
    """pid of the program itself, of each launcher rank, and of the holder process."""
    pids = {}
    main = load_json(os.path.join(d, "figures.json")) or {}
    if "pid" in main:
        pids["self"] = main["pid"]
    for f in os.listdir(d):
        m = re.fullmatch(r"figures\.rank(\d+)\.json", f)
        if m:
            pids[f"rank{m.group(1)}"] = (load_json(os.path.join(d, f)) or {}).get("pid")
    if "holder_pid" in main:
        pids["other"] = main["holder_pid"]
    elif isinstance(main.get("holder"), str) and main["holder"].startswith("held "):
        pids["other"] = int(main["holder"].split()[2])
    return pids


def judge(d, sc, doc):
    t = sc["truth"]
    res = {"name": sc["name"], "cause": sc["cause"], "want": t["kind"], "want_failed": t["failed"],
           "exit_code": sc.get("exit_code")}
    if doc is None:
        res.update(got=None, right=False, why="no diagnosis")
        return res
    verdicts = doc.get("verdicts", [])
    failures = [v for v in verdicts if v.get("failure")]
    warnings = [v for v in verdicts if not v.get("failure")]
    res["got_failed"] = bool(doc.get("failed"))
    v = None
    if t["failed"]:
        v = failures[0] if failures else None
        res["got"] = v["kind"] if v else None
        kind_ok = v is not None and v["kind"] == t["kind"]
    else:
        v = next((w for w in warnings if w["kind"] == t["kind"]), None) if t["kind"] else None
        res["got"] = (failures[0]["kind"] if failures else
                      (v["kind"] if v else (warnings[0]["kind"] if warnings else None)))
        kind_ok = not failures and (t["kind"] is None or v is not None)
    failed_ok = res["got_failed"] == t["failed"]
    holder_ok, why = True, ""
    want_h = t.get("holder")
    if want_h and v is not None:
        got_h = v.get("holder") or {}
        pids = truth_pids(d, sc)
        if want_h.get("framework") and got_h.get("framework") != want_h["framework"]:
            holder_ok, why = False, f"holder framework {got_h.get('framework')} (want {want_h['framework']})"
        proc = want_h.get("process")
        if proc == "other":
            if not got_h.get("other_process"):
                holder_ok, why = False, "holder is not another process"
        elif proc in pids and pids[proc] is not None and got_h.get("pid") != pids[proc]:
            holder_ok, why = False, f"holder pid {got_h.get('pid')} (want {proc} = {pids[proc]})"
    elif want_h and v is None:
        holder_ok = False
    figs_ok, fig_notes = True, []
    for name, want in t.get("figures", {}).items():
        got = (v or {}).get("figures", {}).get(name)
        good = got is not None and abs(got - want) <= 0.01 * want
        figs_ok &= good
        fig_notes.append(f"{name} {got} (want {want})")
    res.update(kind_ok=kind_ok, failed_ok=failed_ok, holder_ok=holder_ok, figures_ok=figs_ok,
               right=kind_ok and failed_ok and holder_ok, figures=fig_notes,
               headline=doc.get("headline", "")[:200],
               why=why or ("" if failed_ok else f"failed={res['got_failed']} (want {t['failed']})"))
    return res


def exit_to_verdict(d):
    try:
        m = TIMING.findall(open(os.path.join(d, "stderr.log"), errors="replace").read())
    except OSError:
        return None
    return float(m[-1]) if m else None


def main(argv):
    out = argv[0]
    mw = None
    names = []
    rest = iter(argv[1:])
    jpath = None
    for a in rest:
        if a == "--mw":
            mw = os.path.abspath(next(rest))
        elif a == "--from-run":
            mw = None
        elif a == "--json":
            jpath = next(rest)
        else:
            names.append(a)
    if not names:
        names = sorted(n for n in os.listdir(out) if os.path.isfile(os.path.join(out, n, "scenario.json")))
    results, times, void = [], [], []
    for n in names:
        d = os.path.join(out, n)
        sc = load_json(os.path.join(d, "scenario.json"))
        if sc is None:
            continue
        doc, err = diagnosis(d, mw)
        r = judge(d, sc, doc)
        if sc["truth"]["failed"] and sc.get("exit_code") == 0:
            # Drawn to fail, but the program ran to its end: the generator's sizes missed,
            # so the truth is void. Shown, and left out of the accuracy.
            print(f"VOID {n}: drawn to fail ({r['want']}) but exited 0; doctor said "
                  f"failed={r.get('got_failed')} {r.get('got')}")
            r["void"] = True
            void.append(r)
            continue
        if err:
            r["why"] = err
        t = exit_to_verdict(d)
        if t is not None:
            times.append(t)
            r["exit_to_verdict_s"] = t
        results.append(r)
        mark = "PASS" if r["right"] else "FAIL"
        print(f"{mark} {n}: want {r['want']} (failed={r['want_failed']}), got {r.get('got')} "
              f"(failed={r.get('got_failed')}) exit {r['exit_code']} {r.get('why', '')}")
        if r.get("figures"):
            print(f"     figures {'ok' if r.get('figures_ok') else 'OFF'}: {'; '.join(r['figures'])}")
        if not r["right"] and r.get("headline"):
            print(f"     {r['headline']}")
    by = defaultdict(list)
    for r in results:
        by[r["cause"]].append(r)
    print("\naccuracy per cause (right kind, failed/not and holder):")
    for c in sorted(by):
        k = sum(r["right"] for r in by[c])
        print(f"  {c:<22} {k:>3}/{len(by[c]):<3}")
    right = sum(r["right"] for r in results)
    figs = [r for r in results if r.get("figures")]
    print(f"\nright: {right}/{len(results)} ({100 * right / max(1, len(results)):.1f} %)"
          f"{f'; {len(void)} void (drawn to fail, exited 0)' if void else ''}")
    print(f"figures within 1 %: {sum(r['figures_ok'] for r in figs)}/{len(figs)}")
    false_fail = [r["name"] for r in results + void if r["exit_code"] == 0 and r.get("got_failed")]
    print(f"failure called on a run that exited 0: {len(false_fail)} {false_fail}")
    unexpl = [r["name"] for r in results if r.get("got") == "unexplained"]
    print(f"unexplained: {len(unexpl)} {unexpl}")
    conf = Counter((str(r["want"]), str(r.get("got"))) for r in results)
    kinds = sorted({k for pair in conf for k in pair})
    print("\nconfusion (rows: truth, columns: verdict)")
    w = max(8, *(len(k) for k in kinds))
    print(" " * (w + 1) + " ".join(f"{k[:10]:>10}" for k in kinds))
    for a in kinds:
        if any(conf[(a, b)] for b in kinds):
            print(f"{a:<{w}} " + " ".join(f"{conf[(a, b)] or '.':>10}" for b in kinds))
    if times:
        print(f"\nexit-to-verdict: n={len(times)} min {min(times):.3f} s, median "
              f"{statistics.median(times):.3f} s, max {max(times):.3f} s")
    if jpath:
        json.dump(results, open(jpath, "w"), indent=1)
    return right >= 0.95 * len(results)


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1:]) else 1)
