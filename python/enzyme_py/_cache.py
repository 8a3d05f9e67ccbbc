"""Where compiled derivatives are kept: in memory for the process, on disk across processes.

A derivative is identified by a key: the SHA-256 of its input IR, the request
(function, mode, activities, width, options, passes), and the versions of
everything that shapes the object code (enzyme_py, Enzyme, LLVM, the plugin file,
the host CPU). The disk cache holds the object code under that key, so a new
process skips Enzyme and the optimizer.

An entry is ``magic | header length | header (JSON, with the key) | object code |
SHA-256 of all that``, in ``<key>.ezo``. The derivative's IR (as Enzyme made it, the
module kept to differentiate it again, the optimised module: GMM prange's are 1 MB, its
object code 34 KB) is in an entry of the same format beside it, ``<key>.ezi``, read only
when asked for (``load_texts``): a new process loading GMM prange's derivative no longer
hashes and parses that megabyte (4.5 -> 0.5 ms). Nothing is loaded unverified: a wrong
magic, a short file, a digest that does not match, a header for another key (an entry
copied under the wrong name) makes the entry a miss, which is removed, logged and
rebuilt (see docs/guarantees.md). Files are written to a temporary name and renamed into place,
so a reader never sees a partial entry; temporary files that a killed writer left
behind are removed once they are old.

Environment: ``ENZYME_PY_CACHE_DIR`` (default ``$XDG_CACHE_HOME/enzyme_py`` or
``~/.cache/enzyme_py``); ``ENZYME_PY_DISK_CACHE=0`` turns the disk cache off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enzyme_py._log import log

if TYPE_CHECKING:
    from enzyme_py._native import BuildArtifact

# Version 3: the IR texts in an entry of their own (version 2 entries, which held them,
# and version 1 entries, without a digest, are misses).
_MAGIC = b"ENZYME_PY_OBJ3\n"
_HEADER = struct.Struct("<Q")
_DIGEST_SIZE = 32
# A temporary file this old was left by a writer that died (a store takes milliseconds).
STALE_TEMP_SECONDS = 600.0
_TEXT_FIELDS = ("entry_name", "in_slots", "out_slots")
# Suffixes: a derivative's object code (and store_text's texts), its IR texts.
_OBJECT, _IR = ".ezo", ".ezi"


@dataclass(frozen=True)
class IRTexts:
    """A derivative's LLVM IR, as text (see src/engine.h)."""

    enzyme_ir: str  # the derivative function as Enzyme made it
    derivative_module: str  # the module kept to differentiate it again
    optimized_ir: str  # the module its object code was made from


@dataclass
class Artifact:
    """What building a derivative produced (see src/engine.h). ``texts`` is None for
    one loaded from the disk cache until asked for (``load_texts``)."""

    object: bytes
    entry_name: str
    in_slots: str
    out_slots: str
    texts: IRTexts | None = None

    @classmethod
    def from_native(cls, built: BuildArtifact) -> Artifact:
        """The fields of ``_native.build``'s result (the same names)."""
        texts = IRTexts(built.enzyme_ir, built.derivative_module, built.optimized_ir)
        return cls(built.object, built.entry_name, built.in_slots, built.out_slots, texts)


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
_IR_ENTRY = re.compile(r"[0-9a-f]{64}\.ezi")
_LEFTOVER = re.compile(r"\.tmp-.*\.ez[oi]")  # a write that was interrupted


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
            names = (_ENTRY, _IR_ENTRY, _LEFTOVER)
            if f.is_file() and any(name.fullmatch(f.name) for name in names):
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


def _path(key: str, suffix: str = _OBJECT) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / key[:2] / f"{key}{suffix}"


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def encode(key: str, artifact: Artifact) -> bytes:
    """The bytes of a disk-cache entry for artifact under key."""
    header = {"key": key, "object_size": len(artifact.object)}
    header.update({name: getattr(artifact, name) for name in _TEXT_FIELDS})
    blob = json.dumps(header).encode()
    body = b"".join([_MAGIC, _HEADER.pack(len(blob)), blob, artifact.object])
    return body + _digest(body)


class _Corrupt(Exception):
    """Why an entry cannot be used."""


