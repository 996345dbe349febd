"""`python -m filerouter ARGS...`: the `filerouter` command, for environments whose scripts
folder is not on `PATH` (as `python -m ruff` or `python -m uv`)."""

from __future__ import annotations

import os
import subprocess
import sys

from .testing import find_binary


def main() -> int:
    """Run the binary with this process's arguments; its exit status is ours."""
    try:
        binary = find_binary()
    except FileNotFoundError as exc:
        print(f"filerouter: {exc}", file=sys.stderr)
        return 1
    if os.name == "posix":
        os.execv(binary, [binary, *sys.argv[1:]])  # replaces this process: signals reach it
    return subprocess.call([binary, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
