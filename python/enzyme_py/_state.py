"""Which backend this process runs: the compiled core, or the stub and why.

Decided once, at ``import enzyme_py``; every other module asks here.
"""

from __future__ import annotations

from types import ModuleType

from enzyme_py._plugin import HOW_TO_ENABLE, disabled_by_environment, find_plugin


def _load() -> tuple[ModuleType | None, str | None]:
    if disabled_by_environment():
        return None, "AD is disabled by ENZYME_PY_DISABLE in the environment"
    try:
        from enzyme_py import _native
    except ImportError as exc:
        return None, f"this enzyme_py was built without AD (no compiled core: {exc})"
    try:
        plugin = find_plugin()
        _native.load(str(plugin))
    except (OSError, RuntimeError) as exc:
        return None, f"the Enzyme plugin could not be loaded: {exc}"
    return _native, None


native, unavailable_reason = _load()


def unavailable_message(what: str) -> str:
    """The text of EnzymeUnavailableError for an attempt to use `what`."""
    return f"{what} needs automatic differentiation, but {unavailable_reason}. {HOW_TO_ENABLE}"
