"""Questions about LLVM IR text answered without a pattern that scans every line: one
anchored at line starts (``^declare ...``, re.MULTILINE) tries every position of the
module (~1-3 ms for GMM prange's 300 KB), where the name it asks about occurs a few
times."""

from __future__ import annotations

__all__ = ["declares"]


def declares(ir: str, name: str) -> bool:
    """Whether a line of ``ir`` starting with ``declare `` names ``@name(`` (what
    ``re.search(rf"^declare [^\\n]*@{re.escape(name)}\\(", ir, re.M)`` finds)."""
    needle = f"@{name}("
    at = ir.find(needle)
    while at >= 0:
        if ir.startswith("declare ", ir.rfind("\n", 0, at) + 1):
            return True
        at = ir.find(needle, at + len(needle))
    return False
