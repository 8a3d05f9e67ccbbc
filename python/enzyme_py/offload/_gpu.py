"""The GPU launcher: one index per GPU thread through liboffload, host arrays copied to
the device and back, the kernel's parameters packed as the GPU expects them."""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np

from enzyme_py import _arguments, _state
from enzyme_py.offload import _ptx
from enzyme_py.offload._body import KernelBody, launch_key
from enzyme_py.offload._devices import Device, DeviceArray

_GROUP = 256  # GPU threads per block
_MAX_GROUPS = 2**31 - 1  # CUDA's grid limit in x

_PACK = {
    "double": "d",
    "float": "f",
    "i64": "q",
    "i32": "i",
    "i16": "h",
    "i8": "b",
    "i1": "B",
    "ptr": "Q",
}


def pack(values: list[tuple[str, Any]]) -> bytes:
    """Kernel parameters as the GPU kernel expects them: each at its natural alignment."""
    out = bytearray()
    for llvm_type, value in values:
        code = _PACK.get(llvm_type, "Q" if llvm_type.endswith("*") else None)
        if code is None:
            raise TypeError(f"cannot pass a {llvm_type} to a GPU kernel")
        size = struct.calcsize(code)
        out += b"\0" * (-len(out) % size)
        out += struct.pack("<" + code, value)
    return bytes(out)


