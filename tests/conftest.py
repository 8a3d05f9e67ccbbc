"""Test gating: AD tests carry the ``needs_enzyme`` marker and skip, with the
reason, when this build has no AD (stub build, ENZYME_PY_DISABLE, no plugin)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

# A fatal signal in a test names its native frames too (src/crash_report.h).
os.environ.setdefault("ENZYME_PY_CRASH_REPORT", "1")

import enzyme_py as ez

# Tests start from an empty derivative cache of their own (subprocesses inherit it).
os.environ.setdefault("ENZYME_PY_CACHE_DIR", tempfile.mkdtemp(prefix="enzyme_py_test_cache_"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if ez.has_autodiff():
        return
    skip = pytest.mark.skip(reason=f"needs Enzyme: {ez.info()['reason']}")
    for item in items:
        if "needs_enzyme" in item.keywords:
            item.add_marker(skip)


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120):
    """Run `code` in a fresh interpreter (for what must not share this process)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def run_until_done(prelude: str, body: str, cache: str | os.PathLike[str], **env: str) -> None:
    """Run ``prelude`` then ``body`` (dedented) in a new interpreter with ``env`` and the
    disk cache ``cache``; it must exit cleanly having reached its end."""
    code = prelude + textwrap.dedent(body) + '\nprint("done")\n'
    done = run_python(code, env={**env, "ENZYME_PY_CACHE_DIR": str(cache)}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout
