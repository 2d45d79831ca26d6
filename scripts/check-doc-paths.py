#!/usr/bin/env python3
"""Check that the paths, links and `memwatch` commands the Markdown docs name exist.

    python3 scripts/check-doc-paths.py [--memwatch BIN] [FILE.md ...]

Default files: every README.md in the tree (outside target/ and hidden folders) and
docs/*.md. For each file it checks:
  - every relative link `[text](target#anchor)`: the target exists; an anchor into a
    Markdown file is one of its headings (GitHub's slug rule);
  - every repository path in code (`agents/...`, `scripts/x.sh`, ...): it exists
    (`{a,b}`, `*` and `<...>` are expanded as globs; `…` ends a path); paths in
    python/yaml/toml/json blocks are a user's own files and are not checked;
  - every `memwatch SUBCOMMAND --flag` in code: the subcommand is listed by
    `memwatch --help` and each flag on that line by `memwatch SUBCOMMAND --help`.
Prints one line per problem (FILE:LINE: what is wrong) and exits 1 if there is any,
2 on bad usage. Needs a built `memwatch` (default target/debug/memwatch, or
$MEMWATCH); without one the command checks are skipped, saying so.
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = ("agents", "analysis", "bench", "cli", "daemon", "docker", "docs", "fuzz", "kernels",
       "migrations", "python", "scripts", "testdata", "tests", "web")
PATH_RE = re.compile(r"(?<![\w./:-])((?:%s)/[\w./*{},<>@+-]*)" % "|".join(TOP))
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
USER_LANGS = ("python", "yaml", "toml", "json")
CODE_SPAN_RE = re.compile(r"`([^`]+)`")
FLAG_RE = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
# `memwatch SUB [SUB2]`, not a crate name (`-p memwatch`, `--bin memwatch`).
CMD_RE = re.compile(
    r"(?<![\w/.-])(?<!-p )(?<!--bin )memwatch\s+([a-z][a-z-]*)(?![\w])((?:\s+[a-z][a-z-]*(?![\w]))?)"
)
STOP_RE = re.compile(r"\s(?:\||&&|;|>|#)\s")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(md_path, cache={}):
    if md_path not in cache:
        found = set()
        in_fence = False
        with open(md_path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    in_fence = not in_fence
                elif not in_fence and line.startswith("#"):
                    found.add(slug(line.lstrip("#")))
        cache[md_path] = found
    return cache[md_path]


def expand(path):
    """Glob patterns for a path as written: {a,b} alternatives, `<x>` and `*` wildcards."""
    m = re.search(r"\{([^{}]*)\}", path)
    if m:
        out = []
        for alt in m.group(1).split(","):
            out += expand(path[: m.start()] + alt + path[m.end():])
        return out
    return [re.sub(r"<[^>]*>", "*", path)]


def path_exists(path, base):
    path = path.split("…")[0].rstrip(".,:;)")
    if not path or path.endswith("-"):
        return True  # a prefix written before an ellipsis
    for pattern in expand(path):
        # From the repository root, or from the file's folder (a crate's README).
        if glob.glob(os.path.join(ROOT, pattern)) or glob.glob(os.path.join(base, pattern)):
            continue
        return False
    return True


class Help:
    def __init__(self, binary):
        self.binary = binary
        self.cache = {}

    def text(self, words):
        key = tuple(words)
        if key not in self.cache:
            r = subprocess.run([self.binary, *words, "--help"], capture_output=True, text=True)
            self.cache[key] = r.stdout if r.returncode == 0 else None
        return self.cache[key]

    def subcommands(self, words):
        text = self.text(words) or ""
        section = text.split("Commands:", 1)[1] if "Commands:" in text else ""
        section = section.split("Options:", 1)[0]
        return set(re.findall(r"^\s{2}([a-z][a-z-]*)\s", section, re.M)) - {"help"}


def check_command(line, help_, problems, where):
    for m in CMD_RE.finditer(line):
        words = [m.group(1)]
        top = help_.subcommands([])
        if words[0] not in top:
            if words[0].isupper() or words[0] in ("is", "and", "or", "the"):
                continue
            problems.append(f"{where}: `memwatch {words[0]}` is not a subcommand")
            continue
        nested = help_.subcommands(words)
        second = m.group(2).strip()
        if nested:
            if second not in nested:
                if second:
                    problems.append(f"{where}: `memwatch {words[0]} {second}` is not a subcommand")
                continue
            words.append(second)
        rest = line[m.end():]
        stop = STOP_RE.search(rest)
        if stop:
            rest = rest[: stop.start()]
        nxt = CMD_RE.search(rest)
        if nxt:
            rest = rest[: nxt.start()]
        text = help_.text(words) or ""
        for flag in FLAG_RE.findall(rest):
            if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text):
                problems.append(f"{where}: `memwatch {' '.join(words)}` has no {flag}")


def check_file(md, help_, problems):
    rel = os.path.relpath(md, ROOT)
    base = os.path.dirname(md)
    in_fence = False
    fence_lang = ""
    with open(md, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for no, line in enumerate(lines, 1):
        where = f"{rel}:{no}"
        if line.startswith("```"):
            in_fence = not in_fence
            fence_lang = line[3:].strip() if in_fence else ""
            continue
        code = [line] if in_fence else CODE_SPAN_RE.findall(line)
        if not in_fence:
            for target in LINK_RE.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(base, file_part)) if file_part else md
                if not os.path.exists(dest):
                    problems.append(f"{where}: link target {target} does not exist")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    problems.append(f"{where}: {os.path.relpath(dest, ROOT)} has no heading #{anchor}")
        for snippet in code:
            # Examples of a user's own files (a workflow, a test) name paths of their repository.
            user_example = fence_lang in USER_LANGS
            for p in [] if user_example else PATH_RE.findall(snippet):
                if not path_exists(p, base):
                    problems.append(f"{where}: path {p} does not exist")
            if help_:
                check_command(snippet, help_, problems, where)


def default_files():
    files = sorted(glob.glob(os.path.join(ROOT, "docs/*.md")))
    for d, subdirs, names in os.walk(ROOT):
        subdirs[:] = sorted(s for s in subdirs if not s.startswith(".") and s != "target")
        if "README.md" in names:
            files.append(os.path.join(d, "README.md"))
    return files


def main(argv):
    binary = os.environ.get("MEMWATCH", os.path.join(ROOT, "target/debug/memwatch"))
    files = []
    args = iter(argv)
    for a in args:
        if a == "--memwatch":
            binary = next(args, None)
            if binary is None:
                print("check-doc-paths: --memwatch needs a path", file=sys.stderr)
                return 2
        elif a.startswith("-"):
            print(__doc__, file=sys.stderr)
            return 2
        else:
            files.append(os.path.abspath(a))
    if not files:
        files = default_files()
    help_ = Help(binary) if os.access(binary, os.X_OK) else None
    if help_ is None:
        print(f"check-doc-paths: no memwatch binary at {binary}: command checks skipped", file=sys.stderr)
    problems = []
    for md in files:
        if not os.path.isfile(md):
            print(f"check-doc-paths: {md}: no such file", file=sys.stderr)
            return 2
        check_file(md, help_, problems)
    for p in problems:
        print(p)
    print(f"check-doc-paths: {len(files)} files, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
