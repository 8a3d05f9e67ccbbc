"""Devices and the arrays that live on them: the CPU device, the GPUs liboffload lists,
DeviceArray, to_device and to_host, and the checks of a launch's ``device=``."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from enzyme_py import _state
from enzyme_py.core import EnzymeUnavailableError


@dataclass(frozen=True)
class Device:
    """A device: name, platform (cpu, cuda, amdgpu), type (cpu, gpu), memory in bytes;
    for a CUDA GPU also its architecture as ptxas names it ("sm_90"), read from the
    driver ("" where it could not be read)."""

    name: str
    platform: str
    type: str
    memory: int
    index: int = -1  # position in liboffload's device list (-1: enzyme_py's CPU device)
    uid: str = ""  # liboffload's device UID ("CUDA-" and the UUID in hex, or a prefix)
    arch: str = ""

    @property
    def can_launch(self) -> bool:
        """Whether kernels run here: the CPU device, and CUDA GPUs through liboffload."""
        return self.platform == "cpu" or (self.type == "gpu" and self.platform == "cuda")

    @property
    def is_gpu(self) -> bool:
        return self.type == "gpu"


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


#: enzyme_py's own CPU device: the JIT, the range split across all cores.
CPU = Device("cpu", "cpu", "cpu", _physical_memory())


_listed: list[Device] | None = None  # liboffload's list does not change in a process


def devices() -> list[Device]:
    """The CPU device, then the GPUs liboffload reports (its virtual host device, which
    cannot run programs, is left out). RuntimeError if liboffload cannot be loaded."""
    global _listed
    if _state.native is None:
        raise EnzymeUnavailableError(_state.unavailable_message("ez.offload.devices"))
    if _listed is None:
        found = [Device(**d, index=i) for i, d in enumerate(_state.native.offload_devices())]
        gpus = [d for d in found if d.type == "gpu"]
        if any(d.platform == "cuda" for d in gpus):
            from enzyme_py import _cuda_driver

            cuda = [d for d in gpus if d.platform == "cuda"]
            arch = _matched_architectures(cuda, _cuda_driver.architectures())
            gpus = [replace(d, arch=arch.get(d.index, "")) for d in gpus]
        _listed = [CPU, *gpus]
    return list(_listed)


def _matched_architectures(cuda: list[Device], by_uuid: list[tuple[str, str]]) -> dict[int, str]:
    """Each CUDA GPU's architecture by its liboffload index. liboffload's UID may hold
    less of the UUID than the driver gives (liboffload 22.1, on one H200 of two:
    "CUDA-" and 8 hex digits), so a UID names the one driver device whose UUID starts
    with it; failing that, both list the GPUs in the driver's order."""
    found: dict[int, str] = {}
    for device in cuda:
        if len(device.uid) > len("CUDA-"):
            starting = [arch for uuid, arch in by_uuid if uuid.startswith(device.uid)]
            if len(starting) == 1:
                found[device.index] = starting[0]
    if len(found) < len(cuda) and len(cuda) == len(by_uuid):
        found = {device.index: arch for device, (_, arch) in zip(cuda, by_uuid, strict=True)}
    return found


def default_device() -> Device:
    """The device kernels launch on by default: the first CUDA GPU, else the CPU device."""
    try:
        gpus = [d for d in devices() if d.is_gpu and d.can_launch]
    except RuntimeError:  # liboffload missing
        gpus = []
    return gpus[0] if gpus else CPU


class DeviceArray:
    """An array that lives on a device: on the CPU device a contiguous copy of the host
    array, on a GPU device memory from liboffload. Freed when closed (``with`` block)
    or when garbage collected; closed while a launch uses it (from another thread),
    it is unusable at once and freed when that launch ends."""

    def __init__(self, array: np.ndarray, device: Device):
        self.device = device
        host = np.asarray(array, order="C")  # keeps a 0-d array 0-d
        self._shape, self._dtype = host.shape, host.dtype
        self._data: np.ndarray | None = None
        self._address = 0
        self._lock = threading.Lock()
        self._launches = 0  # GPU launches using the memory now
        self._free_after_launches = False
        if device.is_gpu:
            self._address = int(_state.native.gpu_alloc(device.index, host.nbytes))
            _state.native.gpu_copy_to_device(device.index, self._address, host)
        else:
            self._data = np.array(host, copy=True)
        self._open = True

    def _check_open(self) -> None:
        if not self._open:
            raise ValueError("this device array was freed")

    @property
    def data(self) -> np.ndarray:
        """The array itself (CPU device only)."""
        self._check_open()
        if self._data is None:
            raise ValueError(f"the array lives on {self.device.name}: use to_host()")
        return self._data

    @property
    def address(self) -> int:
        """The device address (GPU devices)."""
        self._check_open()
        return self._address

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    def to_host(self) -> np.ndarray:
        """A host copy of the array."""
        self._check_open()
        if self._data is not None:
            return self._data.copy()
        out = np.empty(self._shape, self._dtype)
        _state.native.gpu_copy_to_host(self.device.index, out, self._address)
        return out

    def _enter_launch(self) -> int:
        """The device address, held until _leave_launch: a close() meanwhile waits."""
        with self._lock:
            self._check_open()
            self._launches += 1
            return self._address

    def _leave_launch(self) -> None:
        with self._lock:
            self._launches -= 1
            if self._launches == 0 and self._free_after_launches:
                self._free_after_launches = False
                _state.native.gpu_free(self._address)
                self._address = 0

    def close(self) -> None:
        """Free the device memory (once no launch uses it)."""
        with self._lock:
            if not self._open:
                return
            self._open, self._data = False, None
            if self._launches:
                self._free_after_launches = True
            elif self._address:
                _state.native.gpu_free(self._address)
                self._address = 0

    def __del__(self) -> None:
        # At interpreter shutdown module globals (contextlib, the native module) may
        # already be gone: nothing here may need them, and nothing may raise.
        try:  # noqa: SIM105 - contextlib.suppress is one of the globals that may be gone
            self.close()
        except Exception:
            pass

    def __enter__(self) -> DeviceArray:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = f"{self.shape} {self.dtype}" if self._open else "freed"
        return f"<DeviceArray on {self.device.name}: {state}>"


def to_device(array: np.ndarray, device: Device | None = None) -> DeviceArray:
    """Copy ``array`` (numbers or booleans, any shape) to ``device`` (default: the
    default device)."""
    check_device(device)
    host = np.asarray(array)
    if host.dtype.kind not in "biufc":
        raise TypeError(
            f"array must hold numbers or booleans to go to a device; got dtype {host.dtype}"
        )
    device = device or default_device()
    require_launchable(device)
    return DeviceArray(host, device)


def to_host(array: DeviceArray | np.ndarray) -> np.ndarray:
    """A host copy of a device array (a host array is returned as it is)."""
    return array.to_host() if isinstance(array, DeviceArray) else array


def check_device(device: Any) -> None:
    if device is not None and not isinstance(device, Device):
        raise TypeError(
            "device must be an ez.offload.Device (ez.offload.CPU, or one of "
            f"ez.offload.devices()), not {device!r}"
        )


def require_launchable(device: Device) -> None:
    if not device.can_launch:
        raise NotImplementedError(
            f"launching on {device.name} ({device.platform}) is not implemented yet; "
            "kernels run on ez.offload.CPU and CUDA GPUs"
        )
