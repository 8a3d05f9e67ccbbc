"""``python -m benchmarks``: the comparison suite (``benchmarks/suite/``)."""

from __future__ import annotations

import sys

from benchmarks.suite import main

if __name__ == "__main__":
    sys.exit(main())
