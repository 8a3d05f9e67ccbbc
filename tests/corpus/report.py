"""``python -m tests.corpus.report``: the corpus's pass-rate table (per category, then
every entry that is not correct with its outcome). ``--markdown`` prints the table as
README.md shows it; names given on the command line run only those entries."""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

from .functions import ENTRIES
from .harness import CORRECT, ERROR, REFUSED, WRONG, Result, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help="run only these entries")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--progress", action="store_true", help="each entry's outcome on stderr")
    options = parser.parse_args(argv)
    entries = [e for e in ENTRIES if not options.names or e.name in options.names]
    start = time.perf_counter()
    results: list[Result] = []
    for e in entries:
        results.append(run(e))
        if options.progress:
            print(f"{e.name}: {results[-1].status}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    by_category: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_category[r.entry.category].append(r)
    statuses = (CORRECT, REFUSED, WRONG, ERROR)
    header = ["category", "functions", *statuses]
    rows = [
        [cat, str(len(rs)), *(str(sum(r.status == s for r in rs)) for s in statuses)]
        for cat, rs in by_category.items()
    ]
    rows.append(
        ["all", str(len(results)), *(str(sum(r.status == s for r in results)) for s in statuses)]
    )
    if options.markdown:
        print("| " + " | ".join(header) + " |")
        print("|---|" + "---:|" * (len(header) - 1))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
        for row in [header, *rows]:
            print("  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)))
    correct = sum(r.status == CORRECT for r in results)
    print(
        f"\n{correct} of {len(results)} correct ({100.0 * correct / max(1, len(results)):.1f} %), "
        f"{sum(r.status == WRONG for r in results)} wrong, in {seconds:.0f} s"
    )
    for r in results:
        if r.status != CORRECT:
            for o in r.outcomes:
                if o.status != CORRECT:
                    first = o.detail.splitlines()[0] if o.detail else ""
                    print(
                        f"- {r.entry.name} ({r.entry.note or r.entry.category}), {o.mode}: "
                        f"{o.status}: {first[:300]}"
                    )
    return 1 if any(r.status in (WRONG, ERROR) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