class GpuLauncher:
    """The GPU launches of one kernel, with what is built per device and argument types:
    the loaded kernel, whether it keeps a tape on the device heap, and which of its
    arrays the body only reads."""

    def __init__(self, body: KernelBody):
        self.body = body
        self.kernels: dict[Any, int] = {}
        self.read_only: dict[Any, list[bool]] = {}
        self.uses_device_heap: dict[Any, bool] = {}

    def launch(self, n: int, args: tuple[Any, ...], device: Device) -> None:
        """One index per GPU thread. Host arrays are copied to the device, and back
        unless the body provably does not write them."""
        if -(-n // _GROUP) > _MAX_GROUPS:
            raise ValueError(
                f"n = {n} is more indices than one GPU launch covers "
                f"({_MAX_GROUPS * _GROUP}): launch the range in parts"
            )
        like = tuple(np.empty(a.shape, a.dtype) if isinstance(a, DeviceArray) else a for a in args)
        per_index = self.body.per_index_for(like)
        key = (device.index, *launch_key(like))
        kernel = self.kernels.get(key)
        if kernel is None:
            arch = _ptx.gpu_arch(device)
            ptx = _ptx.emit(per_index, arch)
            try:
                _ptx.ptxas()
            except RuntimeError:  # no ptxas here: the driver compiles PTX itself
                image, what = ptx.encode() + b"\0", f"PTX for {_ptx.ptx_target(arch)}"
            else:  # ptxas's own errors are the user's to see
                image, what = _ptx.assemble(ptx, arch, self.body.name), f"a cubin for {arch}"
            try:
                kernel = _state.native.gpu_kernel(device.index, image, _ptx.GPU_KERNEL)
            except RuntimeError as error:
                reported = device.arch or "not readable from the driver"
                raise RuntimeError(
                    f"{device.name} did not load kernel {self.body.name} ({what}): {error}. "
                    f"The GPU's architecture: {reported}. A cubin runs only on GPUs of the "
                    "architecture it was built for: set ENZYME_PY_GPU_ARCH to the GPU's "
                    "(sm_90 for H100/H200, sm_80 for A100), or unset it to use the "
                    "driver's."
                ) from error
            self.kernels[key] = kernel
            # A tape per index (a reverse kernel whose body loops) is malloc'ed on the GPU.
            self.uses_device_heap[key] = re.search(r"\bmalloc\b", ptx) is not None
            # Arrays the body cannot write need not come back from the device.
            self.read_only[key] = _state.native.read_only_params(
                per_index.module.ir(), per_index.name
            )
        read_only = self.read_only[key]
        info = next(i for i in per_index.module.functions() if i["name"] == per_index.name)
        names = self.body.argument_names()
        temporaries: list[tuple[DeviceArray, np.ndarray | None]] = []
        in_use: list[DeviceArray] = []
        copies: dict[int, DeviceArray] = {}  # id of a host array -> its one device copy
        try:
            values: list[tuple[str, Any]] = [("i64", n)]
            visible = iter(enumerate(args))
            arrays: dict[int, Any] = {}
            errors: DeviceArray | None = None
            for k, (param, llvm_type) in enumerate(
                zip(per_index.params[1:], info["params"][1:], strict=True), start=1
            ):
                if param.hidden is not None:
                    what, source, dim = param.hidden
                    if what == "shape":
                        values.append(("i64", arrays[source].shape[dim]))
                    else:
                        errors = DeviceArray(np.zeros(2, np.int64), device)
                        temporaries.append((errors, None))
                        values.append(("ptr", errors.address))
                    continue
                position, arg = next(visible)
                where = (
                    f"{names[position] if names else param.name} (argument {position + 1} "
                    f"after n) of kernel {self.body.name}"
                )
                if param.kind == "pointer":
                    if isinstance(arg, DeviceArray):
                        if arg.device != device:
                            raise ValueError(
                                f"{where} lives on {arg.device.name}, not on {device.name}"
                            )
                        if param.dtype is not None and arg.dtype != param.dtype:
                            raise ValueError(f"{where} needs dtype {param.dtype}; got {arg.dtype}")
                        on_device = arg
                        if all(a is not arg for a in in_use):
                            arg._enter_launch()
                            in_use.append(arg)
                    elif id(arg) in copies:  # one array passed twice: one device copy
                        on_device = copies[id(arg)]
                    else:
                        # Copied to the device and back: any layout does, but the dtype
                        # must be the body's, and what the body may write, writable.
                        if not isinstance(arg, np.ndarray):
                            raise TypeError(
                                f"{where} is an array; got {type(arg).__name__} "
                                "(pass a NumPy array or a DeviceArray)"
                            )
                        if param.dtype is not None and arg.dtype != param.dtype:
                            raise ValueError(f"{where} needs dtype {param.dtype}; got {arg.dtype}")
                        if not read_only[k] and not arg.flags.writeable:
                            raise ValueError(
                                f"{where} is read-only, and the kernel may write it: pass a copy"
                            )
                        _refuse_shared_memory(arg, where, copies, args)
                        on_device = DeviceArray(arg, device)
                        copies[id(arg)] = on_device
                        temporaries.append((on_device, None if read_only[k] else arg))
                    arrays[k] = on_device
                    values.append(("ptr", on_device.address))
                else:
                    # Checked and converted as the CPU device's launcher does.
                    values.append((llvm_type, _arguments.scalar(arg, param, where)))
            try:
                _state.native.gpu_launch(
                    device.index, kernel, pack(values), max(1, -(-n // _GROUP)), _GROUP
                )
            except RuntimeError as error:
                if not self.uses_device_heap[key]:
                    raise
                raise RuntimeError(
                    f"{error}. Kernel {self.body.name} keeps a tape per index on the GPU's "
                    "heap (LIBOMPTARGET_HEAP_SIZE bytes, 256 MiB unless set; read when "
                    "the GPU is first used), which a launch over many indices can "
                    "exhaust: set it higher before the first GPU use, or launch fewer "
                    "indices at a time."
                ) from error
            for on_device, host in temporaries:
                if host is not None:
                    host[...] = on_device.to_host()
            if errors is not None:
                status = int(errors.to_host()[0])
                if status:
                    raise RuntimeError(
                        f"kernel {self.body.name} failed with status {status} on {device.name}: "
                        "the body raised, or indexed past an array (boundscheck). "
                        "Exception details do not cross from the GPU: launch on "
                        "ez.offload.CPU to see the exception."
                    )
        finally:
            for on_device, _ in temporaries:
                on_device.close()
            for device_array in in_use:
                device_array._leave_launch()


def _refuse_shared_memory(
    array: np.ndarray, where: str, copies: dict[int, DeviceArray], args: tuple[Any, ...]
) -> None:
    """A GPU launch copies each host array to the device once; two different
    arrays that share memory would become two copies, and what the body writes
    through one would not be seen through the other."""
    for other in args:
        if isinstance(other, np.ndarray) and id(other) in copies and np.shares_memory(array, other):
            raise ValueError(
                f"{where} shares memory with another array argument: on a GPU each "
                "array is copied to the device on its own; pass the same array "
                "object, or one DeviceArray (ez.offload.to_device) for both"
            )
