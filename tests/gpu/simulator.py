"""A simulated GPU for the tests of enzyme_py's GPU path on machines without one.

``simulated_cuda.c`` is a CUDA driver (libcuda.so) whose device memory is host memory.
With it first on LD_LIBRARY_PATH, liboffload's real CUDA plugin lists a "Simulated
H200" and drives it as a GPU: enzyme_py's liboffload calls, the cubin or PTX image,
the kernel symbol, the parameter buffer, copies and frees all go through it. What the
driver cannot do is execute the image, so a launch calls back into Python, which plays
the GPU: it decodes the parameter buffer at the offsets the image declares and runs the
kernel's per-index body on the CPU device over the indices the grid covers, on views of
the device memory. A wrong parameter layout, a pointer that is not device memory, a
grid too small or a missing copy therefore shows up in the results.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import threading
import traceback
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "simulated_cuda.c"
ENV = "ENZYME_PY_SIMULATED_GPU"  # the driver's path, in the process that uses it

_CODES = {"double": "d", "float": "f", "i64": "q", "i32": "i", "i16": "h", "i8": "b", "i1": "B"}


def build(directory: Path) -> Path:
    """Compile the simulated driver to ``directory/libcuda.so``."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise RuntimeError("no C compiler to build the simulated CUDA driver")
    target = directory / "libcuda.so"
    subprocess.run(
        [
            compiler,
            "-shared",
            "-fPIC",
            "-O1",
            "-fvisibility=hidden",
            "-o",
            str(target),
            str(SOURCE),
            "-lpthread",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


class Simulator:
    """The driver's test interface, and the Python side that plays the GPU."""

    HOOK = ctypes.CFUNCTYPE(
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    )

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)  # the same instance liboffload dlopens
        self.lib.sim_limit.restype = ctypes.c_size_t
        self.lib.sim_launches.restype = ctypes.c_longlong
        self.lib.sim_bytes_to_device.restype = ctypes.c_longlong
        self.lib.sim_bytes_to_host.restype = ctypes.c_longlong
        self.lib.sim_is_device_range.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._hook = self.HOOK(self._launch)  # kept alive as long as the simulator
        self.lib.sim_set_launch_hook(self._hook)
        self._current = threading.local()
        self.failures: list[BaseException] = []

    # -- what the tests read ---------------------------------------------------------
    def heap_limit(self) -> int:
        return int(self.lib.sim_limit(2))  # CU_LIMIT_MALLOC_HEAP_SIZE

    def launches(self) -> int:
        return int(self.lib.sim_launches())

    def live_allocations(self) -> int:
        return int(self.lib.sim_live_allocations())

    def bytes_copied(self) -> tuple[int, int]:
        """Bytes copied (to the device, to the host) since the driver started."""
        return int(self.lib.sim_bytes_to_device()), int(self.lib.sim_bytes_to_host())

    def fail_next_launch(self, cuda_result: int) -> None:
        self.lib.sim_fail_next_launch(cuda_result)

    # -- playing the GPU ---------------------------------------------------------------
    def install(self) -> None:
        """Record which kernel each GPU launch is for (the driver sees only its image)."""
        from enzyme_py import offload

        original = offload.Kernel._launch_gpu
        current = self._current

        def recording(kernel: Any, n: int, args: tuple[Any, ...], device: Any) -> None:
            current.launch = (kernel, args)
            try:
                original(kernel, n, args, device)
            finally:
                current.launch = None

        offload.Kernel._launch_gpu = recording

    def _launch(self, name, grid, block, params, size, count, offsets, sizes) -> int:
        try:
            self._run(
                name.decode(), grid, block, ctypes.string_at(params, size), count, offsets, sizes
            )
            return 0
        except BaseException as error:
            # The launch fails (liboffload reports error 719); the reason is printed for
            # the test's captured output.
            traceback.print_exc()
            self.failures.append(error)
            return 719  # CUDA_ERROR_LAUNCH_FAILED

    def _run(self, name, grid, block, buffer, count, offsets, sizes) -> None:
        import enzyme_py as ez

        kernel, args = self._current.launch
        like = tuple(np.empty(a.shape, a.dtype) if hasattr(a, "address") else a for a in args)
        per_index = kernel._body.per_index_for(like)
        info = next(i for i in per_index.module.functions() if i["name"] == per_index.name)
        types = ["i64", *info["params"][1:]]
        if name != "__enzyme_py_kernel" or count != len(types):
            raise AssertionError(f"{name} has {count} parameters in its image, not {len(types)}")

        def value(k: int) -> Any:
            code = _CODES.get(types[k], "Q")
            if struct.calcsize(code) != sizes[k]:
                raise AssertionError(f"parameter {k} is {sizes[k]} bytes in the image")
            return struct.unpack_from("<" + code, buffer, offsets[k])[0]

        def device_view(address: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if nbytes and not self.lib.sim_is_device_range(address, nbytes):
                raise AssertionError(f"{address:#x} (+{nbytes} bytes) is not device memory")
            raw = (ctypes.c_char * max(nbytes, 1)).from_address(address)
            return np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)

        n = value(0)
        visible = iter(like)
        call: list[Any] = []
        arrays: dict[int, np.ndarray] = {}
        errors: np.ndarray | None = None
        for k, param in enumerate(per_index.params[1:], start=1):
            if param.hidden is not None:
                if param.hidden[0] == "errors":
                    errors = device_view(value(k), (2,), np.dtype(np.int64))
                continue
            arg = next(visible)
            if param.kind == "pointer":
                arrays[k] = device_view(value(k), arg.shape, arg.dtype)
                call.append(arrays[k])
            else:
                call.append(value(k))
        for k, param in enumerate(per_index.params[1:], start=1):
            if param.hidden is not None and param.hidden[0] == "shape":
                _, source, dim = param.hidden
                if value(k) != arrays[source].shape[dim]:
                    raise AssertionError(
                        f"parameter {k}: shape {value(k)}, not {arrays[source].shape[dim]}"
                    )
        # Threads past the grid do not exist; threads past n return at once.
        covered = min(n, grid * block)
        try:
            kernel.launch(covered, *call, device=ez.offload.CPU)
        except Exception:
            if errors is None:
                raise
            errors[0] = 1  # what the body's error protocol stores on a GPU


_connected: Simulator | None = None


def connect() -> Simulator | None:
    """The simulator of this process, when it runs against the simulated driver (ENV
    names it, and LD_LIBRARY_PATH puts its directory first); None otherwise."""
    global _connected
    path = os.environ.get(ENV)
    if _connected is None and path:
        _connected = Simulator(path)
        _connected.install()
    return _connected
