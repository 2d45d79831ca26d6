"""One JAX worker of a multi-process job (started by jax_launch.py), on its own GPU.

  train STEPS WIDTH BATCH   data-parallel training step over a mesh of every worker's GPU
                            (params replicated, batch sharded; XLA inserts the all-reduce).
                            Three executables are compiled by every worker at the same time
                            (init, step, eval): their start/end times go to events.rank<R>.jsonl.
  uneven LAYERS WIDTH FF BATCH
                            a model split unevenly over the workers (LAYERS like 6,2: worker r
                            holds LAYERS[r] blocks, e.g. a pipeline stage with the embedding);
                            each runs value_and_grad of its stage on its own GPU. With a small
                            XLA_CLIENT_MEM_FRACTION the heavy worker runs out while the others fit.
"""
import os
import sys

from mg_common import CPU_TEST, LOCAL_RANK, RANK, WORLD, figures, mark

fig = figures()
mode = sys.argv[1]
import jax  # noqa: E402

if CPU_TEST:
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 1)
    jax.distributed.initialize(os.environ["MG_COORD"], num_processes=WORLD, process_id=RANK)
else:
    jax.distributed.initialize(os.environ["MG_COORD"], num_processes=WORLD, process_id=RANK,
                               local_device_ids=[LOCAL_RANK])
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

dev = jax.local_devices()[0]
fig.set("device", {"id": dev.id, "local_hardware_id": getattr(dev, "local_hardware_id", None),
                   "kind": dev.device_kind, "process_index": dev.process_index})
fig.set("allocator", os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default"))
fig.set("mem_fraction", os.environ.get("XLA_CLIENT_MEM_FRACTION"))


def stats():
    return {k: int(v) for k, v in (dev.memory_stats() or {}).items()}


fig.probe(lambda: {"memory_stats_end": stats()})


def analysis(compiled):
    ma = compiled.memory_analysis()
    keys = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "generated_code_size_in_bytes"]
    return {k: int(getattr(ma, k)) for k in keys if ma is not None and hasattr(ma, k)}


def compile_marked(name, jitted, *args):
    mark("compile_start", name=name)
    c = jitted.lower(*args).compile()
    mark("compile_end", name=name)
    fig.data.setdefault("executables", {})[name] = analysis(c)
    return c


if mode == "train":
    steps, width, batch = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    mesh = Mesh(np.array(jax.devices()), ("data",))
    repl = NamedSharding(mesh, P())
    rows = NamedSharding(mesh, P("data"))

    def init(key):
        k1, k2 = jax.random.split(key)
        return {"w1": jax.random.normal(k1, (width, 4 * width), jnp.float32) * 0.02,
                "w2": jax.random.normal(k2, (4 * width, width), jnp.float32) * 0.02}

    def loss(p, x):
        h = jnp.tanh(x @ p["w1"]) @ p["w2"]
        return jnp.mean((h - x) ** 2)

    def step(p, x):
        l, g = jax.value_and_grad(loss)(p, x)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), l

    def evaluate(p, x):
        return loss(p, x)

    init_j = jax.jit(init, out_shardings=repl)
    key = jax.random.PRNGKey(0)
    local = np.random.default_rng(RANK).standard_normal((batch, width), dtype=np.float32)
    x = jax.make_array_from_process_local_data(rows, local)
    init_c = compile_marked("init", init_j, key)
    params = init_c(key)
    step_j = jax.jit(step, in_shardings=(repl, rows), out_shardings=(repl, repl), donate_argnums=0)
    eval_j = jax.jit(evaluate, in_shardings=(repl, rows), out_shardings=repl)
    step_c = compile_marked("step", step_j, params, x)
    eval_c = compile_marked("eval", eval_j, params, x)
    fig.set("memory_stats_after_compile", stats())
    for s in range(steps):
        mark("step_start", step=s)
        params, lv = step_c(params, x)
        jax.block_until_ready(lv)
        mark("step_end", step=s)
    ev = eval_c(params, x)
    fig.set("loss", float(lv))
    fig.set("eval", float(ev))
    fig.set("memory_stats_after_steps", stats())
    print(f"rank {RANK}: loss {float(lv):.5f} eval {float(ev):.5f} peak {stats().get('peak_bytes_in_use')}", flush=True)
elif mode == "uneven":
    layers = [int(v) for v in sys.argv[2].split(",")]
    width, ff, batch = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    mine = layers[RANK % len(layers)]
    per_layer = 2 * width * ff * 4
    fig.set("layers", layers)
    fig.set("my_layers", mine)
    fig.set("param_bytes", mine * per_layer)
    fig.set("param_share", mine / sum(layers[:WORLD]))
    key = jax.random.PRNGKey(RANK)
    params = []
    for _ in range(mine):
        k1, k2, key = jax.random.split(key, 3)
        params.append((jax.device_put(jax.random.normal(k1, (width, ff), jnp.float32) * 0.02, dev),
                       jax.device_put(jax.random.normal(k2, (ff, width), jnp.float32) * 0.02, dev)))
    x = jax.device_put(jnp.ones((batch, width), jnp.float32), dev)
    jax.block_until_ready((params, x))

    def stage_loss(params, x):
        h = x
        for w1, w2 in params:
            h = jnp.tanh(h @ w1) @ w2 + h
        return jnp.mean(h ** 2)

    stage = jax.jit(jax.value_and_grad(stage_loss))
    c = compile_marked("stage", stage, params, x)
    fig.set("executable", "jit_stage_loss")
    fig.set("memory_stats_before", stats())
    mark("step_start", step=0)
    v, g = c(params, x)
    jax.block_until_ready((v, g))
    mark("step_end", step=0)
    print(f"rank {RANK}: {mine} layers fit, loss {float(v):.5f}", flush=True)
else:
    sys.exit(f"unknown mode {mode}")
