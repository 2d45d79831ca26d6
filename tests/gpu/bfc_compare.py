#!/usr/bin/env python3
"""Compare `memwatch replay --steps --json` output with a recorded run of the real
allocator, step by step. Usage: bfc_compare.py RECORDED.json REPLAY.json
Prints one JSON line: {"trace","steps","matched","oom_real","oom_model","exact","first_diff"}.
"""
import json
import sys

rec = json.load(open(sys.argv[1]))
rep = json.load(open(sys.argv[2]))
real, model = rec["steps"], rep.get("steps") or []
matched, first = 0, None
for i, (r, m) in enumerate(zip(real, model)):
    if (r["bytes_in_use"], r["largest_free_block_bytes"]) == (m["bytes_in_use"], m["largest_free_block_bytes"]):
        matched += 1
    elif first is None:
        first = {"step": i, "op": r["op"], "size": r.get("size"),
                 "real": [r["bytes_in_use"], r["largest_free_block_bytes"]],
                 "model": [m["bytes_in_use"], m["largest_free_block_bytes"]]}
exact = matched == len(real) == len(model) and rec.get("oom_step") == rep.get("oom_step")
print(json.dumps({"trace": sys.argv[1], "steps": len(real), "model_steps": len(model), "matched": matched,
                  "oom_real": rec.get("oom_step"), "oom_model": rep.get("oom_step"), "exact": exact,
                  "first_diff": first}))
