"""Offload: devices, device arrays, and kernels launched over an index range.

    k = ez.offload.kernel(body)          # body(i, *args): an @njit function or C function
    k.launch(n, x, out)                  # body(i, x, out) for i in range(n)
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated)
    dk.launch(n, x, dx, out, dout)       # shadows after their arrays, accumulated into

The CPU device is enzyme_py's own JIT running the body over the range, split across
threads. CUDA GPUs are listed and launched through LLVM's offload runtime (liboffload):
the body is compiled to PTX by LLVM 15's NVPTX backend (with libdevice), one index per
GPU thread, assembled by ``ptxas`` when it is installed. A reverse kernel whose body
loops keeps a tape per index; on a GPU it comes from CUDA's device heap, which
enzyme_py asks liboffload to make 256 MiB (``LIBOMPTARGET_HEAP_SIZE``, unless set).
The GPU path is tested against a simulated CUDA driver (tests/gpu/simulator.py) under
liboffload's real CUDA plugin; its PTX has not yet run on a real GPU
(``tests/gpu/run_device_checks.sh``).
"""

from enzyme_py.offload._devices import (
    CPU,
    Device,
    DeviceArray,
    default_device,
    devices,
    to_device,
    to_host,
)
from enzyme_py.offload._kernel import Kernel, kernel

__all__ = [
    "CPU",
    "Device",
    "DeviceArray",
    "Kernel",
    "default_device",
    "devices",
    "kernel",
    "to_device",
    "to_host",
]
