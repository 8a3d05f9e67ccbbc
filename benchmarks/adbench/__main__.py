"""``python -m benchmarks.adbench``: the ADBench objectives (``benchmarks/adbench/run.py``)."""

from __future__ import annotations

import sys

from benchmarks.adbench.run import fresh_cache, main

if __name__ == "__main__":
    fresh_cache()  # before enzyme_py is imported by main()
    sys.exit(main())
