"""memwatch-jax: record JAX ``compiled.memory_analysis()`` for ``memwatch gate``.

Owns one thing: turning jitted functions (plus example arguments or
``jax.ShapeDtypeStruct`` shapes) into the ``memwatch-jax`` JSON file the gate reads.
It never runs the functions, only lowers and compiles them.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any, Callable, Dict, Optional

__all__ = ["MemoryReport", "record", "module_name", "FORMAT", "VERSION"]

FORMAT = "memwatch-jax"
VERSION = 1

_HLO_MODULE = re.compile(r"^\s*HloModule\s+([^\s,]+)")


def module_name(compiled: Any) -> str:
    """The HLO module name of a compiled function (e.g. ``jit_train_step``)."""
    text = compiled.as_text() or ""
    for line in text.splitlines():
        m = _HLO_MODULE.match(line)
        if m:
            return m.group(1)
    raise ValueError("memwatch-jax: cannot find `HloModule NAME` in compiled.as_text()")


def _analysis_dict(stats: Any) -> Dict[str, int]:
    if stats is None:
        raise ValueError(
            "memwatch-jax: compiled.memory_analysis() returned None on this backend"
        )
    out: Dict[str, int] = {}
    for attr in dir(stats):
        if attr.startswith("_") or not attr.endswith("_in_bytes"):
            continue
        value = getattr(stats, attr)
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ValueError(f"memwatch-jax: memory_analysis().{attr} is negative ({value})")
            out[attr] = int(value)
    for required in (
        "argument_size_in_bytes",
        "output_size_in_bytes",
        "alias_size_in_bytes",
        "temp_size_in_bytes",
    ):
        if required not in out:
            raise ValueError(f"memwatch-jax: memory_analysis() has no `{required}`")
    return out


class MemoryReport:
    """Collects memory_analysis() figures of compiled functions, keyed by name."""

    def __init__(self) -> None:
        self.entries: Dict[str, Dict[str, Any]] = {}

    def record(self, fn: Callable, *args: Any, name: Optional[str] = None, **kwargs: Any) -> Dict[str, Any]:
        """Lowers and compiles ``fn`` (jitted with ``jax.jit`` unless it already is) for
        ``args``/``kwargs`` and records its memory_analysis(). Returns the entry."""
        import jax

        jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
        compiled = jitted.lower(*args, **kwargs).compile()
        return self.record_compiled(compiled, name=name)

    def record_compiled(self, compiled: Any, name: Optional[str] = None) -> Dict[str, Any]:
        """Records an already compiled function (``jax.jit(f).lower(...).compile()``)."""
        module = module_name(compiled)
        key = name or module
        if key in self.entries:
            raise ValueError(
                f"memwatch-jax: `{key}` is recorded twice; pass name=... to tell the calls apart"
            )
        entry = {
            "name": key,
            "module": module,
            "memory_analysis": _analysis_dict(compiled.memory_analysis()),
        }
        self.entries[key] = entry
        return entry

    def to_json(self) -> Dict[str, Any]:
        import jax

        try:
            device_kind = jax.devices()[0].device_kind
        except Exception:  # pragma: no cover - no device at all
            device_kind = None
        try:
            import jaxlib

            jaxlib_version = getattr(jaxlib, "__version__", None)
        except ImportError:  # pragma: no cover
            jaxlib_version = None
        return {
            "format": FORMAT,
            "version": VERSION,
            "jax_version": jax.__version__,
            "jaxlib_version": jaxlib_version,
            "backend": jax.default_backend(),
            "device_kind": device_kind,
            "entries": [self.entries[k] for k in sorted(self.entries)],
        }

    def write(self, path: str, merge: bool = True) -> None:
        """Writes the JSON file atomically. With ``merge`` (default), entries already in
        an existing file are kept unless recorded again here (so several tests can add
        to one file)."""
        doc = self.to_json()
        if merge and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            if old.get("format") != FORMAT:
                raise ValueError(f"memwatch-jax: {path} is not a memwatch-jax file")
            merged = {e["name"]: e for e in old.get("entries", [])}
            merged.update(self.entries)
            doc["entries"] = [merged[k] for k in sorted(merged)]
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".memwatch-jax.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def record(path: str, fn: Callable, *args: Any, name: Optional[str] = None, **kwargs: Any) -> Dict[str, Any]:
    """One-call form for tests: compile ``fn`` for ``args`` and merge its entry into the
    JSON file at ``path``."""
    report = MemoryReport()
    entry = report.record(fn, *args, name=name, **kwargs)
    report.write(path, merge=True)
    return entry
