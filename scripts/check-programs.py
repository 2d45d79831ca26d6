#!/usr/bin/env python3
"""Every program the tests, scripts and build files call is installed by something.

Finds the programs called by name (looked up on PATH) in
  - shell scripts (parsed with shfmt: every simple command, `sh -c '...'` strings, and the
    commands behind sudo/exec/env/xargs/timeout/... wrappers),
  - Python scripts (subprocess calls whose program is a string literal),
  - Rust sources, build scripts and tests (`Command::new("x")`, the program after `"--"`
    in argument lists, `sh -c` strings, and the PATH searches named in SEARCHED below),
then finds where each one comes from on this machine and fails on any that nothing
installs. A program is installed when
  - scripts/install-deps.sh installs its Debian package, or a package those depend on,
    or the package is part of every Debian 12 (Essential, or apt: a minbase install), or
  - it is part of the README's one prerequisite, the Rust toolchain (under RUSTUP_HOME or
    CARGO_HOME).
Programs run by path (target/debug/memwatch, a venv's bin/) are built or installed by
the scripts that run them and are not looked up here. Run after install-deps.sh (test.sh
does): a program missing from PATH is reported as installed by nothing.

  python3 scripts/check-programs.py [--list]    (--list: print every program and its source)
Exit 0: every program is installed by something; 1: some are not (listed, with callers);
2: the check itself cannot run (no shfmt or dpkg: run scripts/install-deps.sh).
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Files that are not run by the suite or the scripts on this machine: the GPU machines'
# scripts (run there, with CUDA/ROCm and their frameworks; tests/gpu/results/README.md)
# and the programs that run inside the images (the image's own packages: docker/).
NOT_HERE = (
    "tests/gpu/",
    "docker/agent-entrypoint.sh",
    "docker/daemon-health.sh",
    "testdata/",
)

# Programs a caller looks for on PATH and does without when absent, saying so (never
# needed by the suite): caller file, what happens without it.
OPTIONAL = {
    "nvidia-smi": "attach's per-process figures from NVIDIA's driver (GPU machines; none without it)",
}
# The README's prerequisites besides the Rust toolchain.
PREREQUISITES = {
    "sudo": "the README's sudo for apt-get (the scripts call it only when not root)",
}

# PATH searches that are not a `Command::new("x")`: (program, file, text that must be in
# the file). Each must still be there, so this table cannot outlive the code.
SEARCHED = [
    ("clang-19", "kernels/src/hip_build.rs", '"clang-19",'),
    ("llvm-readobj-19", "kernels/tests/hip_kernels.rs", 'd.join("llvm-readobj-19")'),
]

# Shell words that are not programs.
SHELL_BUILTINS = set(
    """. : [ [[ alias bg bind break builtin caller cd command compgen complete continue
    declare dirs disown echo enable eval exec exit export false fc fg getopts hash help
    history jobs kill let local logout mapfile popd printf pushd pwd read readarray
    readonly return set shift shopt source suspend test times trap true type typeset
    ulimit umask unalias unset wait""".split()
)
SHELL_KEYWORDS = {"time", "coproc", "function", "select"}
# Wrappers that run their arguments as a command: name -> options taking a value.
WRAPPERS = {
    "sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"},
    "exec": {"-a"},
    "command": set(),
    "env": {"-u", "-C", "-S"},
    "nohup": set(),
    "setsid": set(),
    "nice": {"-n"},
    "ionice": {"-c", "-n", "-p"},
    "stdbuf": {"-i", "-o", "-e"},
    "xargs": {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--max-procs"},
    "timeout": {"-k", "-s", "--signal", "--kill-after"},
    "runuser": {"-u", "-g", "-G", "-s", "--user", "--group"},
    "time": {"-f", "-o"},
    "mw_sudo": set(),
}
# Variables that hold a wrapper ($SUDO apt-get, "${AS_PG[@]}" psql).
WRAPPER_VARS = {"SUDO", "AS_PG"}
# Wrappers whose command follows a number of positional values (timeout DURATION CMD).
POSITIONAL_BEFORE_COMMAND = {"timeout": 1}


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if out.returncode != 0:
        sys.exit(f"check-programs: git ls-files failed in {ROOT} (a checkout is needed): "
                 f"{out.stderr.decode().strip()}")
    files = [f for f in out.stdout.decode().split("\0") if f]
    return [f for f in files if not f.startswith(NOT_HERE) and (ROOT / f).is_file()]


def is_shell(path):
    if path.endswith(".sh") or path == ".ci/run":
        return True
    try:
        with open(ROOT / path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and (b"bash" in first or b"/sh" in first)


# -- shell ---------------------------------------------------------------------------


def shfmt_json(text, where):
    r = subprocess.run(["shfmt", "-ln", "bash", "-tojson"], input=text.encode(), capture_output=True)
    if r.returncode != 0:
        raise SyntaxError(f"{where}: shfmt cannot parse it: {r.stderr.decode().strip()}")
    return json.loads(r.stdout)


def word_literal(word):
    """The text of a word made only of literal parts (quoted or not), else None."""
    out = []
    for part in word.get("Parts", []):
        t = part.get("Type")
        if t == "Lit":
            out.append(part["Value"])
        elif t == "SglQuoted":
            out.append(part["Value"])
        elif t == "DblQuoted":
            for p in part.get("Parts", []):
                if p.get("Type") != "Lit":
                    return None
                out.append(p["Value"])
        else:
            return None
    return "".join(out)


def word_text_loose(word):
    """The text of a word with every expansion replaced by a placeholder (for `sh -c`)."""
    out = []
    for part in word.get("Parts", []):
        t = part.get("Type")
        if t in ("Lit", "SglQuoted"):
            out.append(part["Value"])
        elif t == "DblQuoted":
            for p in part.get("Parts", []):
                out.append(p["Value"] if p.get("Type") == "Lit" else "PLACEHOLDER")
        else:
            out.append("PLACEHOLDER")
    return "".join(out)


def param_name(word):
    parts = word.get("Parts", [])
    if len(parts) == 1 and parts[0].get("Type") == "DblQuoted":
        parts = parts[0].get("Parts", [])
    if len(parts) == 1 and parts[0].get("Type") == "ParamExp":
        return parts[0].get("Param", {}).get("Value")
    return None


def walk(node, fn):
    if isinstance(node, dict):
        fn(node)
        for v in node.values():
            walk(v, fn)
    elif isinstance(node, list):
        for v in node:
            walk(v, fn)


def shell_calls(text, where, functions, found, line_base=0):
    """Records each program called by name into `found` (shell builtins, keywords and
    functions left out: they are the shell's own)."""
    tree = shfmt_json(text, where)
    found = ShellFound(found)

    def decl(node):
        if node.get("Type") == "FuncDecl":
            functions.add(node["Name"]["Value"])

    walk(tree, decl)

    def call(node):
        if node.get("Type") != "CallExpr" or not node.get("Args"):
            return
        args = node["Args"]
        line = line_base + args[0]["Pos"]["Line"]
        i = 0
        while i < len(args):
            name = word_literal(args[i])
            if name is None:
                if param_name(args[i]) in WRAPPER_VARS:
                    i += 1
                    continue
                return
            if name in WRAPPERS:
                found[name].add(f"{where}:{line}")
                opts = WRAPPERS[name]
                i += 1
                while i < len(args):
                    a = word_literal(args[i])
                    if a is None or not a.startswith("-"):
                        break
                    if a == "--":
                        i += 1
                        break
                    i += 2 if a in opts else 1
                # env's VAR=value words, then the command
                while i < len(args) and re.match(r"^\w+=", word_literal(args[i]) or ""):
                    i += 1
                i += POSITIONAL_BEFORE_COMMAND.get(name, 0)
                continue
            if name in ("sh", "bash") and i + 2 < len(args) and word_literal(args[i + 1]) == "-c":
                found[name].add(f"{where}:{line}")
                inner = word_text_loose(args[i + 2])
                try:
                    shell_calls(inner, f"{where}:{line} ({name} -c)", functions, found, line - 1)
                except SyntaxError:
                    pass  # a fragment built at run time: its commands are not literal
                return
            found[name].add(f"{where}:{line}")
            return

    walk(tree, call)


class ShellFound:
    """A view of `found` that leaves out the shell's own words."""

    def __init__(self, found):
        self.found = found.found if isinstance(found, ShellFound) else found

    def __getitem__(self, name):
        if name in SHELL_BUILTINS or name in SHELL_KEYWORDS:
            return set()  # a throwaway: not recorded
        return self.found[name]


# -- Python --------------------------------------------------------------------------

SUBPROCESS_FUNCS = {"run", "Popen", "call", "check_call", "check_output"}


def python_calls(text, where, found):
    tree = ast.parse(text, where)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        first = node.args[0]
        if name in SUBPROCESS_FUNCS:
            if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                first = first.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                prog = first.value.split()[0] if first.value.strip() else ""
                if prog and "/" not in prog:
                    found[prog].add(f"{where}:{node.lineno}")
        elif name == "which" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            found[first.value].add(f"{where}:{node.lineno}")


# -- Rust ----------------------------------------------------------------------------

RUST_COMMAND = re.compile(r'Command::new\(\s*"([^"/]+)"\s*\)')
RUST_AFTER_DASHES = re.compile(r'"--",\s*"([^"/\s]+)"')
RUST_SH_C = re.compile(r'"(?:sh|bash)",\s*"-c",\s*"((?:[^"\\]|\\.)*)"', re.S)


def rust_calls(text, where, functions, found):
    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    for rx in (RUST_COMMAND, RUST_AFTER_DASHES):
        for m in rx.finditer(text):
            found[m.group(1)].add(f"{where}:{line_of(m.start())}")
    for m in RUST_SH_C.finditer(text):
        script = m.group(1).encode().decode("unicode_escape", errors="replace")
        script = re.sub(r"\{[^{}]*\}", "PLACEHOLDER", script)  # format! arguments
        try:
            shell_calls(script, f"{where}:{line_of(m.start())} (sh -c)", functions, found, line_of(m.start()) - 1)
        except SyntaxError:
            pass


# -- where programs come from --------------------------------------------------------


def dpkg_status():
    """Installed packages: name -> (fields), parsed from dpkg's status file."""
    pkgs = {}
    text = Path("/var/lib/dpkg/status").read_text(errors="replace")
    for para in text.split("\n\n"):
        fields = {}
        key = None
        for line in para.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, v = line.partition(":")
                fields[key] = v.strip()
        if "Package" in fields and "install ok installed" in fields.get("Status", ""):
            pkgs[fields["Package"]] = fields
    return pkgs


def relation_names(value):
    """Alternatives of each relation in a Depends field: [[name, ...], ...]."""
    groups = []
    for rel_ in value.split(","):
        alts = []
        for alt in rel_.split("|"):
            name = alt.strip().split(" ")[0].split(":")[0]
            if name:
                alts.append(name)
        if alts:
            groups.append(alts)
    return groups


def closure(roots, pkgs):
    provides = defaultdict(set)
    for name, f in pkgs.items():
        for alts in relation_names(f.get("Provides", "")):
            provides[alts[0]].add(name)
    seen = set()
    todo = [r for r in roots if r in pkgs]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        f = pkgs[p]
        for field in ("Pre-Depends", "Depends"):
            for alts in relation_names(f.get(field, "")):
                for a in alts:
                    cands = ({a} if a in pkgs else set()) | provides.get(a, set())
                    todo.extend(cands)
    return seen


def owners_of(paths):
    """path -> package, from dpkg's file lists (both /usr and merged-/usr spellings)."""
    want = set()
    for p in paths:
        want.add(p)
        if p.startswith("/usr/"):
            want.add(p[4:])
        else:
            want.add("/usr" + p)
    owner = {}
    for lst in Path("/var/lib/dpkg/info").glob("*.list"):
        pkg = lst.name[: -len(".list")].split(":")[0]
        for line in lst.read_text(errors="replace").splitlines():
            if line in want:
                owner[line] = pkg
    return owner


def install_deps_packages():
    r = subprocess.run(
        ["bash", str(ROOT / "scripts/install-deps.sh"), "--list"], capture_output=True, text=True
    )
    if r.returncode != 0:
        sys.exit(f"check-programs: scripts/install-deps.sh --list failed: {r.stderr.strip()}")
    return r.stdout.split()


def main():
    listing = "--list" in sys.argv[1:]
    if not shutil.which("shfmt") or not Path("/var/lib/dpkg/status").is_file():
        print("check-programs: needs shfmt and dpkg (Debian 12): run scripts/install-deps.sh", file=sys.stderr)
        return 2
    found = defaultdict(set)
    functions = set()
    rust_sources = []
    for f in tracked_files():
        text = (ROOT / f).read_text(errors="replace")
        try:
            if is_shell(f):
                shell_calls(text, f, functions, found)
            elif f.endswith(".py"):
                python_calls(text, f, found)
            elif f.endswith(".rs"):
                rust_sources.append((f, text))
        except SyntaxError as e:
            print(f"check-programs: {e}", file=sys.stderr)
            return 2
    for f, text in rust_sources:
        rust_calls(text, f, functions, found)
    for prog, f, needle in SEARCHED:
        if needle not in (ROOT / f).read_text(errors="replace"):
            print(f"check-programs: SEARCHED is stale: {f} no longer has {needle!r}", file=sys.stderr)
            return 2
        found[prog].add(f"{f} (searched on PATH)")
    for name in list(found):
        if name in functions or "PLACEHOLDER" in name:
            del found[name]
        elif not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name):
            del found[name]

    pkgs = dpkg_status()
    declared = install_deps_packages()
    missing_decl = [p for p in declared if p not in pkgs]
    essential = {n for n, f in pkgs.items() if f.get("Essential") == "yes"}
    installed_by = closure(set(declared) | essential | {"apt"}, pkgs)
    toolchain_dirs = [
        Path(os.environ.get("RUSTUP_HOME", Path.home() / ".rustup")).resolve(),
        Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")).resolve(),
    ]
    def on_path(name):
        hits = []
        for d in os.environ.get("PATH", "").split(os.pathsep):
            c = os.path.join(d or ".", name)
            if os.path.isfile(c) and os.access(c, os.X_OK) and c not in hits:
                hits.append(c)
        return hits

    located = {name: on_path(name) for name in found}
    paths = set()
    for hits in located.values():
        for p in hits:
            paths.update({p, os.path.realpath(p)})
    owner = owners_of(paths)

    def source_of(p):
        """('toolchain', None) | ('package', PKG) | (None, None) for one file on PATH."""
        real = os.path.realpath(p)
        if any(Path(real).is_relative_to(d) or Path(p).is_relative_to(d) for d in toolchain_dirs):
            return "toolchain", None
        for cand in (p, real):
            for spelling in (cand, cand[4:] if cand.startswith("/usr/") else "/usr" + cand):
                if spelling in owner:
                    return "package", owner[spelling]
        return None, None

    rows, bad = [], []
    for name in sorted(found):
        callers = sorted(found[name])
        where = f"{callers[0]}" + (f" (+{len(callers) - 1} more)" if len(callers) > 1 else "")
        hits = located[name]
        if not hits:
            if name in OPTIONAL:
                rows.append((name, f"optional: {OPTIONAL[name]}", where))
                continue
            if name in PREREQUISITES:
                rows.append((name, f"prerequisite: {PREREQUISITES[name]}", where))
                continue
            bad.append(f"{name}: not installed by anything (not on PATH); called by {', '.join(callers[:5])}")
            continue
        # Any copy on PATH that comes from an allowed source will do: the first one may be
        # a hand-installed copy that a fresh machine does not have.
        why = None
        for p in hits:
            kind, pkg = source_of(p)
            if kind == "toolchain":
                why = "the Rust toolchain (README's prerequisite)"
            elif kind == "package" and pkg in installed_by:
                how = "install-deps.sh" if pkg in declared else ("Essential" if pkg in essential else "dependency")
                why = f"{pkg} ({how})"
            if why:
                break
        if why:
            rows.append((name, why, where))
            continue
        kind, pkg = source_of(hits[0])
        if pkg is None:
            bad.append(f"{name}: {hits[0]} belongs to no Debian package (installed by hand?); called by {', '.join(callers[:5])}")
        else:
            bad.append(
                f"{name}: {hits[0]} is in Debian package {pkg}, which scripts/install-deps.sh does not "
                f"install (nor anything it installs depends on it); called by {', '.join(callers[:5])}"
            )
    if listing:
        w = max(len(r[0]) for r in rows) if rows else 10
        for name, src, where in rows:
            print(f"{name:<{w}}  {src:<40}  {where}")
    for p in missing_decl:
        bad.append(f"{p}: listed by scripts/install-deps.sh but not installed (run it)")
    if bad:
        print(f"check-programs: {len(bad)} program(s) that nothing installs:", file=sys.stderr)
        for b in bad:
            print(f"  - {b}", file=sys.stderr)
        return 1
    print(f"check-programs: all {len(rows)} programs called by tests, scripts and build files are installed "
          f"(scripts/install-deps.sh, Debian's essential set, or the Rust toolchain)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
