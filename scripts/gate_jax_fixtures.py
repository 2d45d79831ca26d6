#!/usr/bin/env python3
"""Generates the inputs of the gate's JAX test for one model variant: XLA dumps
(`XLA_FLAGS=--xla_dump_to=OUT/dump --xla_dump_hlo_as_text`) and `OUT/memory.json`
(memory_analysis() via the memwatch-jax helper) of two jitted functions:

- `train_step`: value_and_grad of 8 residual MLP blocks (4x hidden), SGD update;
- `predict`: the forward pass.

Variants (the module names stay `jit_train_step` / `jit_predict` in all of them):
- `checkpoint`:    every layer wrapped in `jax.checkpoint` (the baseline);
- `no-checkpoint`: the same model without `jax.checkpoint`: the backward pass keeps every
                   layer's activations, so train_step's temp memory grows;
- `small`:         `checkpoint` with a narrower hidden layer: everything shrinks.

Usage: gate_jax_fixtures.py VARIANT OUT_DIR   (run with the .venv-jax python)
"""

import os
import shutil
import sys

VARIANTS = {
    "checkpoint": dict(checkpoint=True, width=128),
    "no-checkpoint": dict(checkpoint=False, width=128),
    "small": dict(checkpoint=True, width=96),
}
DEPTH = 8
BATCH = 512


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in VARIANTS:
        print(__doc__, file=sys.stderr)
        return 2
    variant, out = sys.argv[1], sys.argv[2]
    cfg = VARIANTS[variant]
    dump = os.path.join(out, "dump")
    if os.path.isdir(dump):
        shutil.rmtree(dump)
    os.makedirs(dump)
    # Must be set before JAX initialises its backend.
    os.environ["XLA_FLAGS"] = (
        f"--xla_dump_to={dump} --xla_dump_hlo_as_text "
        "--xla_dump_hlo_module_re=jit_(train_step|predict)$"
    )
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    import jax
    import jax.numpy as jnp
    from memwatch_jax import MemoryReport

    def layer(w, x):
        # A residual MLP block: the 4x-wide hidden activations are what the backward
        # pass keeps without jax.checkpoint; with it only the block input x is kept.
        w1, w2 = w
        return x + jax.nn.gelu(x @ w1) @ w2

    if cfg["checkpoint"]:
        layer = jax.checkpoint(layer)

    def forward(params, x):
        for w in params:
            x = layer(w, x)
        return x

    def loss(params, x):
        return jnp.mean(forward(params, x) ** 2)

    def train_step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return value, jax.tree_util.tree_map(lambda w, g: w - 0.01 * g, params, grads)

    def predict(params, x):
        return forward(params, x)

    width = cfg["width"]
    params = [
        (
            jax.ShapeDtypeStruct((width, 4 * width), jnp.float32),
            jax.ShapeDtypeStruct((4 * width, width), jnp.float32),
        )
        for _ in range(DEPTH)
    ]
    x = jax.ShapeDtypeStruct((BATCH, width), jnp.float32)

    report = MemoryReport()
    report.record(train_step, params, x)
    report.record(predict, params, x)
    report.write(os.path.join(out, "memory.json"), merge=False)
    for e in sorted(report.entries.values(), key=lambda e: e["name"]):
        ma = e["memory_analysis"]
        print(
            f"{variant}: {e['name']}: temp={ma['temp_size_in_bytes']} "
            f"argument={ma['argument_size_in_bytes']} output={ma['output_size_in_bytes']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