def decode(key: str, data: bytes) -> Artifact:
    """The artifact in an entry's bytes; _Corrupt if they are not a valid entry for key."""
    if not data.startswith(_MAGIC):
        raise _Corrupt("not an entry of this format (an older version's, or damaged)")
    if len(data) < len(_MAGIC) + _HEADER.size + _DIGEST_SIZE:
        raise _Corrupt(f"truncated ({len(data)} bytes)")
    body, digest = data[:-_DIGEST_SIZE], data[-_DIGEST_SIZE:]
    if _digest(body) != digest:
        raise _Corrupt("checksum mismatch (truncated or damaged)")
    at = len(_MAGIC)
    (header_len,) = _HEADER.unpack_from(body, at)
    at += _HEADER.size
    try:
        header = json.loads(body[at : at + header_len].decode())
        obj = body[at + header_len :]
        if header["key"] != key:
            raise _Corrupt("it is the entry of another derivative (copied or renamed)")
        if len(obj) != header["object_size"]:
            raise _Corrupt("object size does not match its header")
        fields = {name: header[name] for name in _TEXT_FIELDS}
    except (ValueError, KeyError, TypeError) as exc:
        raise _Corrupt(f"bad header ({exc})") from None
    if not all(isinstance(v, str) for v in fields.values()):
        raise _Corrupt("bad header (a field is not text)")
    return Artifact(object=obj, **fields)


def discard(key: str, reason: str, suffix: str = _OBJECT) -> None:
    """Remove the entry under key (it failed to load), logging why."""
    path = _path(key, suffix)
    if path is None:
        return
    log(f"disk cache entry {path.name} discarded and rebuilt: {reason}")
    # Already gone (another process discarded it), or a read-only cache: fine.
    with contextlib.suppress(OSError):
        path.unlink()


def load(key: str, suffix: str = _OBJECT) -> Artifact | None:
    """The artifact stored under key (its IR texts not read: ``load_texts``), or None
    (missing, unreadable or corrupt: then the entry is removed)."""
    path = _path(key, suffix)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log(f"disk cache entry {path.name} unreadable ({exc})")
        return None
    try:
        return decode(key, data)
    except _Corrupt as exc:
        discard(key, str(exc), suffix)
        return None


def _remove_stale_temporaries(folder: Path) -> None:
    now = time.time()
    # Names tested, not a glob: compiling its pattern took 2-5 ms of each first store.
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries]
    except OSError:
        return
    for name in names:
        if not (name.startswith(".tmp-") and name.endswith((_OBJECT, _IR))):
            continue
        tmp = folder / name
        try:
            if now - tmp.stat().st_mtime > STALE_TEMP_SECONDS:
                tmp.unlink()
                log(f"disk cache: removed {tmp.name}, left by a writer that died")
        except OSError:
            pass


def _write(path: Path, data: bytes) -> None:
    """data into path, whole or not at all; failures (read-only disk, full disk) are
    only logged."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log(f"disk cache not written ({exc})", logging.INFO)


# The entry names of a text entry (store_text) and of an IR entry: no derivative's
# entry is named so.
_TEXT_ENTRY = "<text>"
_IR_TEXTS = "<ir>"


def store(key: str, artifact: Artifact) -> None:
    """Write artifact under key: its object code, then its IR texts (where it has
    them) in an entry beside it. A writer killed in between leaves an object without
    texts, which are made again if asked for."""
    path = _path(key)
    if path is None:
        return
    _write(path, encode(key, artifact))
    if artifact.texts is not None:
        texts = json.dumps(dataclasses.asdict(artifact.texts)).encode()
        _write(path.with_suffix(_IR), encode(key, Artifact(texts, _IR_TEXTS, "", "")))


def load_texts(key: str) -> IRTexts | None:
    """The IR texts stored beside key's object code, or None (missing or corrupt)."""
    artifact = load(key, _IR)
    if artifact is None or artifact.entry_name != _IR_TEXTS:
        return None
    try:
        fields = json.loads(artifact.object.decode())
        return IRTexts(**fields)
    except (ValueError, TypeError) as exc:  # never written so: damaged with its digest
        discard(key, f"bad IR texts ({exc})", _IR)
        return None


def store_text(key: str, text: str) -> None:
    """Keep a small text (a fact about some code, such as which parameters it only
    reads) under key, in an entry of the same verified format as a derivative's."""
    store(key, Artifact(text.encode(), _TEXT_ENTRY, "", ""))


def load_text(key: str) -> str | None:
    """The text store_text kept under key, or None (missing, corrupt, or not a text)."""
    artifact = load(key)
    if artifact is None or artifact.entry_name != _TEXT_ENTRY:
        return None
    try:
        return artifact.object.decode()
    except UnicodeDecodeError:
        return None


def request_key(parts: list[Any]) -> str:
    """The SHA-256 of the parts, in order."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()
