"""enzyme_py's messages go through Python's ``logging``, logger ``enzyme_py``.

Cache hits and build stages are DEBUG records, progress of long builds INFO. Nothing is
shown unless the application configures logging (``logging.basicConfig(level=...)``,
or a handler on ``logging.getLogger("enzyme_py")``), or ``ENZYME_PY_LOG=1`` is set:
that attaches a handler writing ``[enzyme_py] message`` lines to stderr at DEBUG. The
variable is read at each message, so setting it after import works as it always did.
(The compiled core's stage timings, printed under the same variable, go to stderr
directly: C++ has no Python logger.)
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger("enzyme_py")

#: Builds still running after this many seconds get a progress line.
PROGRESS_AFTER_S = 1.0


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the current ``sys.stderr`` (which pytest and IDEs replace)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("[enzyme_py] %(message)s"))

    @property  # type: ignore[override]
    def stream(self):  # type: ignore[no-untyped-def]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass  # always the current sys.stderr


_env_handler: _StderrHandler | None = None


def env_enabled() -> bool:
    return os.environ.get("ENZYME_PY_LOG", "").strip() not in ("", "0")


def _sync_with_environment() -> None:
    """Attach or detach the stderr handler that ENZYME_PY_LOG asks for."""
    global _env_handler
    if env_enabled():
        if _env_handler is None:
            _env_handler = _StderrHandler()
            logger.addHandler(_env_handler)
            logger.setLevel(logging.DEBUG)
    elif _env_handler is not None:
        logger.removeHandler(_env_handler)
        logger.setLevel(logging.NOTSET)
        _env_handler = None


def log(message: str, level: int = logging.DEBUG) -> None:
    _sync_with_environment()
    logger.log(level, message)


@contextmanager
def progress(what: str, after_s: float | None = None) -> Iterator[None]:
    """INFO lines around a slow step: one when it is still running ``after_s`` seconds
    in (a timer thread, so fast steps log nothing), one with its time when it ends."""
    delay = PROGRESS_AFTER_S if after_s is None else after_s
    _sync_with_environment()
    if not logger.isEnabledFor(logging.INFO):
        yield
        return
    started = time.perf_counter()
    announced = threading.Event()

    def announce() -> None:
        announced.set()
        logger.info("building %s ...", what)

    timer = threading.Timer(delay, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # its line, if it fired, comes before the closing one
        if announced.is_set():
            logger.info("built %s in %.1f s", what, time.perf_counter() - started)
