"""The few CUDA driver calls liboffload 22 does not answer: a GPU's compute capability.

liboffload's device info has no architecture, and a cubin runs only on the one it was
built for, so the architecture is read from the driver that liboffload's CUDA plugin
has already loaded (``libcuda.so``; the same handle, so the same devices). Every call
is optional: without a driver the result is empty and callers fall back to a default.
"""

from __future__ import annotations

import ctypes

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


def _driver() -> ctypes.CDLL | None:
    # liboffload's plugin opens the unversioned name; try it first to share its handle.
    for name in ("libcuda.so", "libcuda.so.1"):
        try:
            lib = ctypes.CDLL(name)
            lib.cuDeviceGetUuid  # noqa: B018 - present since CUDA 9.2; older drivers: none
        except (OSError, AttributeError):
            continue
        # CUresult cuInit(unsigned int flags)
        lib.cuInit.argtypes = [ctypes.c_uint]
        # CUresult cuDeviceGetCount(int *count)
        lib.cuDeviceGetCount.argtypes = [ctypes.POINTER(ctypes.c_int)]
        # CUresult cuDeviceGet(CUdevice *device, int ordinal); CUdevice is an int
        lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        # CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device); CUuuid is 16 bytes
        lib.cuDeviceGetUuid.argtypes = [ctypes.c_char_p, ctypes.c_int]
        # CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice)
        lib.cuDeviceGetAttribute.argtypes = [
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int,
            ctypes.c_int,
        ]
        return lib  # every CUresult is an int: ctypes' default restype
    return None


def architectures() -> list[tuple[str, str]]:
    """``("CUDA-<uuid hex>", "sm_<major><minor>")`` for each GPU the driver lists, in
    its order (liboffload's UIDs have the same prefix). Empty when there is no driver
    or it fails."""
    lib = _driver()
    if lib is None or lib.cuInit(0) != 0:
        return []
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    found = []
    for ordinal in range(count.value):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        uuid = ctypes.create_string_buffer(16)
        if (
            lib.cuDeviceGet(ctypes.byref(device), ordinal) != 0
            or lib.cuDeviceGetUuid(uuid, device) != 0
            or lib.cuDeviceGetAttribute(
                ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device
            )
            != 0
            or lib.cuDeviceGetAttribute(
                ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device
            )
            != 0
        ):
            continue
        found.append(("CUDA-" + uuid.raw.hex(), f"sm_{major.value}{minor.value}"))
    return found
