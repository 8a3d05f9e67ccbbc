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

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from enzyme_py import _convention, _state
from enzyme_py._activities import check_activities
from enzyme_py._derivative import Derivative, Options
from enzyme_py._signature import Param
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    Const,
    EnzymeUnavailableError,
    Forward,
    Mode,
    Reverse,
)
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.frontends.ir import IRFunction, parse_module

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
    uid: str = ""  # liboffload's device UID ("CUDA-<uuid>")
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

            arch = _cuda_driver.architectures()
            gpus = [
                replace(d, arch=arch.get(d.uid, "")) if d.platform == "cuda" else d for d in gpus
            ]
        _listed = [CPU, *gpus]
    return list(_listed)


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
    _check_device(device)
    host = np.asarray(array)
    if host.dtype.kind not in "biufc":
        raise TypeError(
            f"array must hold numbers or booleans to go to a device; got dtype {host.dtype}"
        )
    device = device or default_device()
    _require_launchable(device)
    return DeviceArray(host, device)


def to_host(array: DeviceArray | np.ndarray) -> np.ndarray:
    """A host copy of a device array (a host array is returned as it is)."""
    return array.to_host() if isinstance(array, DeviceArray) else array


def _check_device(device: Any) -> None:
    if device is not None and not isinstance(device, Device):
        raise TypeError(
            "device must be an ez.offload.Device (ez.offload.CPU, or one of "
            f"ez.offload.devices()), not {device!r}"
        )


def _require_launchable(device: Device) -> None:
    if not device.can_launch:
        raise NotImplementedError(
            f"launching on {device.name} ({device.platform}) is not implemented yet; "
            "kernels run on ez.offload.CPU and CUDA GPUs"
        )


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=os.cpu_count() or 1, thread_name_prefix="enzyme_py"
            )
        return _pool


_RANGE = "__enzyme_py_range"

#: Shadows up to this size (all threads' copies together) are copied per thread in
#: multi-threaded reverse launches rather than added into atomically.
_PRIVATE_BYTES = 16 << 20


def _range_driver(
    body: Any, alias_safe: Any = None, describe: Callable[[int, Param], str] | None = None
) -> Any:
    """An IRFunction ``range(start, end, *body's other parameters)`` that calls
    ``body(i, ...)`` for i in [start, end), stopping at the first error reported
    through a hidden errors parameter; ``describe`` names its parameters in errors."""
    info = next(i for i in body.module.functions() if i["name"] == body.name)
    types = info["params"]
    if not types or types[0] != "i64":
        raise TypeError(
            f"a kernel body takes the index first, as a 64-bit integer; "
            f"'{body.display_name}' takes {types[0] if types else 'nothing'}"
        )
    rest = [f"{t} %p{k}" for k, t in enumerate(types[1:], start=1)]
    call_args = ", ".join(["i64 %i", *(f"{t} %p{k}" for k, t in enumerate(types[1:], start=1))])
    errors = next(
        (k for k, p in enumerate(body.params) if p.hidden and p.hidden[0] == "errors"), None
    )
    ret = info["ret"]
    check = []
    if errors is not None:
        check = [
            f"  %status = load i64, i64* %p{errors}",
            "  %failed = icmp ne i64 %status, 0",
            "  br i1 %failed, label %done, label %next_index",
            "next_index:",
        ]
    lines = [
        f"define void @{_RANGE}(i64 %start, i64 %end{''.join(', ' + r for r in rest)}) {{",
        "entry:",
        "  %empty = icmp sge i64 %start, %end",
        "  br i1 %empty, label %done, label %loop",
        "loop:",
        "  %i = phi i64 [ %start, %entry ], [ %next, %next_index ]"
        if check
        else "  %i = phi i64 [ %start, %entry ], [ %next, %loop ]",
        f"  call {ret} @{body.name}({call_args})",
        *check,
        "  %next = add i64 %i, 1",
        "  %more = icmp slt i64 %next, %end",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
    ]
    if not check:
        lines = [line for line in lines if line != "next_index:"]
    module = parse_module(body.module.ir() + "\n" + "\n".join(lines) + "\n")
    index = Param("start", "int", np.dtype(np.int64))
    shifted = tuple(
        replace(p, hidden=(p.hidden[0], p.hidden[1] + 1, p.hidden[2]))
        if p.hidden is not None and p.hidden[0] == "shape"
        else p
        for p in body.params[1:]
    )
    params = (index, Param("end", "int", np.dtype(np.int64)), *shifted)
    return IRFunction(
        module,
        _RANGE,
        params,
        None,
        f"kernel {body.display_name}",
        body.on_error,
        alias_safe,
        describe_argument=describe,
    )


