"""Generates XLA CPU dumps for memwatch's tests with jax[cpu] (see scripts/gen-cpu-dumps.sh).

For each program it compiles with XLA_FLAGS=--xla_dump_to=OUT --xla_dump_hlo_as_text and
records `compiled.memory_analysis()` as OUT/<module name>.memory_analysis.json (the
ground truth `memwatch xla report` must reproduce to the byte).
Usage: python gen_dumps.py OUT_DIR
"""
import json
import os
import sys

out = os.path.abspath(sys.argv[1])
os.environ["XLA_FLAGS"] = (
    f"--xla_dump_to={out} --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=^$"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

FIELDS = [
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
    "host_argument_size_in_bytes",
    "host_output_size_in_bytes",
    "host_alias_size_in_bytes",
    "host_temp_size_in_bytes",
    "peak_memory_in_bytes",
    "total_allocation_bytes",
]


def record(name, fn, *args, **jit_kwargs):
    compiled = jax.jit(fn, **jit_kwargs).lower(*args).compile()
    ma = compiled.memory_analysis()
    rec = {"module": f"jit_{name}", "jax_version": jax.__version__}
    for f in FIELDS:
        if hasattr(ma, f):
            rec[f] = int(getattr(ma, f))
    with open(os.path.join(out, f"jit_{name}.memory_analysis.json"), "w") as fh:
        json.dump(rec, fh, indent=1, sort_keys=True)
        fh.write("\n")


key = jax.random.PRNGKey(0)


# 1. MLP train step (params donated: exercises alias bytes).
def mlp_loss(params, x, y):
    h = x
    for w, b in params:
        h = jnp.tanh(h @ w + b)
    return jnp.mean((h - y) ** 2)


def mlp_train_step(params, x, y):
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y)
    new = [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)]
    return new, loss


D = 256
params = [
    (jax.random.normal(key, (D, D), jnp.float32), jnp.zeros((D,), jnp.float32))
    for _ in range(3)
]
x = jnp.ones((128, D), jnp.float32)
y = jnp.zeros((128, D), jnp.float32)
record("mlp_train_step", mlp_train_step, params, x, y, donate_argnums=(0,))


# 2. attention with jax.checkpoint (rematerialised backward pass).
def attention(q, k, v):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(q.shape[-1])
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)


def attn_loss(q, k, v):
    return jnp.sum(jax.checkpoint(attention)(q, k, v) ** 2)


q = jnp.ones((4, 128, 64), jnp.float32)
def attention_remat(q, k, v):
    return jax.grad(attn_loss, argnums=(0, 1, 2))(q, k, v)


record("attention_remat", attention_remat, q, q, q)


# 3. the pad-after-slice pattern of a public XLA OOM report.
def padf(a):
    return jnp.pad(a[:, 1023:1024], ((0, 0), (0, 122)))


record("padf", padf, jnp.ones((512, 1024), jnp.float32))


# 4. a scan (while loop in HLO).
def scan_rnn(w, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h.sum()

    return jax.lax.scan(step, jnp.zeros((64, 128)), xs)


record("scan_rnn", scan_rnn, jnp.ones((128, 128)), jnp.ones((16, 64, 128)))
print("ok", jax.__version__)
