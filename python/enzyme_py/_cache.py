"""Where compiled derivatives are kept: in memory for the process, on disk across processes.

A derivative is identified by a key: the SHA-256 of its input IR, the request
(function, mode, activities, width, options, passes), and the versions of
everything that shapes the object code (enzyme_py, Enzyme, LLVM, the plugin file,
the host CPU). The disk cache holds the object code under that key, so a new
process skips Enzyme and the optimizer; files are written to a temporary name and
renamed into place, so concurrent processes never read a partial entry.

Environment: ``ENZYME_PY_CACHE_DIR`` (default ``$XDG_CACHE_HOME/enzyme_py`` or
``~/.cache/enzyme_py``); ``ENZYME_PY_DISK_CACHE=0`` turns the disk cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enzyme_py._log import log

_MAGIC = b"ENZYME_PY_OBJ1\n"
_HEADER = struct.Struct("<Q")


@dataclass
class Artifact:
    """What building a derivative produced (see src/engine.h)."""

    object: bytes
    entry_name: str
    in_slots: str
    out_slots: str
    enzyme_ir: str
    derivative_module: str
    optimized_ir: str

    @classmethod
    def from_native(cls, built: dict[str, Any]) -> Artifact:
        return cls(**{name: built[name] for name in cls.__dataclass_fields__})


def disk_cache_enabled() -> bool:
    return os.environ.get("ENZYME_PY_DISK_CACHE", "1").strip() != "0"


def configured_dir() -> Path:
    """The disk cache folder the environment names, whether or not the cache is on."""
    explicit = os.environ.get("ENZYME_PY_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "enzyme_py"


def cache_dir() -> Path | None:
    """The disk cache folder, or None when the disk cache is off."""
    return configured_dir() if disk_cache_enabled() else None


_ENTRY = re.compile(r"[0-9a-f]{64}\.ezo")
_LEFTOVER = re.compile(r"\.tmp-.*\.ezo")  # a write that was interrupted


def entries(folder: Path | None = None) -> list[Path]:
    """The files of the disk cache (entries, and temporaries an interrupted write left);
    only names enzyme_py writes, in its two-hex-digit subfolders."""
    root = configured_dir() if folder is None else folder
    found: list[Path] = []
    if not root.is_dir():
        return found
    for sub in sorted(root.iterdir()):
        if not (sub.is_dir() and re.fullmatch(r"[0-9a-f]{2}", sub.name)):
            continue
        for f in sorted(sub.iterdir()):
            if f.is_file() and (_ENTRY.fullmatch(f.name) or _LEFTOVER.fullmatch(f.name)):
                found.append(f)
    return found


def summary() -> dict[str, Any]:
    """``python -m enzyme_py cache info``: folder, whether it is used, entries, bytes."""
    files = entries()
    return {
        "directory": str(configured_dir()),
        "enabled": disk_cache_enabled(),
        "entries": sum(1 for f in files if _ENTRY.fullmatch(f.name)),
        "bytes": sum(f.stat().st_size for f in files),
    }


def clear() -> tuple[int, int]:
    """Remove the disk cache's files (and its emptied subfolders); (files, bytes) removed.
    Other files in the folder are left alone."""
    removed = size = 0
    for f in entries():
        try:
            n = f.stat().st_size
            f.unlink()
        except FileNotFoundError:
            continue  # another process removed it first
        removed += 1
        size += n
        with contextlib.suppress(OSError):  # not empty yet
            f.parent.rmdir()
    return removed, size


def _path(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / key[:2] / f"{key}.ezo"


def load(key: str) -> Artifact | None:
    """The artifact stored under key, or None (missing, unreadable or corrupt)."""
    path = _path(key)
    if path is None or not path.is_file():
        return None
    try:
        data = path.read_bytes()
        if not data.startswith(_MAGIC):
            return None
        at = len(_MAGIC)
        (header_len,) = _HEADER.unpack_from(data, at)
        at += _HEADER.size
        header = json.loads(data[at : at + header_len].decode())
        obj = data[at + header_len :]
        if len(obj) != header.pop("object_size") or header.pop("key") != key:
            return None
        return Artifact(object=obj, **header)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


def store(key: str, artifact: Artifact) -> None:
    """Write artifact under key; failures (read-only disk, full disk) are only logged."""
    path = _path(key)
    if path is None:
        return
    header = {
        "key": key,
        "object_size": len(artifact.object),
        "entry_name": artifact.entry_name,
        "in_slots": artifact.in_slots,
        "out_slots": artifact.out_slots,
        "enzyme_ir": artifact.enzyme_ir,
        "derivative_module": artifact.derivative_module,
        "optimized_ir": artifact.optimized_ir,
    }
    blob = json.dumps(header).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".ezo")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC)
                f.write(_HEADER.pack(len(blob)))
                f.write(blob)
                f.write(artifact.object)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log(f"disk cache not written ({exc})", logging.INFO)


def request_key(parts: list[Any]) -> str:
    """The SHA-256 of the parts, in order."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()
