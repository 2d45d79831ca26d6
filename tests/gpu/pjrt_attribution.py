"""Workloads and checks for tests/gpu/pjrt_attribution.sh (issue 9, PJRT attribution).

  python3 pjrt_attribution.py mlp TRUTH.json   # jax.jit(jax.value_and_grad(mlp)), 4 layers,
                                               # D=1024 F=4096 B=2048 bf16 (the fixture's program)
  python3 pjrt_attribution.py oom TRUTH.json   # jit_model whose temp does not fit the pool
  python3 pjrt_attribution.py compare TRUTH.json REPORT.json   # memwatch runtime --json vs truth

The workloads write what JAX itself says (compiled.memory_analysis(), device.memory_stats(),
the OOM message) to TRUTH.json; `compare` prints one PASS/FAIL line per check and exits 1
on any FAIL.
"""
import json
import sys
import time


def analysis_dict(compiled):
    ma = compiled.memory_analysis()
    keys = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "generated_code_size_in_bytes"]
    return {k: int(getattr(ma, k)) for k in keys if hasattr(ma, k)}


def mlp(out):
    import jax
    import jax.numpy as jnp

    D, F, B, L = 1024, 4096, 2048, 4
    key = jax.random.PRNGKey(0)
    params = []
    for _ in range(L):
        k1, k2, key = jax.random.split(key, 3)
        params.append((jax.random.normal(k1, (D, F), jnp.bfloat16) * 0.02,
                       jax.random.normal(k2, (F, D), jnp.bfloat16) * 0.02))
    x = jax.random.normal(key, (B, D), jnp.bfloat16)

    def loss(params, x):
        h = x
        for w1, w2 in params:
            h = jax.nn.relu(h @ w1) @ w2
        return jnp.mean(h.astype(jnp.float32) ** 2)

    def mlp(params, x):  # named so the executable is jit_mlp, as in the fixture
        return loss(params, x)

    step = jax.jit(jax.value_and_grad(mlp))
    compiled = step.lower(params, x).compile()
    for _ in range(5):
        v, g = step(params, x)
        jax.block_until_ready((v, g))
    time.sleep(0.5)  # let memwatch's sampler (10 Hz + after executes) see the final state
    dev = jax.devices()[0]
    truth = {"program": "mlp", "memory_analysis": analysis_dict(compiled),
             "memory_stats": {k: int(v) for k, v in (dev.memory_stats() or {}).items()},
             "executable": "jit_mlp"}
    json.dump(truth, open(out, "w"), indent=1)
    print(json.dumps(truth))


def oom(out):
    """The program behind testdata/h200/incidents/h200-jax0.11.2-oom-temp (probe/oom_model.py).

    Under XLA_CLIENT_MEM_FRACTION=0.025 (a 3.50 GiB BFC pool on an H200): the inputs
    (8 layers of bf16 w1 [2048,8192] + w2 [8192,2048], 32 MiB each, and x [16384,2048],
    64 MiB: 576 MiB from jit__normal) fit, compilation and autotuning fit, and then
    jit_model = jit(value_and_grad(model)) allocates its 512 MiB of outputs and fails on
    its 3.25 GiB temp buffer (3489674768 bytes, rounded to 3489675008) inside execute.
    """
    import jax
    import jax.numpy as jnp

    D, F, B, L = 2048, 8192, 16384, 8
    key = jax.random.PRNGKey(0)
    params = []
    for _ in range(L):
        k1, k2, key = jax.random.split(key, 3)
        params.append({"w1": jax.random.normal(k1, (D, F), jnp.bfloat16),
                       "w2": jax.random.normal(k2, (F, D), jnp.bfloat16)})
    x = jax.random.normal(key, (B, D), jnp.bfloat16)
    jax.block_until_ready((params, x))

    def block(x, p):
        h = jax.nn.gelu(x @ p["w1"])
        return x + h @ p["w2"]

    def model(params, x):  # named so the executable is jit_model, as in the incident
        for p in params:
            x = block(x, p)
        return jnp.mean(x.astype(jnp.float32) ** 2)

    f = jax.jit(jax.value_and_grad(model))
    truth = {"program": "oom", "executable": "jit_model"}
    dev = jax.devices()[0]
    try:
        compiled = f.lower(params, x).compile()
        truth["memory_analysis"] = analysis_dict(compiled)
        truth["memory_stats_before"] = {k: int(v) for k, v in (dev.memory_stats() or {}).items()}
        r = f(params, x)
        jax.block_until_ready(r)
        truth["error"] = None
    except Exception as e:  # JaxRuntimeError RESOURCE_EXHAUSTED ... [executable_name='jit_model']
        truth["error"] = str(e)[:2000]
    time.sleep(0.5)
    truth["memory_stats"] = {k: int(v) for k, v in (dev.memory_stats() or {}).items()}
    json.dump(truth, open(out, "w"), indent=1)
    print(json.dumps(truth)[:3000])


