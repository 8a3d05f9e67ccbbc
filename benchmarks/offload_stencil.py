"""A differentiated stencil kernel on the offload devices.

Usage::

    python benchmarks/offload_stencil.py [--quick] [--out DIR] [--body numba|numba-unchecked|ir]

The kernel is one explicit step of the 1-D heat equation per index,
``out[i] = u[i] + r (u[i-1] - 2 u[i] + u[i+1])`` (ends fixed), written as a Numba
``body(i, u, out, r)``, its indexing checked (``numba-unchecked``: launched with
``boundscheck=False``), or, with ``--body ir``, the same body in LLVM IR taking n as a
last argument, for machines whose Numba enzyme_py cannot read. Its reverse derivative
(``ez.autodiff(k, ez.Reverse, ...)``: Duplicated u and out, atomic accumulation into
du) is launched over n = 2^22 indices on the CPU device with one thread and with all
cores, and on each CUDA GPU when there is one (the transfer of host arrays is timed
apart from the launch on device arrays). Median of at least 5 runs after a warm-up.
Results go to ``offload_stencil.json`` / ``.md`` in ``--out`` (default
``benchmarks/results/``). No timing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

import enzyme_py as ez

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import launch_rows, median_time, write_launch_results


def heat_step(i, u, out, r):
    n = u.shape[0]
    if i == 0 or i == n - 1:
        out[i] = u[i]
    else:
        out[i] = u[i] + r * (u[i - 1] - 2.0 * u[i] + u[i + 1])


HEAT_STEP_IR = """
define void @heat_step(i64 %i, double* %u, double* %out, double %r, i64 %n) {
entry:
  %pu = getelementptr double, double* %u, i64 %i
  %ui = load double, double* %pu
  %po = getelementptr double, double* %out, i64 %i
  %first = icmp eq i64 %i, 0
  %last_index = add i64 %n, -1
  %last = icmp eq i64 %i, %last_index
  %end = or i1 %first, %last
  br i1 %end, label %fixed, label %inner
fixed:
  store double %ui, double* %po
  ret void
inner:
  %pl = getelementptr double, double* %u, i64 -1
  %pl_i = getelementptr double, double* %pl, i64 %i
  %ul = load double, double* %pl_i
  %pr = getelementptr double, double* %pu, i64 1
  %ur = load double, double* %pr
  %twice = fmul double %ui, 2.0
  %a = fsub double %ul, %twice
  %lap = fadd double %a, %ur
  %step = fmul double %r, %lap
  %new = fadd double %ui, %step
  store double %new, double* %po
  ret void
}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--body", choices=["numba", "numba-unchecked", "ir"], default="numba")
    args = parser.parse_args(argv)
    n = 4096 if args.quick else 1 << 22
    repeats = 3 if args.quick else 7
    u = np.random.default_rng(0).random(n)
    if args.body.startswith("numba"):
        import numba

        # Kernels check a Numba body's indexing unless told not to.
        checked = args.body == "numba"
        kernel = ez.offload.kernel(numba.njit(heat_step), boundscheck=checked)
        reverse = ez.autodiff(kernel, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)
        extra: tuple[int, ...] = ()
    else:
        kernel = ez.offload.kernel(ez.llvm_ir(HEAT_STEP_IR, "heat_step"))
        reverse = ez.autodiff(kernel, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Const)
        extra = (n,)

    # Timed launches reuse their arrays: the work does not depend on the values (the
    # reverse pass zeroes dout), and allocating them would be timed too.
    arrays = (np.zeros(n), np.zeros(n), np.ones(n))

    def run(device: Any, threads: int | None = None) -> None:
        du, out, dout = arrays
        reverse.launch(n, u, du, out, dout, 0.25, *extra, device=device, threads=threads)

    rows = launch_rows(run, repeats)
    # Check: with dout = 1, du[j] sums column j of the step's Jacobian; away from the
    # ends that is r + (1 - 2r) + r = 1.
    du, out, dout = np.zeros(n), np.zeros(n), np.ones(n)
    reverse.launch(n, u, du, out, dout, 0.25, *extra)  # on the default device
    error = float(np.max(np.abs(du[2:-2] - 1.0)))
    for gpu in [d for d in ez.offload.devices() if d.is_gpu and d.can_launch]:
        on_device = [
            ez.offload.to_device(a, gpu) for a in (u, np.zeros(n), np.zeros(n), np.ones(n))
        ]

        def device_only(g: Any = gpu, a: Any = on_device) -> None:
            reverse.launch(n, a[0], a[1], a[2], a[3], 0.25, *extra, device=g)

        rows.append(
            {"device": f"{gpu.name} (device arrays)", "launch_s": median_time(device_only, repeats)}
        )
    table = write_launch_results(
        args.out,
        "offload_stencil",
        f"Reverse derivative of one heat-equation step ({args.body} body), n = {n}; "
        f"max |du - 1| in the interior: {error:.1e}",
        rows,
        n=n,
        quick=args.quick,
        body=args.body,
        check_error=error,
    )
    print(table)
    return 0 if error < 1e-12 else 1


if __name__ == "__main__":
    sys.exit(main())
