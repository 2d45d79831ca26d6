#!/usr/bin/env python3
"""Lists import cycles between the modules of a Rust crate's source tree.

    python3 scripts/module_cycles.py daemon/src

A module is a file (a folder's module is its mod.rs); an edge is a `crate::` or
`super::` path from one module to another outside `#[cfg(test)]` code (declaring a
child module is not an edge). Prints each cycle found; exit 1 when there is one.
"""
import os
import re
import sys


def modules(root):
    """Module path (tuple of names) -> source without its test code."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3].split(os.sep)
            if rel == ["lib"] or rel == ["main"]:
                rel = []
            elif rel[-1] == "mod":
                rel = rel[:-1]
            src = open(os.path.join(dirpath, f), encoding="utf-8").read()
            out[tuple(rel)] = src.split("#[cfg(test)]")[0]
    return out


def edges(mods):
    def resolve(parts):
        for k in range(len(parts), 0, -1):
            if tuple(parts[:k]) in mods:
                return tuple(parts[:k])
        return ()

    graph = {}
    for me, src in mods.items():
        parent = list(me[:-1])  # what `super` names, from a file or a mod.rs alike
        deps = set()
        for m in re.finditer(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)", src):
            rest = m.group(2).split("::")[1:]
            deps.add(resolve(rest if m.group(1) == "crate" else parent + rest))
        for m in re.finditer(r"use (crate|super)((?:::[a-z_]+)*)::\{([^;]*)\};", src, re.S):
            base = ([] if m.group(1) == "crate" else parent) + m.group(2).split("::")[1:]
            for item in m.group(3).split(","):
                first = item.strip().split("::")
                deps.add(resolve(base if first[0] in ("", "self") else base + first))
        graph[me] = {d for d in deps if d and d != me}
    return graph


def cycles(graph):
    found, color, stack = [], {}, []

    def visit(u):
        color[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if color.get(v) == 1:
                found.append(stack[stack.index(v):] + [v])
            elif v not in color:
                visit(v)
        stack.pop()
        color[u] = 2

    for u in sorted(graph):
        if u not in color:
            visit(u)
    return found


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    found = cycles(edges(modules(sys.argv[1] if len(sys.argv) > 1 else "daemon/src")))
    for c in found:
        print(" -> ".join("::".join(m) or "crate" for m in c))
    print(f"{len(found)} module cycles")
    sys.exit(1 if found else 0)