def compare(truth_path, report_path):
    t = json.load(open(truth_path))
    r = json.load(open(report_path))
    fails = 0

    def check(what, ok, detail):
        nonlocal fails
        print(("PASS" if ok else "FAIL"), what, detail)
        fails += 0 if ok else 1

    procs = [p for p in r["processes"] if p["executables"] or p["devices"]]
    check("capture has PJRT records", bool(procs), f"{len(procs)} process(es)")
    if not procs:
        return 1
    p = procs[-1]
    name = t["executable"]
    exes = [x for x in p["executables"] if x["name"] == name]
    check(f"executable {name} recorded", bool(exes), [x["name"] for x in p["executables"]])
    ma = t.get("memory_analysis") or {}
    if exes and ma:
        x = exes[-1]
        for ours, theirs in [("argument_bytes", "argument_size_in_bytes"),
                             ("output_bytes", "output_size_in_bytes"),
                             ("alias_bytes", "alias_size_in_bytes"),
                             ("temp_bytes", "temp_size_in_bytes")]:
            check(f"compiled {ours} == memory_analysis().{theirs}", x.get(ours) == ma.get(theirs),
                  f"{x.get(ours)} vs {ma.get(theirs)}")
    ms = t.get("memory_stats") or {}
    devs = p["devices"]
    check("allocator samples recorded", bool(devs) and devs[0]["samples"] > 0,
          [d["samples"] for d in devs])
    if t["program"] == "mlp" and devs:
        pk = devs[0].get("peak") or {}
        check("runtime peak == memory_stats()['peak_bytes_in_use']",
              pk.get("peak_bytes_in_use") == ms.get("peak_bytes_in_use"),
              f"{pk.get('peak_bytes_in_use')} vs {ms.get('peak_bytes_in_use')}")
        check(f"executable at the peak is {name}", pk.get("executable") == name, pk.get("executable"))
        xla = pk.get("xla") or {}
        check("peak joined to the dump's buffer assignment", xla.get("module") == name,
              f"{xla.get('module')} by {xla.get('matched_by')}")
        if xla and ma:
            check("dump temp == memory_analysis temp", xla.get("temp_bytes") == ma.get("temp_size_in_bytes"),
                  f"{xla.get('temp_bytes')} vs {ma.get('temp_size_in_bytes')}")
        print("peak decomposition:", json.dumps({k: pk.get(k) for k in [
            "peak_bytes_in_use", "live_buffer_bytes", "running_temp_bytes", "explained_bytes",
            "unexplained_bytes", "co_resident"]}))
    if t["program"] == "oom":
        err = t.get("error") or ""
        check("jit_model compiled (the OOM is in execute, not in compile/autotuning)",
              bool(ma), err[:200] if not ma else ma.get("temp_size_in_bytes"))
        check("the program hit RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED" in err, err[:200])
        ooms = p["ooms"]
        check("OOM incident recorded", bool(ooms), len(ooms))
        if ooms:
            o = ooms[0]
            check(f"OOM attributed to {name}", o["executable"] == name, o["executable"])
            temp = ma.get("temp_size_in_bytes")
            req = o.get("exact_request_bytes")
            check("failed request identified as the executable's temp buffer (rounded to 256 B)",
                  temp is not None and o.get("request_is_temp_buffer") is True
                  and req == (temp + 255) // 256 * 256,
                  f"exact request {req} (message said {o.get('requested_bytes')}) vs temp {temp}")
            check("OOM joined to the dump", (o.get("xla") or {}).get("module") == name,
                  (o.get("xla") or {}).get("module"))
            print("OOM incident:", json.dumps({k: o.get(k) for k in [
                "device", "requested_bytes", "compiled_temp_bytes", "last_stats", "co_resident"]}))
    return 1 if fails else 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "mlp":
        mlp(sys.argv[2])
    elif cmd == "oom":
        oom(sys.argv[2])
    elif cmd == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(f"unknown command {cmd}")
