"""Tests of the memwatch-jax helper against real JAX (run by scripts/gate-jax-test.sh:
`.venv-jax/bin/python python/memwatch-jax/tests/test_memwatch_jax.py`)."""

import json
import os
import sys
import tempfile

import jax
import jax.numpy as jnp

from memwatch_jax import FORMAT, MemoryReport, module_name, record


def f(x):
    return jnp.sin(x) @ x.T


def test_record_matches_memory_analysis_and_names_the_module():
    x = jax.ShapeDtypeStruct((128, 64), jnp.float32)
    r = MemoryReport()
    e = r.record(f, x)
    compiled = jax.jit(f).lower(x).compile()
    ma = compiled.memory_analysis()
    assert e["name"] == "jit_f" == module_name(compiled)
    assert e["memory_analysis"]["temp_size_in_bytes"] == ma.temp_size_in_bytes
    assert e["memory_analysis"]["argument_size_in_bytes"] == ma.argument_size_in_bytes == 128 * 64 * 4
    assert e["memory_analysis"]["output_size_in_bytes"] == ma.output_size_in_bytes == 128 * 128 * 4


def test_duplicate_names_are_refused_and_name_overrides():
    r = MemoryReport()
    r.record(f, jnp.ones((8, 8)))
    try:
        r.record(f, jnp.ones((16, 8)))
    except ValueError as e:
        assert "recorded twice" in str(e)
    else:
        raise AssertionError("duplicate key accepted")
    assert r.record(f, jnp.ones((16, 8)), name="f_16")["module"] == "jit_f"


def test_write_merges_and_is_the_gate_format():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "memory.json")
        record(path, f, jnp.ones((8, 8)))
        record(path, f, jnp.ones((4, 8)), name="small_f")
        doc = json.load(open(path))
        assert doc["format"] == FORMAT and doc["version"] == 1
        assert [e["name"] for e in doc["entries"]] == ["jit_f", "small_f"]
        assert doc["jax_version"] == jax.__version__
        # Re-recording a name replaces it, keeps the rest.
        record(path, f, jnp.ones((2, 8)), name="small_f")
        doc = json.load(open(path))
        small = [e for e in doc["entries"] if e["name"] == "small_f"][0]
        assert small["memory_analysis"]["argument_size_in_bytes"] == 2 * 8 * 4
        assert len(doc["entries"]) == 2


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"memwatch-jax: {len(tests)} tests passed")
    sys.exit(0)
