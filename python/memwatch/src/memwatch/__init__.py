"""memwatch installed from its wheel: where the ``memwatch`` executable is.

Owns one thing: finding the executable the wheel installed into the environment's
scripts folder (``<prefix>/bin/memwatch``), so that ``python -m memwatch ARGS`` runs the
same program as ``memwatch ARGS``. The executable finds its shim itself
(``<prefix>/lib/memwatch/libmemwatch_preload.so``, also from the wheel). The JAX helper
for ``memwatch gate`` is the ``memwatch_jax`` module of the same wheel.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import List

__all__ = ["binary"]

_NAME = "memwatch"


def _candidates() -> List[str]:
    """Scripts folders, in the order pip may have put the executable there."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [sysconfig.get_path("scripts")]
    # `pip install --user`
    user = (
        sysconfig.get_preferred_scheme("user")
        if hasattr(sysconfig, "get_preferred_scheme")
        else f"{os.name}_user"
    )
    dirs.append(sysconfig.get_path("scripts", scheme=user))
    # `pip install --prefix P`: P/lib/pythonX.Y/site-packages/memwatch/ -> P/bin
    dirs.append(os.path.join(here, "..", "..", "..", "..", "bin"))
    # `pip install --target T`: T/memwatch/ -> T/bin
    dirs.append(os.path.join(here, "..", "bin"))
    # The folder of the interpreter (a venv used without activating it).
    dirs.append(os.path.dirname(sys.executable))
    out: List[str] = []
    for d in dirs:
        p = os.path.normpath(os.path.join(d, _NAME))
        if p not in out:
            out.append(p)
    return out


def binary() -> str:
    """The path of the ``memwatch`` executable installed with this package."""
    looked = _candidates()
    for p in looked:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise FileNotFoundError(
        "memwatch: the `memwatch` executable of this package is not installed; looked in: "
        + ", ".join(looked)
        + " (reinstall the wheel: pip install --force-reinstall memwatch)"
    )
