#!/usr/bin/env python3
"""Check that no tracked Rust source file is over 800 lines.

    python3 scripts/check-file-size.py [--max N]

Lists every `.rs` file git tracks or would track (not ignored; outside `target/`) with more than N lines (default
800, the project's limit), longest first, as `LINES PATH`, and exits 1 if there is
any; prints how many files were checked and exits 0 otherwise. A file over the limit
is split by responsibility, never by line count alone.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tracked_rust_files():
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.rs"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout
    names = {p for p in out.decode().split("\0") if p and not p.startswith("target/")}
    return sorted(names)


def line_count(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return sum(1 for _ in f)


def main(argv):
    limit = 800
    if argv[:1] == ["--max"] and len(argv) == 2 and argv[1].isdigit():
        limit = int(argv[1])
    elif argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    files = tracked_rust_files()
    over = sorted(
        ((n, p) for p in files if os.path.exists(os.path.join(ROOT, p))
         for n in [line_count(p)] if n > limit),
        reverse=True,
    )
    if over:
        print(f"{len(over)} Rust source files are over {limit} lines:")
        for n, p in over:
            print(f"{n:6} {p}")
        return 1
    print(f"{len(files)} Rust source files, none over {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
