"""The disk cache verifies what it loads: damaged, truncated, swapped or stale entries
are misses (removed, logged, rebuilt), never code that runs (issue 22, item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from enzyme_py import _cache

from conftest import run_python

# f(x, y) = x*x*y at (3, 2): value 18, df/dx = 2xy = 12, df/dy = x*x = 9.
PROGRAM = """
import enzyme_py as ez
F = ('define double @f(double %x, double %y) {\\n %a = fmul double %x, %x\\n'
     ' %b = fmul double %a, %y\\n ret double %b\\n}')
G = ('define double @g(double %x, double %y) {\\n %a = fmul double %x, %y\\n'
     ' %b = fadd double %a, %y\\n ret double %b\\n}')
f = ez.llvm_ir(F, 'f')
g = ez.llvm_ir(G, 'g')
print(ez.autodiff(f, ez.Reverse, ez.Active, ez.Active, ez.Active)(3.0, 2.0, 1.0))
print(ez.autodiff(g, ez.Reverse, ez.Active, ez.Active, ez.Active)(3.0, 2.0, 1.0))
"""
# g(x, y) = x*y + y at (3, 2): value 8, dg/dx = y = 2, dg/dy = x + 1 = 4.
EXPECTED = "(18.0, 12.0, 9.0)\n(8.0, 2.0, 4.0)\n"


def _artifact() -> _cache.Artifact:
    return _cache.Artifact(
        object=bytes(range(256)) * 4,
        entry_name="__enzyme_py_entry_x",
        in_slots="ddd",
        out_slots="ddd",
    )


# --- the entry format (no Enzyme needed) ------------------------------------


def test_an_entry_round_trips():
    data = _cache.encode("k" * 64, _artifact())
    assert _cache.decode("k" * 64, data) == _artifact()


@pytest.mark.parametrize("keep", [0, 10, 15, 40, 200, -33, -32, -1])
def test_a_truncated_entry_is_refused(keep):
    data = _cache.encode("k" * 64, _artifact())
    with pytest.raises(_cache._Corrupt, match="truncated|checksum|format"):
        _cache.decode("k" * 64, data[:keep])


def test_every_single_bit_flip_is_refused():
    data = _cache.encode("k" * 64, _artifact())
    for position in range(len(data)):
        for bit in (0, 3, 7):
            damaged = bytearray(data)
            damaged[position] ^= 1 << bit
            with pytest.raises(_cache._Corrupt):
                _cache.decode("k" * 64, bytes(damaged))


def test_an_entry_under_another_key_is_refused():
    data = _cache.encode("a" * 64, _artifact())
    with pytest.raises(_cache._Corrupt, match="another derivative"):
        _cache.decode("b" * 64, data)


def test_an_entry_of_the_old_format_is_refused():
    data = _cache.encode("k" * 64, _artifact()).replace(b"ENZYME_PY_OBJ3", b"ENZYME_PY_OBJ2")
    with pytest.raises(_cache._Corrupt, match="format"):
        _cache.decode("k" * 64, data)


def test_load_removes_a_corrupt_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ENZYME_PY_LOG", "1")
    key = "c" * 64
    _cache.store(key, _artifact())
    (entry,) = tmp_path.rglob("*.ezo")
    assert _cache.load(key) == _artifact()
    entry.write_bytes(entry.read_bytes()[:-1])
    assert _cache.load(key) is None
    assert not entry.exists()


def test_the_ir_texts_are_an_entry_of_their_own_read_when_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ENZYME_PY_LOG", "1")
    key = "e" * 64
    texts = _cache.IRTexts("define ...", "; module", "; optimized")
    _cache.store(key, replace(_artifact(), texts=texts))
    assert sorted(p.suffix for p in tmp_path.rglob("*.ez?")) == [".ezi", ".ezo"]
    assert _cache.load(key) == _artifact()  # the object code alone
    assert _cache.load_texts(key) == texts
    (ir,) = tmp_path.rglob("*.ezi")
    ir.write_bytes(ir.read_bytes()[:-1])
    assert _cache.load_texts(key) is None and not ir.exists()
    assert _cache.load(key) == _artifact()  # the object code's entry is not affected
    assert _cache.load_texts("f" * 64) is None  # never stored


def test_stale_temporary_files_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("ENZYME_PY_CACHE_DIR", str(tmp_path))
    key = "d" * 64
    folder = tmp_path / key[:2]
    folder.mkdir()
    stale, fresh = folder / ".tmp-stale.ezo", folder / ".tmp-fresh.ezo"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"being written")
    old = time.time() - _cache.STALE_TEMP_SECONDS - 60
    os.utime(stale, (old, old))
    _cache.store(key, _artifact())
    assert not stale.exists(), "a temporary file of a writer that died is removed"
    assert fresh.exists(), "one a live writer may still be writing is left alone"
    assert _cache.load(key) == _artifact()


# --- real entries, damaged between processes --------------------------------


def _env(cache: Path) -> dict[str, str]:
    return {"ENZYME_PY_CACHE_DIR": str(cache), "ENZYME_PY_LOG": "1"}


def _fill(cache: Path) -> dict[str, Path]:
    """Entries for f and g in cache, by the function's name."""
    proc = run_python(PROGRAM, env=_env(cache))
    assert proc.returncode == 0 and proc.stdout == EXPECTED, proc.stdout + proc.stderr
    entries = {}
    for path in cache.rglob("*.ezo"):
        text = path.with_suffix(".ezi").read_bytes()  # the IR beside the object code
        entries["f" if b"%b = fmul" in text or b"@f(" in text else "g"] = path
    assert sorted(entries) == ["f", "g"]
    return entries


