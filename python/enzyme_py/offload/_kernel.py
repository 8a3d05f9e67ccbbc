"""The Kernel facade: construction, ``launch`` (its arguments checked, then dispatched
to the CPU or GPU launcher), ``derivative``, ``ptx`` and ``cubin``; and ``kernel()``."""

from __future__ import annotations

from typing import Any

import numpy as np

from enzyme_py import _arguments, _state
from enzyme_py._derivative import Options
from enzyme_py.core import (
    Active,
    ActiveOnly,
    Activity,
    ActivityError,
    EnzymeUnavailableError,
    Forward,
    Mode,
    Reverse,
)
from enzyme_py.frontends import numba as numba_frontend
from enzyme_py.offload import _ptx
from enzyme_py.offload._body import KernelBody
from enzyme_py.offload._cpu import CpuLauncher
from enzyme_py.offload._devices import (
    Device,
    DeviceArray,
    check_device,
    default_device,
    require_launchable,
)
from enzyme_py.offload._gpu import GpuLauncher


class Kernel:
    """A per-index body launched over a range (see the module docstring)."""

    def __init__(
        self,
        body: Any,
        derivative_of: tuple[Any, ...] | None = None,
        boundscheck: bool | None = None,
    ):
        self.body = body
        # derivative_of: (mode, activities, options) of a derivative kernel
        self._body = KernelBody(body, derivative_of, boundscheck)
        self._cpu = CpuLauncher(self._body)
        self._gpu = GpuLauncher(self._body)

    @property
    def name(self) -> str:
        return self._body.name

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
        require_launchable(device)
        if device.is_gpu:
            self._launch_gpu(n, args, device)
            return
        host_args = tuple(a.data if isinstance(a, DeviceArray) else a for a in args)
        self._cpu.launch(n, host_args, threads)

    def _launch_gpu(self, n: int, args: tuple[Any, ...], device: Device) -> None:
        # One seam for a launch on a GPU: the simulated driver's tests record launches here.
        self._gpu.launch(n, args, device)

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
        check_device(device)
        if threads is not None:
            try:
                valid = operator.index(threads) >= 1
            except TypeError:
                valid = False
            if not valid:
                raise ValueError(f"threads must be a positive integer or None, not {threads!r}")
        names = self._body.argument_names()
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
        if self._body.derivative_of is None:
            return
        layout = self._body.layout()

        def where(k: int) -> str:
            return f"{names[k]} (argument {k + 1} after n)"

        for pos, at in layout:
            if at is None:
                continue
            primal, shadow = args[pos], args[at]
            if isinstance(primal, np.ndarray) and isinstance(shadow, np.ndarray):
                _arguments.check_shadow(shadow, primal, 1, where(at))
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
        _arguments.check_shadows_apart(
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

    def ptx(self, *args: Any, arch: str = "sm_86") -> str:
        """PTX of this kernel for NVIDIA GPUs (LLVM 15's NVPTX backend: a newer ``arch``
        than sm_86 gets PTX for sm_86, which such GPUs run), for arguments like ``args``
        (as ``launch`` takes them, without ``n``). Its entry,
        ``__enzyme_py_kernel(n, *args)``, runs one index per GPU thread."""
        args = tuple(np.empty(a.shape, a.dtype) if isinstance(a, DeviceArray) else a for a in args)
        if self._body.derivative_of is None:
            per_index = self._body.function(args)
        else:
            per_index = self._body.per_index(self._body.function(args))
        return _ptx.emit(per_index, arch)

    def cubin(self, *args: Any, arch: str = "sm_90") -> bytes:
        """The PTX assembled by CUDA's ``ptxas`` for ``arch`` (RuntimeError without it)."""
        return _ptx.assemble(self.ptx(*args, arch=_ptx.ptx_target(arch)), arch, self.name)

    def derivative(self, mode: Mode, *activities: Any) -> Kernel:
        """The kernel of the derivative of the body with respect to its arguments after
        the index (see ``ez.autodiff``); reverse mode accumulates with atomic adds."""
        if mode is not Reverse and mode is not Forward:
            raise TypeError(f"mode must be ez.Reverse or ez.Forward, not {mode!r}")
        if self._body.derivative_of is not None:
            raise ActivityError(
                f"{self!r} is already a derivative; differentiating a kernel again is not "
                "supported (differentiate the body, e.g. ez.autodiff of an @njit function)"
            )
        names = self._body.parameter_names
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
        derivative_of = (mode, tuple(activities), options)
        return Kernel(self._body.compiled, derivative_of, self._body.boundscheck)

    def __repr__(self) -> str:
        what = "derivative kernel" if self._body.derivative_of else "kernel"
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
