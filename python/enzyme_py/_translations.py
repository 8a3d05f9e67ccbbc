"""The frontends' translations kept in the disk cache: clang's IR of C, C++ and
Cython's C (``frontends/ir.py``), and Cython's C of a .pyx (``frontends/cython.py``).
A new process compiling the same module skips both (``ez.cython`` of the benchmarks'
module on a 2-core VM: 2.7 s, then 57-80 ms, most of it reading the 1 MB of IR back
and scanning it for Enzyme's markers; ``ez.c`` of its C twin: 48 ms, then 1.2-1.8
ms) while what made the translation is unchanged: the frontends make the
key (the text, the flags, the translator's own identity, the include folders' header
names) and list the files it read (Cython's driver records each as it opens it;
clang's ``-MD`` lists the headers), each kept with its size and modification time; a
kept translation is served only if every one of those files is as it was.

The frontends sit below the disk cache: this module gives them their
``translations`` when enzyme_py is imported with AD.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from enzyme_py import _cache
from enzyme_py.frontends import cython, ir


def key(parts: list[Any]) -> str:
    """The disk cache's key of a translation the frontend describes by ``parts``."""
    return _cache.request_key(["translation", *parts])


def load(parts: list[Any]) -> dict[str, Any] | None:
    """What was kept for ``parts``, or None (missing, damaged, or a file it was made
    from has changed or gone)."""
    text = _cache.load_text(key(parts))
    if text is None:
        return None
    try:
        kept = json.loads(text)
        made, read = kept["made"], kept["read"]
        for path, size, modified in read:
            status = os.stat(path)
            if status.st_size != size or status.st_mtime_ns != modified:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return made if isinstance(made, dict) else None


def keep(parts: list[Any], made: dict[str, Any], read: list[list[Any]]) -> None:
    """Keep a translation and the files it was made from (``[path, size, mtime_ns]``)."""
    _cache.store_text(key(parts), json.dumps({"made": made, "read": read}))


ir.translations = cython.translations = sys.modules[__name__]
