"""Cython's translations of ``ez.cython`` modules, kept in the disk cache: a new
process skips Cython (about 1.5-1.9 s for the suite's module on a 2-core VM; clang
still compiles the C) while the source, the directives, Cython, Python and every file
Cython read are unchanged. ``frontends/cython.py`` makes the key and records what the
driver read (each file's size and modification time when Cython opened it); a kept
translation is served only if every one of those files is as it was.

The frontends sit below the disk cache: this module gives ``frontends.cython`` its
``translations`` when enzyme_py is imported with AD.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from enzyme_py import _cache
from enzyme_py.frontends import cython


def load(key: str) -> tuple[str, list[dict[str, Any]]] | None:
    """The C text and function descriptions kept under ``key``, or None (missing,
    damaged, or a file Cython read has changed or gone)."""
    text = _cache.load_text(key)
    if text is None:
        return None
    try:
        kept = json.loads(text)
        c_text, infos, read = kept["c"], kept["functions"], kept["read"]
        for path, size, modified in read:
            status = os.stat(path)
            if status.st_size != size or status.st_mtime_ns != modified:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(c_text, str) or not isinstance(infos, list):
        return None
    return c_text, infos


def keep(key: str, c_text: str, infos: list[dict[str, Any]], read: list[list[Any]]) -> None:
    """Keep a translation and the files it was made from (``[path, size, mtime_ns]``)."""
    _cache.store_text(key, json.dumps({"c": c_text, "functions": infos, "read": read}))


cython.translations = sys.modules[__name__]
