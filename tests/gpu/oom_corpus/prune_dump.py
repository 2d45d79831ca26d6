"""Keeps an XLA dump small enough for the repository without losing what a diagnosis reads.

  python3 prune_dump.py DUMP_DIR FIGURES.json

The modules the program named in its figures (`executable`, `resident_executable`, the keys
of `executables`) keep every text file of the stages memwatch reads (before_optimizations,
after_optimizations, buffer assignment and its values, memory-usage report, live ranges) —
or, when compilation failed before those existed, every text file they have. Every other
module keeps its memory-usage report and buffer assignment only, so the dump still lists
every executable the program compiled. Other pass dumps, and folders left empty, are removed.
"""
import json
import os
import re
import sys

KEEP_SUFFIXES = ("before_optimizations.txt", "_gpu_after_optimizations.txt",
                 "-buffer-assignment.txt", "-buffer-assignment-values.txt",
                 "-memory-usage-report.txt", "-live-range.txt")
OTHER_SUFFIXES = ("-buffer-assignment.txt", "-memory-usage-report.txt")

dump, figures = sys.argv[1], sys.argv[2]
fig = json.load(open(figures)) if os.path.exists(figures) else {}
focus = {fig.get("executable"), fig.get("resident_executable"), *(fig.get("executables") or {}).keys()}
focus = {f[len("jit_"):] if f and f.startswith("jit_") else f for f in focus if f}
name_re = re.compile(r"^module_\d+\.jit_(.+?)\.(?:sm_|before_|after_|[a-z_]+\.txt)")
by_module = {}
for f in os.listdir(dump):
    if not os.path.isfile(os.path.join(dump, f)):
        continue
    m = name_re.match(f)
    by_module.setdefault(m.group(1) if m else None, []).append(f)
removed = 0
for module, files in by_module.items():
    if module in focus:
        staged = [f for f in files if f.endswith(KEEP_SUFFIXES)]
        keep = set(staged) if any("after_optimizations" in f for f in staged) else set(files)
    else:
        keep = {f for f in files if f.endswith(OTHER_SUFFIXES)}
    for f in files:
        if f not in keep:
            os.remove(os.path.join(dump, f))
            removed += 1
for root, dirs, _ in os.walk(dump, topdown=False):
    for d in dirs:
        if not os.listdir(os.path.join(root, d)):
            os.rmdir(os.path.join(root, d))
print(f"prune_dump: {dump}: kept {sum(len(v) for v in by_module.values()) - removed}, removed {removed}")
