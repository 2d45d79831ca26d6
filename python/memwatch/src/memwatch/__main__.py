"""``python -m memwatch ARGS``: runs the installed ``memwatch ARGS`` in this process
(exec), so its exit status, signals and output are the program's own."""

from __future__ import annotations

import os
import sys

from memwatch import binary


def main() -> None:
    try:
        exe = binary()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        sys.exit(2)
    os.execv(exe, [exe, *sys.argv[1:]])


if __name__ == "__main__":
    main()
