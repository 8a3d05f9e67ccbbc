"""Which parameters of a function only read their memory (LLVM's inference), what
``ez.grad`` and the other helpers ask to know which arrays need a shadow.

For a module identified without its IR (a Numba function whose code enzyme_py can
identify, see ``frontends._numba_identity``), the answer is kept in the disk cache
under that identity, the function's name and the versions of everything involved:
a new process whose derivatives come from the disk cache then compiles no IR for this
question either (the Numba GMM kernel: about 0.2 s of a filled-cache first call).
"""

from __future__ import annotations

import json

from enzyme_py import _cache
from enzyme_py._build import environment_parts
from enzyme_py.frontends import IRFunction


def read_only_params(fn: IRFunction) -> list[bool]:
    """Per LLVM parameter of ``fn``, whether LLVM infers it readonly (or readnone)."""
    module = fn.module
    if module.materialized:  # the IR exists: asking LLVM is cheap
        return list(module.native.read_only_params(fn.name))
    key = _cache.request_key(["read-only parameters", *environment_parts(), module.digest, fn.name])
    kept = _decoded(_cache.load_text(key), len(fn.params))
    if kept is not None:
        return kept
    flags = list(module.native.read_only_params(fn.name))
    _cache.store_text(key, json.dumps(flags))
    return flags


def _decoded(text: str | None, count: int) -> list[bool] | None:
    """The flags in a kept text, or None unless it is a list of ``count`` booleans."""
    if text is None:
        return None
    try:
        flags = json.loads(text)
    except ValueError:
        return None
    if not isinstance(flags, list) or len(flags) != count:
        return None
    if not all(isinstance(f, bool) for f in flags):
        return None
    return flags
