"""Kernels on a CUDA GPU through liboffload (skipped where there is none).

Kernels are LLVM IR, so these run where neither clang nor Numba is installed (the
device machine gets the wheel from scripts/build_wheel.sh); results are compared
with the same kernels on the CPU device.
"""

import time

import numpy as np
import pytest

import enzyme_py as ez

import simulator  # beside this file: plays the GPU under the simulated driver, else idle
from ir_kernels import HORNER, SCALED  # tests/, on the path through its conftest.py

simulator.connect()

pytestmark = pytest.mark.needs_enzyme


def cuda_gpus():
    if not ez.has_autodiff():
        return []
    try:
        return [d for d in ez.offload.devices() if d.is_gpu and d.can_launch]
    except RuntimeError:
        return []


GPUS = cuda_gpus()
needs_gpu = pytest.mark.skipif(not GPUS, reason="no CUDA GPU listed by liboffload")

# body(i, x, out): out[i] = x[i]^2 * sin(x[i])
BODY = """
declare double @sin(double)
define void @body(i64 %i, double* %x, double* %out) {
  %px = getelementptr double, double* %x, i64 %i
  %v = load double, double* %px
  %s = call double @sin(double %v)
  %sq = fmul double %v, %v
  %r = fmul double %sq, %s
  %po = getelementptr double, double* %out, i64 %i
  store double %r, double* %po
  ret void
}
"""
# gather(i, idx, x, out): out[i] = x[idx[i]]^2
GATHER = """
define void @gather(i64 %i, i64* %idx, double* %x, double* %out) {
  %pi = getelementptr i64, i64* %idx, i64 %i
  %j = load i64, i64* %pi
  %px = getelementptr double, double* %x, i64 %j
  %v = load double, double* %px
  %r = fmul double %v, %v
  %po = getelementptr double, double* %out, i64 %i
  store double %r, double* %po
  ret void
}
"""


def timed(label, fn):
    start = time.perf_counter()
    fn()
    print(f"  {label}: {1e3 * (time.perf_counter() - start):.2f} ms")


@needs_gpu
def test_the_architecture_comes_from_the_driver():
    import re

    device = GPUS[0]
    print(f"  {device.name}: {device.arch}, UID {device.uid}")
    assert re.fullmatch(r"sm_\d{2,3}", device.arch), device
    if "H100" in device.name or "H200" in device.name:
        assert device.arch == "sm_90"


@needs_gpu
def test_primal_kernel_matches_cpu():
    k = ez.offload.kernel(ez.llvm_ir(BODY, "body"))
    n = 1 << 20
    x = np.linspace(0, 3, n)
    gpu_out, cpu_out = np.zeros(n), np.zeros(n)
    timed(
        "primal, GPU (first launch: compile + transfer)",
        lambda: k.launch(n, x, gpu_out, device=GPUS[0]),
    )
    timed("primal, GPU", lambda: k.launch(n, x, gpu_out, device=GPUS[0]))
    timed("primal, CPU device", lambda: k.launch(n, x, cpu_out, device=ez.offload.CPU))
    np.testing.assert_allclose(gpu_out, cpu_out, rtol=1e-13)


@needs_gpu
def test_reverse_kernel_with_atomics_matches_cpu():
    k = ez.offload.kernel(ez.llvm_ir(GATHER, "gather"))
    dk = ez.autodiff(k, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated)
    n = 1 << 18
    idx = np.arange(n, dtype=np.int64) % 7
    x = np.linspace(1, 2, 7)
    results = {}
    for device in (GPUS[0], ez.offload.CPU):
        dx, out, dout = np.zeros(7), np.zeros(n), np.ones(n)
        timed(
            f"reverse, {device.name}",
            lambda d=device, dx=dx, out=out, dout=dout: dk.launch(
                n, idx, x, dx, out, dout, device=d
            ),
        )
        results[device.name] = dx
    np.testing.assert_allclose(results[GPUS[0].name], results["cpu"], rtol=1e-10)
    np.testing.assert_allclose(results["cpu"], 2 * x * np.bincount(idx, minlength=7))


