"""``python -m benchmarks.suite``: the suite, and its children (``--child``, ``--probe``)."""

from __future__ import annotations

import sys

from benchmarks.suite.cli import main

if __name__ == "__main__":
    sys.exit(main())