def _rerun(cache: Path, discarded: int) -> None:
    """A new process gives the right numbers; `discarded` entries were rebuilt."""
    proc = run_python(PROGRAM, env=_env(cache))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == EXPECTED
    assert proc.stderr.count("discarded and rebuilt") == discarded, proc.stderr
    assert proc.stderr.count("from Enzyme") == discarded, proc.stderr
    # What was rebuilt is stored again, and verified by the next process.
    again = run_python(PROGRAM, env=_env(cache))
    assert again.stdout == EXPECTED and "from Enzyme" not in again.stderr, again.stderr


def _header_end(data: bytes) -> int:
    return len(_cache._MAGIC) + 8 + int.from_bytes(data[len(_cache._MAGIC) :][:8], "little")


@pytest.mark.needs_enzyme
def test_truncated_entry_is_rebuilt(tmp_path):
    entry = _fill(tmp_path)["f"]
    entry.write_bytes(entry.read_bytes()[: len(entry.read_bytes()) // 2])
    _rerun(tmp_path, discarded=1)


@pytest.mark.needs_enzyme
def test_bit_flips_in_header_and_object_are_rebuilt(tmp_path):
    entries = _fill(tmp_path)
    data = entries["f"].read_bytes()
    end = _header_end(data)
    slot = data.index(b'"in_slots": "') + len(b'"in_slots": "')
    positions = {
        "magic": 3,
        "header length": len(_cache._MAGIC) + 1,
        "slot code": slot,  # 'd' -> 'f' gave dx = 1e-314 before entries were verified
        "key": data.index(b'"key": "') + 10,
        "object start": end + 20,
        "object middle": (end + len(data)) // 2,
        "object end": len(data) - 40,
        "checksum": len(data) - 5,
    }
    for where, at in positions.items():
        damaged = bytearray(data)
        damaged[at] ^= 0x02 if where == "slot code" else 0x10
        entries["f"].write_bytes(bytes(damaged))
        try:
            _rerun(tmp_path, discarded=1)
        except AssertionError as exc:
            raise AssertionError(f"a bit flip in the {where} (byte {at}): {exc}") from None


@pytest.mark.needs_enzyme
def test_wrong_slot_codes_with_a_valid_checksum_are_rebuilt(tmp_path):
    """The second check: slot codes must be those the request implies."""
    entries = _fill(tmp_path)
    key = entries["f"].stem
    artifact = _cache.decode(key, entries["f"].read_bytes())
    artifact.in_slots = artifact.in_slots.replace("d", "f", 1)
    entries["f"].write_bytes(_cache.encode(key, artifact))
    proc = run_python(PROGRAM, env=_env(tmp_path))
    assert proc.stdout == EXPECTED, proc.stderr
    assert "do not match the request" in proc.stderr


@pytest.mark.needs_enzyme
def test_object_code_the_jit_cannot_load_is_rebuilt(tmp_path):
    entries = _fill(tmp_path)
    key = entries["g"].stem
    artifact = _cache.decode(key, entries["g"].read_bytes())
    artifact.object = b"\x7fELF" + b"\0" * 60  # not an object file
    entries["g"].write_bytes(_cache.encode(key, artifact))
    proc = run_python(PROGRAM, env=_env(tmp_path))
    assert proc.returncode == 0 and proc.stdout == EXPECTED, proc.stderr
    assert "the JIT could not load it" in proc.stderr


@pytest.mark.needs_enzyme
def test_swapped_entries_are_rebuilt(tmp_path):
    entries = _fill(tmp_path)
    f_bytes, g_bytes = entries["f"].read_bytes(), entries["g"].read_bytes()
    entries["f"].write_bytes(g_bytes)
    entries["g"].write_bytes(f_bytes)
    _rerun(tmp_path, discarded=2)


# The IR texts of f's derivative (inspect_llvm, and its module, which differentiating it
# again starts from) come from the entry beside its object code, or are made again.
PROGRAM_TEXTS = (
    PROGRAM.split("f = ez.llvm_ir")[0]
    + """
f = ez.llvm_ir(F, 'f')
df = ez.autodiff(f, ez.Reverse, ez.Active, ez.Active, ez.Active)
print(df(3.0, 2.0, 1.0))
print('fmul' in df.inspect_llvm(), 'fmul' in df.inspect_llvm(optimized=True))
ddf = ez.autodiff(df, ez.Forward, ez.Dual, ez.Const, ez.Const, ez.Dual)
print(ddf(3.0, 1.0, 2.0, 1.0))
"""
)
# d/dx of (f, df/dx, df/dy) = (2xy, 2y, 2x) at (3, 2).
EXPECTED_TEXTS = "(18.0, 12.0, 9.0)\nTrue True\n((18.0, 12.0, 9.0), (12.0, 4.0, 6.0))\n"


@pytest.mark.needs_enzyme
@pytest.mark.parametrize("damage", ["intact", "removed", "bit flip"])
def test_ir_texts_from_the_disk_cache_or_made_again(tmp_path, damage):
    first = run_python(PROGRAM_TEXTS, env=_env(tmp_path))
    assert first.stdout == EXPECTED_TEXTS, first.stdout + first.stderr
    texts = list(tmp_path.rglob("*.ezi"))
    assert len(texts) == 2  # df's and ddf's
    for path in texts:
        if damage == "removed":
            path.unlink()
        elif damage == "bit flip":
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x10
            path.write_bytes(bytes(data))
    proc = run_python(PROGRAM_TEXTS, env=_env(tmp_path))
    assert proc.returncode == 0 and proc.stdout == EXPECTED_TEXTS, proc.stdout + proc.stderr
    # Both derivatives' code came from the disk cache; df's texts were read or made
    # again (ddf's were not asked for).
    assert "from Enzyme" not in proc.stderr, proc.stderr
    assert proc.stderr.count("IR texts made again") == (damage != "intact"), proc.stderr
    assert proc.stderr.count("discarded and rebuilt") == (damage == "bit flip"), proc.stderr


KILLED_WRITER = (
    """
import os, signal
from enzyme_py import _cache
def replace(tmp, path):  # the writer dies half-way through writing its entry
    with open(tmp, 'r+b') as f:
        f.truncate(os.path.getsize(tmp) // 2)
    os.kill(os.getpid(), signal.SIGKILL)
_cache.os.replace = replace
"""
    + PROGRAM
)


@pytest.mark.needs_enzyme
def test_a_killed_writer_leaves_no_entry(tmp_path):
    proc = run_python(KILLED_WRITER, env=_env(tmp_path))
    assert proc.returncode == -9, proc.stderr
    (partial,) = tmp_path.rglob(".tmp-*.ezo")
    assert not list(tmp_path.rglob("[!.]*.ezo"))
    old = time.time() - _cache.STALE_TEMP_SECONDS - 60
    os.utime(partial, (old, old))
    proc = run_python(PROGRAM, env=_env(tmp_path))
    assert proc.returncode == 0 and proc.stdout == EXPECTED, proc.stderr
    assert proc.stderr.count("from Enzyme") == 2
    assert "left by a writer that died" in proc.stderr
    assert not list(tmp_path.rglob(".tmp-*.ezo"))
    _rerun(tmp_path, discarded=0)


@pytest.mark.needs_enzyme
def test_two_processes_building_the_same_derivative_at_once(tmp_path):
    start = tmp_path / "go"
    waiting = f"import os, time\nwhile not os.path.exists({str(start)!r}): time.sleep(0.005)\n"
    cache = tmp_path / "cache"
    env = {**os.environ, **_env(cache)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", waiting + PROGRAM],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(1.0)  # both imported enzyme_py and wait
    start.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [out for out, _ in outs] == [EXPECTED, EXPECTED]
    assert len(list(cache.rglob("*.ezo"))) == 2
    assert not list(cache.rglob(".tmp-*"))
    _rerun(cache, discarded=0)