_GPU_KERNEL = "__enzyme_py_kernel"
_GROUP = 256  # GPU threads per block
_MAX_GROUPS = 2**31 - 1  # CUDA's grid limit in x
_SREGS = ("tid.x", "ntid.x", "ctaid.x")


def _gpu_entry(body: Any) -> str:
    """``__enzyme_py_kernel(i64 n, *rest)``: one index per GPU thread, body(i, *rest)."""
    info = next(i for i in body.module.functions() if i["name"] == body.name)
    types = info["params"]
    rest = [f"{t} %p{k}" for k, t in enumerate(types[1:], start=1)]
    text = body.module.ir()
    declarations = [
        f"declare i32 @llvm.nvvm.read.ptx.sreg.{r}()"
        for r in _SREGS
        if f"@llvm.nvvm.read.ptx.sreg.{r}(" not in text
    ]
    call_args = ", ".join(["i64 %i", *(f"{t} %p{k}" for k, t in enumerate(types[1:], start=1))])
    return "\n".join(
        [
            *declarations,
            f"define void @{_GPU_KERNEL}(i64 %n{''.join(', ' + r for r in rest)}) {{",
            "entry:",
            "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
            "  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()",
            "  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
            "  %tid64 = zext i32 %tid to i64",
            "  %ntid64 = zext i32 %ntid to i64",
            "  %ctaid64 = zext i32 %ctaid to i64",
            "  %base = mul i64 %ctaid64, %ntid64",
            "  %i = add i64 %base, %tid64",
            "  %inside = icmp slt i64 %i, %n",
            "  br i1 %inside, label %run, label %done",
            "run:",
            f"  call {info['ret']} @{body.name}({call_args})",
            "  br label %done",
            "done:",
            "  ret void",
            "}",
        ]
    )


def _launch_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((a.dtype.str, a.ndim) if isinstance(a, np.ndarray) else type(a) for a in args)


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


def _pack(values: list[tuple[str, Any]]) -> bytes:
    """Kernel parameters as the GPU kernel expects them: each at its natural alignment."""
    import struct

    out = bytearray()
    for llvm_type, value in values:
        code = _PACK.get(llvm_type, "Q" if llvm_type.endswith("*") else None)
        if code is None:
            raise TypeError(f"cannot pass a {llvm_type} to a GPU kernel")
        size = struct.calcsize(code)
        out += b"\0" * (-len(out) % size)
        out += struct.pack("<" + code, value)
    return bytes(out)


def _gpu_arch(device: Device) -> str:
    """The ptxas target for launches on ``device``: ENZYME_PY_GPU_ARCH when set, else
    the architecture the driver reports, else sm_90 (H100/H200)."""
    return os.environ.get("ENZYME_PY_GPU_ARCH") or device.arch or "sm_90"


#: The newest target LLVM 15's NVPTX backend knows; ptxas and the driver take its PTX
#: to newer GPUs.
_NEWEST_PTX_TARGET = 86


def _ptx_target(arch: str) -> str:
    """The PTX target for a GPU of ``arch``: the GPU's own, up to what LLVM 15 knows."""
    try:
        number = int(arch.removeprefix("sm_"))
    except ValueError:
        return arch  # not a number: let ptxas name the problem
    return f"sm_{min(number, _NEWEST_PTX_TARGET)}"


def _from_nvcc_wheel(relative: str) -> str:
    """A file of NVIDIA's ``nvidia-cuda-nvcc-cu12`` wheel (ptxas, libdevice: the
    ``cuda`` extra), or "" when it is not installed."""
    from importlib import metadata

    try:
        found = metadata.distribution("nvidia-cuda-nvcc-cu12").locate_file(
            f"nvidia/cuda_nvcc/{relative}"
        )
    except metadata.PackageNotFoundError:
        return ""
    return str(found) if os.path.isfile(str(found)) else ""


