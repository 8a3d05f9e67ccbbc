"""``ez.info()`` and ``ez.has_autodiff()``: what this installation can do."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from enzyme_py import _cache, _state
from enzyme_py._version import __version__

ENZYME_VERSION = "0.0.289"


def has_autodiff() -> bool:
    """True when derivatives can be built: the compiled core and the plugin loaded."""
    return _state.native is not None


def _offload_devices() -> list[dict[str, Any]] | str:
    if _state.native is None:
        return "unavailable without the compiled core"
    try:
        return [dict(d) for d in _state.native.offload_devices()]
    except RuntimeError as exc:
        return f"unavailable: {exc}"


def _numba_version() -> str | None:
    # From the installed distribution's metadata: importing Numba takes most of a second.
    try:
        return metadata.version("numba")
    except metadata.PackageNotFoundError:
        return None


def info() -> dict[str, Any]:
    """A description of this installation.

    Keys: ``version`` (enzyme_py's), ``autodiff`` (bool), ``enzyme_version``,
    ``enzyme_plugin`` (path), ``llvm_version`` (the last three None without AD),
    ``numba_version`` (None when Numba is not installed), ``cache_dir`` (the disk cache
    of compiled derivatives, None when ``ENZYME_PY_DISK_CACHE=0``), ``vector_math`` (the
    vector math library derivatives may call: ``"libmvec"``, or None), ``wide_vectors``
    (``"512-bit streaming loops"`` where derivatives' streaming loops use AVX-512 vectors,
    see src/wide_vectors.h; else None),
    ``offload_devices`` (list of dicts with name, platform, type, memory, uid; or a
    string saying why none can be listed), and ``reason`` (why AD is unavailable, or
    None).
    """
    native = _state.native
    folder = _cache.cache_dir()
    return {
        "version": __version__,
        "autodiff": native is not None,
        "enzyme_version": ENZYME_VERSION if native is not None else None,
        "enzyme_plugin": native.plugin_path() if native is not None else None,
        "llvm_version": native.llvm_version if native is not None else None,
        "numba_version": _numba_version(),
        "cache_dir": str(folder) if folder is not None else None,
        "vector_math": (native.host()[3] or None) if native is not None else None,
        "wide_vectors": (native.host()[4] or None) if native is not None else None,
        "offload_devices": _offload_devices(),
        "reason": _state.unavailable_reason,
    }
