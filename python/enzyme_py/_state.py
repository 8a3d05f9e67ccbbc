"""Which backend this process runs: the compiled core, or the stub and why.

Decided once, at ``import enzyme_py``; every other module asks here.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from enzyme_py._plugin import HOW_TO_ENABLE, disabled_by_environment, find_plugin


def _load() -> tuple[ModuleType | None, str | None]:
    if disabled_by_environment():
        return None, "AD is disabled by ENZYME_PY_DISABLE in the environment"
    if importlib.util.find_spec("enzyme_py._native") is None:
        return None, (
            "this enzyme_py was built without AD (ENZYME_PY_AD=OFF, or LLVM 15 or the "
            "Enzyme plugin was not found when it was built)"
        )
    try:
        _native: Any = importlib.import_module("enzyme_py._native")
    except ImportError as exc:  # e.g. libLLVM-15.so.1 missing at run time
        return None, f"enzyme_py's compiled core does not load: {exc}"
    try:
        plugin = find_plugin()
        _native.load(str(plugin))
    except (OSError, RuntimeError) as exc:
        return None, f"the Enzyme plugin could not be loaded: {exc}"
    if os.environ.get("ENZYME_PY_CRASH_REPORT", "").strip() == "1":
        _native.install_crash_report()
    return _native, None


unavailable_reason: str | None
if TYPE_CHECKING:
    # Typed as the module its stub (_native.pyi) describes, so every call into the
    # core is checked; that it is None in the stub build is each caller's check.
    from enzyme_py import _native as native
else:
    native, unavailable_reason = _load()


def unavailable_message(what: str) -> str:
    """The text of EnzymeUnavailableError for an attempt to use `what`."""
    return f"{what} needs automatic differentiation, but {unavailable_reason}. {HOW_TO_ENABLE}"


def require_autodiff(what: str) -> None:
    """Raise EnzymeUnavailableError for `what` when this process runs the stub."""
    if native is None:
        from enzyme_py.core import EnzymeUnavailableError

        raise EnzymeUnavailableError(unavailable_message(what))
