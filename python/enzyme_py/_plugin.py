"""Where the Enzyme plugin is looked for, and how AD is switched on or off."""

from __future__ import annotations

import os
from pathlib import Path

PLUGIN_FILE = "LLVMEnzyme-15.so"

HOW_TO_ENABLE = (
    "To enable AD: run `bash third_party/get_toolchain.sh` (installs LLVM 15 and the "
    "Enzyme plugin), then reinstall enzyme_py with ENZYME_PY_AD=ON "
    "(`pip install . -Ccmake.define.ENZYME_PY_AD=ON`); point ENZYME_PY_PLUGIN at "
    f"another {PLUGIN_FILE} if yours lives elsewhere; and unset ENZYME_PY_DISABLE."
)


def disabled_by_environment() -> bool:
    """True when ``ENZYME_PY_DISABLE`` asks for the stub."""
    return os.environ.get("ENZYME_PY_DISABLE", "").strip() not in ("", "0")


def toolchain_home() -> Path:
    """The folder third_party/get_toolchain.sh installs the plugin into."""
    home = os.environ.get("ENZYME_PY_HOME")
    if home:
        return Path(home)
    return Path.home() / ".local" / "share" / "enzyme_py"


def plugin_candidates() -> list[Path]:
    """Plugin paths in the order they are tried."""
    explicit = os.environ.get("ENZYME_PY_PLUGIN")
    if explicit:
        # An explicit choice is never silently replaced by another plugin.
        return [Path(explicit)]
    return [
        Path(__file__).parent / "_lib" / PLUGIN_FILE,
        toolchain_home() / PLUGIN_FILE,
    ]


def find_plugin() -> Path:
    """The first plugin that exists; FileNotFoundError listing where it looked."""
    candidates = plugin_candidates()
    for path in candidates:
        if path.is_file():
            return path
    tried = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(f"the Enzyme plugin {PLUGIN_FILE} was not found (tried {tried})")