@needs_gpu
def test_device_arrays_stay_on_the_gpu():
    k = ez.offload.kernel(ez.llvm_ir(BODY, "body"))
    n = 4096
    x = np.linspace(0, 1, n)
    with ez.offload.to_device(x, GPUS[0]) as dx, ez.offload.to_device(np.zeros(n), GPUS[0]) as do:
        k.launch(n, dx, do, device=GPUS[0])
        np.testing.assert_allclose(do.to_host(), x * x * np.sin(x), rtol=1e-13)
        np.testing.assert_array_equal(dx.to_host(), x)


@needs_gpu
def test_reverse_kernel_with_a_tape_on_the_device_heap_matches_cpu():
    k = ez.offload.kernel(ez.llvm_ir(HORNER, "horner"))
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Duplicated)
    n, m = 1 << 16, 8
    x, c = np.linspace(-1.0, 1.0, n), np.linspace(0.5, 2.0, m)
    results = {}
    for device in (GPUS[0], ez.offload.CPU):
        dx, dc, out, dout = np.zeros(n), np.zeros(m), np.zeros(n), np.ones(n)
        timed(
            f"reverse with a tape, {device.name}",
            lambda d=device, dx=dx, dc=dc, out=out, dout=dout: dk.launch(
                n, x, dx, c, dc, m, out, dout, device=d
            ),
        )
        results[device.name] = (dx, dc)
    np.testing.assert_allclose(results[GPUS[0].name][0], results["cpu"][0], rtol=1e-12)
    np.testing.assert_allclose(results[GPUS[0].name][1], results["cpu"][1], rtol=1e-9, atol=1e-9)


@needs_gpu
@pytest.mark.parametrize("n", [1, 255, 1000])
def test_parameters_with_padding_and_a_partial_last_block(n):
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    x = np.linspace(-1, 1, n).astype(np.float32)
    out = np.full(n, np.nan)
    k.launch(n, 3, x, np.float32(0.5), out, device=GPUS[0])
    np.testing.assert_allclose(out, 1.5 * x.astype(np.float64), rtol=1e-6)


@needs_gpu
def test_reverse_kernel_with_padding():
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    dk = ez.autodiff(k, ez.Reverse, ez.Const, ez.Duplicated, ez.Const, ez.Duplicated)
    n = 777
    x = np.linspace(-1, 1, n).astype(np.float32)
    dx = np.zeros(n, np.float32)
    out, dout = np.zeros(n), np.linspace(1, 2, n)
    dk.launch(n, 3, x, dx, np.float32(0.5), out, dout, device=GPUS[0])
    np.testing.assert_allclose(dx, 1.5 * np.linspace(1, 2, n), rtol=1e-6)
    np.testing.assert_array_equal(dout, 0)  # the adjoint of a store clears its shadow


@needs_gpu
def test_forward_kernel_matches_the_analytic_derivative():
    k = ez.offload.kernel(ez.llvm_ir(BODY, "body"))
    dk = ez.autodiff(k, ez.Forward, ez.Dual, ez.Dual)
    n = 10_000
    x = np.linspace(0, 3, n)
    dx, out, dout = np.ones(n), np.zeros(n), np.zeros(n)
    dk.launch(n, x, dx, out, dout, device=GPUS[0])
    np.testing.assert_allclose(out, x * x * np.sin(x), rtol=1e-13)
    np.testing.assert_allclose(dout, 2 * x * np.sin(x) + x * x * np.cos(x), rtol=1e-12, atol=1e-14)


# twice(i, x): x[i] = 2 x[i], in place
TWICE = """
define void @twice(i64 %i, double* %x) {
  %p = getelementptr double, double* %x, i64 %i
  %v = load double, double* %p
  %r = fmul double %v, 2.0
  store double %r, double* %p
  ret void
}
"""


@needs_gpu
def test_host_arrays_the_kernel_writes_come_back_and_read_only_ones_stay():
    x = np.linspace(0, 1, 3000)
    ez.offload.kernel(ez.llvm_ir(TWICE, "twice")).launch(3000, x, device=GPUS[0])
    np.testing.assert_array_equal(x, 2 * np.linspace(0, 1, 3000))
    k = ez.offload.kernel(ez.llvm_ir(BODY, "body"))
    x.flags.writeable = False  # a read-only input is never written back
    out = np.zeros(3000)
    k.launch(3000, x, out, device=GPUS[0])
    np.testing.assert_allclose(out, x * x * np.sin(x), rtol=1e-13)