def _libdevice() -> str:
    """CUDA's libdevice bitcode (math functions for the GPU), or "" if not found."""
    candidates = [os.environ.get("ENZYME_PY_LIBDEVICE", "")]
    candidates += [
        "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc",
        "/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc",
        _from_nvcc_wheel("nvvm/libdevice/libdevice.10.bc"),
    ]
    return next((c for c in candidates if c and os.path.isfile(c)), "")


def _ptxas() -> str:
    found = (
        shutil.which("ptxas")
        or ("/usr/local/cuda/bin/ptxas" if os.path.isfile("/usr/local/cuda/bin/ptxas") else "")
        or _from_nvcc_wheel("bin/ptxas")
    )
    if not found:
        raise RuntimeError(
            "CUDA's ptxas is needed to assemble PTX and was not found (install the CUDA "
            "toolkit, or enzyme_py's cuda extra: pip install 'enzyme_py[cuda]')"
        )
    return found


class Kernel:
    """A per-index body launched over a range (see the module docstring)."""

    def __init__(
        self,
        body: Any,
        derivative_of: tuple[Any, ...] | None = None,
        boundscheck: bool | None = None,
    ):
        self.body = body
        self._derivative_of = derivative_of  # (mode, activities, options) of a derivative
        self._boundscheck = boundscheck
        # What is compiled: a Numba body with its indexing checked (see ``kernel``).
        self._compiled = (
            numba_frontend.with_boundscheck(body, boundscheck)
            if numba_frontend.is_dispatcher(body)
            else body
        )
        self._launchers: dict[Any, Any] = {}
        self._gpu_kernels: dict[Any, int] = {}
        self._read_only: dict[Any, list[bool]] = {}
        self._uses_device_heap: dict[Any, bool] = {}
        self._reach: dict[Any, dict[int, int | None]] = {}  # by argument types and shapes

    @property
    def name(self) -> str:
        return str(
            getattr(self.body, "__name__", None) or getattr(self.body, "display_name", "body")
        )

    def _body_function(self, args: tuple[Any, ...]) -> Any:
        """The IRFunction to run per index, for these arguments."""
        if numba_frontend.is_dispatcher(self._compiled):
            types = (self._compiled.typeof_pyval(0), *self._primal_types(args))
            return numba_frontend.specialize(self._compiled, types).wrapper
        return self.body

    def _per_index(
        self, fn: Any, one_thread: bool = False, plain: frozenset[int] = frozenset()
    ) -> Any:
        """What runs per index: the body, or the derivative the kernel is of (on one
        thread, its shadows updated with plain adds instead of atomic ones; on several,
        plain adds into the shadows at launch positions ``plain`` only)."""
        if self._derivative_of is None:
            return fn
        mode, activities, options = self._derivative_of
        if one_thread:
            options = replace(options, atomic_add=False)
        full, ret = check_activities(fn, mode, (Const, *activities))
        derivative = Derivative(fn, mode, full, ret, options).as_function()
        if not plain or one_thread:
            return derivative
        module = parse_module(derivative.module.ir())  # a copy: the derivative keeps its own
        positions = [k for k, _ in derivative.visible_params]  # [index, *launch arguments]
        module.native.make_adds_plain(derivative.name, [positions[1 + k] for k in plain])
        return replace(derivative, module=module)

    def _shadow_plan(
        self, args: tuple[Any, ...], n: int, parts: int
    ) -> tuple[frozenset[int], frozenset[int], int]:
        """How ``parts`` threads of a reverse launch add into its shadows, by launch
        position: ``(private, plain, held_back)``.

        A shadow that each index provably touches only near its own entry is shared,
        with plain adds, and the last ``held_back`` indices of each thread's range run
        after the rest (indices further apart than that touch different entries).
        Another shadow, if small next to the launch, is copied per thread (``private``;
        plain adds into the copies, which are summed at the end). Any other is added
        into atomically: it is in neither set."""
        if parts == 1 or self._derivative_of is None or self._derivative_of[0] is not Reverse:
            return frozenset(), frozenset(), 0
        reach = self._reach_of(args)
        arrays = [(k, a) for k, a in enumerate(args) if isinstance(a, np.ndarray)]
        private, plain, held_back = set(), set(), 0
        for k, shadow in enumerate(args):
            if k not in reach or not isinstance(shadow, np.ndarray):
                continue
            if any(j != k and np.may_share_memory(a, shadow) for j, a in arrays):
                continue  # its entries are another array's too: atomic adds
            near = reach[k]
            if near is not None:
                plain.add(k)
                held_back = max(held_back, near)
            elif (
                shadow.size
                and shadow.flags.c_contiguous
                and shadow.flags.writeable
                and (shadow.nbytes * parts <= _PRIVATE_BYTES or shadow.size * parts <= n)
            ):
                private.add(k)
                plain.add(k)
        return frozenset(private), frozenset(plain), held_back

    def _layout(self) -> list[tuple[int, int | None]]:
        """For each parameter after the index, of a derivative kernel: the launch position
        of its value and that of its shadow (None without one; shadows follow values)."""
        assert self._derivative_of is not None
        layout, pos = [], 0
        for activity in self._derivative_of[1]:
            layout.append((pos, pos + 1 if activity.shadow else None))
            pos += 2 if activity.shadow else 1
        return layout

    def _shadow_positions(self) -> list[int]:
        return [shadow for _, shadow in self._layout() if shadow is not None]

    def _reach_of(self, args: tuple[Any, ...]) -> dict[int, int | None]:
        """For each shadow's launch position: how far apart two indices may be and still
        touch the same entry of it (None: it may be touched anywhere); see
        ``index_reach`` in src/kernel_ir.h."""
        assert self._derivative_of is not None
        # Array shapes are held at their values: they make a row's address linear in i.
        shapes = tuple(a.shape for a in args if isinstance(a, np.ndarray))
        key = (_launch_key(args), shapes)
        if key not in self._reach:
            shadows = self._shadow_positions()
            fn = self._per_index(self._body_function(args), one_thread=True)
            positions = [k for k, _ in fn.visible_params]  # [index, *launch arguments]
            argument_at = {p: k - 1 for k, p in enumerate(positions) if k > 0}
            constants = [
                (p, args[argument_at[param.hidden[1]]].shape[param.hidden[2]])
                for p, param in enumerate(fn.params)
                if param.hidden is not None and param.hidden[0] == "shape"
            ]
            found = _state.native.index_reach(
                fn.module.ir(),
                fn.name,
                positions[0],
                [positions[1 + k] for k in shadows],
                constants,
            )
            self._reach[key] = dict(zip(shadows, found, strict=True))
        return self._reach[key]

    def _primal_types(self, args: tuple[Any, ...]) -> list[Any]:
        if self._derivative_of is None:
            return [self.body.typeof_pyval(a) for a in args]
        return [self.body.typeof_pyval(args[value]) for value, _ in self._layout()]

    def _launcher(
        self, args: tuple[Any, ...], one_thread: bool = False, plain: frozenset[int] = frozenset()
    ) -> Any:
        # Reverse kernels accumulate atomically only when threads share shadows.
        one_thread = one_thread and self._derivative_of is not None
        key = (
            tuple((a.dtype.str, a.ndim) if isinstance(a, np.ndarray) else type(a) for a in args),
            one_thread,
            plain,
        )
        launcher = self._launchers.get(key)
        if launcher is None:
            body = self._body_function(args)
            # Bodies that promise disjoint arrays (Numba's noalias) come with a safe
            # twin; overlapping arrays in a launch go to its driver.
            safe = None
            if body.alias_safe is not None:
                unsafe_body = body

                def safe() -> Any:
                    return _range_driver(
                        self._per_index(unsafe_body.alias_safe(), one_thread, plain),
                        describe=self._describe_argument,
                    )

            driver = _range_driver(
                self._per_index(body, one_thread, plain), safe, self._describe_argument
            )
            options = Options(1, False, False, primal_only=True)
            acts, _ = check_activities(driver, Forward, [Const] * len(driver.visible_params))
            launcher = Derivative(driver, Forward, acts, None, options)
            self._launchers[key] = launcher
        return launcher

    def launch(
        self, n: int, *args: Any, device: Device | None = None, threads: int | None = None
    ) -> None:
        """Run the body for i in range(n) on ``device``: by default the device of the
        DeviceArray arguments, else ``default_device()`` (a GPU if there is one). On the
        CPU device the range is split across ``threads`` (default all cores; a GPU runs
        one index per GPU thread and ignores it). Device arrays and host arrays may be
        mixed; host arrays are used in place (on a GPU: copied there and back). On
        several threads a reverse kernel gives each thread its own copy of the shadows
        that are small next to the launch, adding the copies up at the end. Into a
        shadow the threads share, it adds with plain adds when each index provably
        touches only entries near its own (as in a stencil; the indices near the ends of
        each thread's range then run after the rest), else with atomic adds. On one
        thread (``threads=1``) all adds are plain; small launches are faster so, without
        the threads' start-up (about 0.1 ms).

        When the body raises (or indexes past an array), the launch raises that
        exception once every thread has stopped; what the arrays hold then is
        undefined: other threads finish their parts, indices held back for the end
        do not run, a reverse kernel's per-thread copies of shadows are dropped while
        the seeds it read are already consumed. A running launch cannot be
        interrupted (Ctrl-C waits for it)."""
        n = self._check_launch(n, args, device, threads)
        if device is None:
            device = next((a.device for a in args if isinstance(a, DeviceArray)), None)
        device = device or default_device()
        _require_launchable(device)
        if device.is_gpu:
            self._launch_gpu(n, args, device)
            return
        host_args = tuple(a.data if isinstance(a, DeviceArray) else a for a in args)
        parts = max(1, min(threads or os.cpu_count() or 1, n))
        bounds = [n * j // parts for j in range(parts + 1)]
        if parts == 1:
            self._launcher(host_args, one_thread=True)(0, n, *host_args)
            return
        private, plain, held_back = self._shadow_plan(host_args, n, parts)
        copies = {k: [np.array(host_args[k]) for _ in range(parts)] for k in private}

        def arguments(j: int) -> tuple[Any, ...]:
            return tuple(copies[k][j] if k in copies else a for k, a in enumerate(host_args))

        reverse = self._derivative_of is not None and self._derivative_of[0] is Reverse
        if plain.issuperset(self._shadow_positions() if reverse else ()):
            launcher = self._launcher(host_args, one_thread=True)  # no atomic adds at all
        else:
            launcher = self._launcher(host_args, plain=plain)

        def run_part(j: int) -> None:
            launcher(bounds[j], max(bounds[j], bounds[j + 1] - held_back), *arguments(j))

        # The first part runs on this thread: one wake-up fewer (tens of µs).
        futures = [_threads().submit(run_part, j) for j in range(1, parts)]
        try:
            run_part(0)
        finally:
            wait(futures)  # all threads done before an error of one is raised
        for future in futures:
            future.result()
        if held_back:
            for j in range(parts):
                launcher(max(bounds[j], bounds[j + 1] - held_back), bounds[j + 1], *arguments(j))
        for k, mine in copies.items():
            # Each copy started as the shadow: what a thread added is its difference.
            shared, start = host_args[k], np.array(host_args[k])
            for copy in mine:
                copy -= start
                shared += copy

    @functools.cached_property
    def _parameter_names(self) -> list[str] | None:
        """The body's parameters after the index (None where the body does not say)."""
        import inspect

        if numba_frontend.is_dispatcher(self.body):
            return list(inspect.signature(self.body.py_func).parameters)[1:]
        if hasattr(self.body, "visible_params"):
            params = [p for _, p in self.body.visible_params]
            if not params or params[0].dtype != np.dtype(np.int64):
                return None  # not a body: _range_driver says what is wrong
            return [p.name for p in params[1:]]
        return None

    def _argument_names(self) -> list[str] | None:
        """What ``launch`` takes after ``n`` (None where the body does not say)."""
        names = self._parameter_names
        if names is None or self._derivative_of is None:
            return names
        with_shadows = []  # derivative() made the activities fit the parameters
        for name, (_, shadow) in zip(names, self._layout(), strict=True):
            with_shadows += [name, f"the shadow of {name}"] if shadow is not None else [name]
        return with_shadows

    def _describe_argument(self, position: int, param: Param) -> str:
        """How argument errors name parameter ``position`` of a launcher, whose first two
        are its range: as ``launch`` counts its arguments, after n."""
        names = self._argument_names()
        k = position - 2
        name = names[k] if names is not None and 0 <= k < len(names) else param.name
        return f"{name} (argument {k + 1} after n) of kernel {self.name}"

    def _check_launch(self, n: Any, args: tuple[Any, ...], device: Any, threads: Any) -> int:
        """``n`` as an int, once the arguments of a launch are known to fit."""
        import operator

        try:
            count = operator.index(n)
        except TypeError:
            raise TypeError(
                f"n, the number of indices, must be an integer, not {type(n).__name__}"
            ) from None
        if count < 0:
            raise ValueError(f"n, the number of indices, must be 0 or more, not {count}")
        _check_device(device)
        if threads is not None:
            try:
                valid = operator.index(threads) >= 1
            except TypeError:
                valid = False
            if not valid:
                raise ValueError(f"threads must be a positive integer or None, not {threads!r}")
        names = self._argument_names()
        if names is not None and len(args) != len(names):
            raise TypeError(
                f"kernel {self.name} takes {len(names)} arguments after n "
                f"({', '.join(names)}); {len(args)} were given"
            )
        if names is not None:
            self._check_shadows(args, names)
        return count

    def _check_shadows(self, args: tuple[Any, ...], names: list[str]) -> None:
        """Each shadow is like its array (shape, dtype): the derivative indexes both
        alike, so a smaller shadow would be written past its end. No shadow shares
        memory with an array argument: what the derivative adds into it would change
        that array. Two shadows may share memory only as their arrays do (one
        array passed twice): the derivative reads a written array's shadow back as its
        seed, which another array's adjoints would otherwise mix into."""
        if self._derivative_of is None:
            return
        layout = self._layout()

        def where(k: int) -> str:
            return f"{names[k]} (argument {k + 1} after n)"

        for pos, at in layout:
            if at is None:
                continue
            primal, shadow = args[pos], args[at]
            if isinstance(primal, np.ndarray) and isinstance(shadow, np.ndarray):
                _convention.check_shadow(shadow, primal, 1, where(at))
            elif isinstance(primal, (np.ndarray, DeviceArray)):
                if not isinstance(shadow, (np.ndarray, DeviceArray)):
                    raise TypeError(
                        f"{where(at)} must be an array like {names[pos]}; "
                        f"got {type(shadow).__name__}"
                    )
                if (shadow.shape, shadow.dtype) != (primal.shape, primal.dtype):
                    raise ValueError(
                        f"{where(at)} needs shape {primal.shape} and dtype {primal.dtype} "
                        f"(as its array); got {shadow.shape} {shadow.dtype}"
                    )
        # Host arrays: the rule of calls from Python (a shadow of a device array is
        # never like another's).
        _convention.check_shadows_apart(
            [
                (where(at), args[at], args[pos] if isinstance(args[pos], np.ndarray) else None)
                for pos, at in layout
                if at is not None and isinstance(args[at], np.ndarray)
            ],
            [(where(pos), args[pos]) for pos, _ in layout if isinstance(args[pos], np.ndarray)],
            1,
        )
        # A device array shares memory only with itself.
        pairs = [(pos, at) for pos, at in layout if at is not None]
        for j, (pos, at) in enumerate(pairs):
            shadow = args[at]
            if not isinstance(shadow, DeviceArray):
                continue
            for array_pos, _ in layout:
                if args[array_pos] is shadow:
                    raise ValueError(
                        f"{where(at)} overlaps {where(array_pos)}: the derivative adds into the "
                        "shadow, which would change that array; give the shadow memory of its own"
                    )
            for other_pos, other_at in pairs[:j]:
                if args[other_at] is shadow and args[pos] is not args[other_pos]:
                    raise ValueError(
                        f"{where(at)} overlaps {where(other_at)}, and their arrays do not "
                        "overlap alike: the adjoints of the two would mix; give each shadow "
                        "memory of its own"
                    )

    def _launch_gpu(self, n: int, args: tuple[Any, ...], device: Device) -> None:
        """One index per GPU thread. Host arrays are copied to the device, and back
        unless the body provably does not write them."""
        if -(-n // _GROUP) > _MAX_GROUPS:
            raise ValueError(
                f"n = {n} is more indices than one GPU launch covers "
                f"({_MAX_GROUPS * _GROUP}): launch the range in parts"
            )
        like = tuple(np.empty(a.shape, a.dtype) if isinstance(a, DeviceArray) else a for a in args)
        per_index = self._per_index_for(like)
        key = (device.index, *_launch_key(like))
        kernel = self._gpu_kernels.get(key)
        if kernel is None:
            arch = _gpu_arch(device)
            ptx = self.ptx(*like, arch=_ptx_target(arch))
            try:
                _ptxas()
            except RuntimeError:  # no ptxas here: the driver compiles PTX itself
                image, what = ptx.encode() + b"\0", f"PTX for {_ptx_target(arch)}"
            else:  # ptxas's own errors are the user's to see
                image, what = self._assemble(ptx, arch), f"a cubin for {arch}"
            try:
                kernel = _state.native.gpu_kernel(device.index, image, _GPU_KERNEL)
            except RuntimeError as error:
                reported = device.arch or "not readable from the driver"
                raise RuntimeError(
                    f"{device.name} did not load kernel {self.name} ({what}): {error}. "
                    f"The GPU's architecture: {reported}. A cubin runs only on GPUs of the "
                    "architecture it was built for: set ENZYME_PY_GPU_ARCH to the GPU's "
                    "(sm_90 for H100/H200, sm_80 for A100), or unset it to use the "
                    "driver's."
                ) from error
            self._gpu_kernels[key] = kernel
            # A tape per index (a reverse kernel whose body loops) is malloc'ed on the GPU.
            self._uses_device_heap[key] = re.search(r"\bmalloc\b", ptx) is not None
            # Arrays the body cannot write need not come back from the device.
            self._read_only[key] = _state.native.read_only_params(
                per_index.module.ir(), per_index.name
            )
        read_only = self._read_only[key]
        info = next(i for i in per_index.module.functions() if i["name"] == per_index.name)
        names = self._argument_names()
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
                    f"after n) of kernel {self.name}"
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
                        self._refuse_shared_memory(arg, where, copies, args)
                        on_device = DeviceArray(arg, device)
                        copies[id(arg)] = on_device
                        temporaries.append((on_device, None if read_only[k] else arg))
                    arrays[k] = on_device
                    values.append(("ptr", on_device.address))
                else:
                    # Checked and converted as the CPU device's launcher does.
                    values.append((llvm_type, _convention.scalar(arg, param, where)))
            try:
                _state.native.gpu_launch(
                    device.index, kernel, _pack(values), max(1, -(-n // _GROUP)), _GROUP
                )
            except RuntimeError as error:
                if not self._uses_device_heap[key]:
                    raise
                raise RuntimeError(
                    f"{error}. Kernel {self.name} keeps a tape per index on the GPU's "
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
                        f"kernel {self.name} failed with status {status} on {device.name}: "
                        "the body raised, or indexed past an array (boundscheck). "
                        "Exception details do not cross from the GPU: launch on "
                        "ez.offload.CPU to see the exception."
                    )
        finally:
            for on_device, _ in temporaries:
                on_device.close()
            for device_array in in_use:
                device_array._leave_launch()

    @staticmethod
    def _refuse_shared_memory(
        array: np.ndarray, where: str, copies: dict[int, DeviceArray], args: tuple[Any, ...]
    ) -> None:
        """A GPU launch copies each host array to the device once; two different
        arrays that share memory would become two copies, and what the body writes
        through one would not be seen through the other."""
        for other in args:
            if (
                isinstance(other, np.ndarray)
                and id(other) in copies
                and np.shares_memory(array, other)
            ):
                raise ValueError(
                    f"{where} shares memory with another array argument: on a GPU each "
                    "array is copied to the device on its own; pass the same array "
                    "object, or one DeviceArray (ez.offload.to_device) for both"
                )

    def _per_index_for(self, args: tuple[Any, ...]) -> Any:
        return self._per_index(self._body_function(args))

    def ptx(self, *args: Any, arch: str = "sm_86") -> str:
        """PTX of this kernel for NVIDIA GPUs (LLVM 15's NVPTX backend: a newer ``arch``
        than sm_86 gets PTX for sm_86, which such GPUs run), for arguments like ``args``
        (as ``launch`` takes them, without ``n``). Its entry,
        ``__enzyme_py_kernel(n, *args)``, runs one index per GPU thread."""
        args = tuple(np.empty(a.shape, a.dtype) if isinstance(a, DeviceArray) else a for a in args)
        if self._derivative_of is None:
            per_index = self._body_function(args)
        else:
            per_index = self._per_index(self._body_function(args))
        text = per_index.module.ir() + "\n" + _gpu_entry(per_index) + "\n"
        # LLVM 15 knows architectures up to sm_86; PTX for it runs on newer GPUs.
        target = _ptx_target(arch)
        return str(_state.native.emit_ptx(text, _GPU_KERNEL, _libdevice(), target))

    def cubin(self, *args: Any, arch: str = "sm_90") -> bytes:
        """The PTX assembled by CUDA's ``ptxas`` for ``arch`` (RuntimeError without it)."""
        return self._assemble(self.ptx(*args, arch=_ptx_target(arch)), arch)

    def _assemble(self, ptx: str, arch: str) -> bytes:
        ptxas = _ptxas()
        with tempfile.TemporaryDirectory(prefix="enzyme_py_ptx_") as tmp:
            source = os.path.join(tmp, "kernel.ptx")
            target = os.path.join(tmp, "kernel.cubin")
            with open(source, "w") as f:
                f.write(ptx)
            proc = subprocess.run(
                [ptxas, f"-arch={arch}", "-o", target, source],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"ptxas failed for {self.name}:\n{proc.stderr.strip()}")
            with open(target, "rb") as f:
                return f.read()

    def derivative(self, mode: Mode, *activities: Any) -> Kernel:
        """The kernel of the derivative of the body with respect to its arguments after
        the index (see ``ez.autodiff``); reverse mode accumulates with atomic adds."""
        if mode is not Reverse and mode is not Forward:
            raise TypeError(f"mode must be ez.Reverse or ez.Forward, not {mode!r}")
        if self._derivative_of is not None:
            raise ActivityError(
                f"{self!r} is already a derivative; differentiating a kernel again is not "
                "supported (differentiate the body, e.g. ez.autodiff of an @njit function)"
            )
        names = self._parameter_names
        if names is not None and len(activities) != len(names):
            raise ActivityError(
                f"kernel {self.name} takes {len(names)} arguments after the index "
                f"({', '.join(names)}); {len(activities)} activities were given"
            )
        for k, activity in enumerate(activities):
            what = f"the activity of {names[k]}" if names else f"activity {k}"
            if not isinstance(activity, Activity):
                raise ActivityError(
                    f"{what} must be an activity (ez.Const, ez.Duplicated, ez.Dual, ...); "
                    f"got {activity!r}"
                )
            if not activity.allowed_in(mode):
                allowed = "Const or Duplicated" if mode is Reverse else "Const or Dual"
                raise ActivityError(
                    f"{what} is {activity.name}, which is not for {mode.name} mode: in "
                    f"{mode.name} mode a kernel's parameters are {allowed}"
                )
            if activity in (Active, ActiveOnly):
                raise ActivityError(
                    f"{what} is {activity.name}, which a kernel cannot have: it returns "
                    "nothing, so a scalar's derivative has nowhere to go. Make it Const, or "
                    "pass it as a 1-element array marked Duplicated"
                )
        options = Options(1, False, False, atomic_add=mode is Reverse)
        # The body as compiled here (its boundscheck already settled), not recompiled.
        return Kernel(self._compiled, (mode, tuple(activities), options), self._boundscheck)

    def __repr__(self) -> str:
        what = "derivative kernel" if self._derivative_of else "kernel"
        return f"<enzyme_py {what} of '{self.name}'>"


def kernel(body: Any, *, boundscheck: bool | None = None) -> Kernel:
    """A kernel from a per-index body ``body(i, *args)``: an ``@numba.njit`` function, or
    a function of ``ez.c``/``ez.llvm_ir`` whose first parameter is a 64-bit index.

    ``boundscheck``: a Numba body's indexing is checked against its arrays' shapes, so a
    launch over more indices than its arrays hold raises IndexError (on a GPU: a
    RuntimeError) instead of writing past them. On by default, unless the body was
    compiled with ``njit(boundscheck=False)``; ``False`` trades the check for speed.
    C and LLVM IR bodies carry no array sizes: keeping their indices inside their
    arrays is up to them, and ``boundscheck=True`` is a TypeError."""
    if _state.native is None:
        raise EnzymeUnavailableError(_state.unavailable_message("ez.offload.kernel"))
    if boundscheck is not None and not isinstance(boundscheck, bool):
        raise TypeError(f"boundscheck must be True, False or None, not {boundscheck!r}")
    if boundscheck and not numba_frontend.is_dispatcher(body):
        raise TypeError(
            "boundscheck=True needs a Numba body: a C or LLVM IR body has no array "
            "sizes to check its indices against"
        )
    return Kernel(body, boundscheck=boundscheck)
