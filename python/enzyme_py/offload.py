"""Offload: the devices LLVM's offload runtime (liboffload) reports.

Kernels and device memory are not implemented yet; ``devices()`` lists what
liboffload sees (on a machine without a GPU: its virtual host device).
"""

from __future__ import annotations

from dataclasses import dataclass

from enzyme_py import _state
from enzyme_py.core import EnzymeUnavailableError

__all__ = ["Device", "devices"]


@dataclass(frozen=True)
class Device:
    """One device of liboffload: name, platform (cuda, amdgpu, host), type, memory in bytes."""

    name: str
    platform: str
    type: str
    memory: int


def devices() -> list[Device]:
    """The devices liboffload reports. RuntimeError if liboffload cannot be loaded."""
    if _state.native is None:
        raise EnzymeUnavailableError(_state.unavailable_message("ez.offload.devices"))
    return [Device(**d) for d in _state.native.offload_devices()]
