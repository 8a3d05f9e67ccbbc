"""The GPU path against the simulated CUDA driver (simulator.py): what liboffload's CUDA
plugin and enzyme_py do with a GPU, checked on machines without one. Skipped unless
these tests run under the simulator (tests/test_simulated_gpu.py starts them so)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import enzyme_py as ez

import simulator
from ir_kernels import HORNER, SCALED  # tests/, on the path through its conftest.py

SIMULATOR = simulator.connect()

pytestmark = [
    pytest.mark.needs_enzyme,
    pytest.mark.skipif(SIMULATOR is None, reason="runs under the simulated CUDA driver"),
]


def gpu():
    return next(d for d in ez.offload.devices() if d.is_gpu)


def run_under_the_simulator(code, **env):
    """Runs `code` in a fresh interpreter under the simulated driver (it inherits the
    driver's environment); `simulator` is importable there."""
    full = {**os.environ, **env}
    full["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), full.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, check=False
    )


def test_liboffload_lists_the_simulated_gpu_as_the_default_device():
    device = gpu()
    assert (device.name, device.platform, device.type) == ("Simulated H200", "cuda", "gpu")
    assert device.memory == 150 << 30
    assert device.can_launch
    assert ez.offload.default_device() == device


def test_the_gpu_architecture_is_read_from_the_driver():
    device = gpu()
    assert device.uid == "CUDA-" + bytes(range(0x51, 0x61)).hex()  # the simulator's UUID
    assert device.arch == "sm_90"


KERNEL_ON_THE_GPU = """
import numpy as np, enzyme_py as ez, simulator
from enzyme_py.offload import _ptx
simulator.connect()
if {no_ptxas}:
    def missing():
        raise RuntimeError("no ptxas")
    _ptx.ptxas = missing
device = next(d for d in ez.offload.devices() if d.is_gpu)
scaled = ez.offload.kernel(ez.llvm_ir({source!r}, "scaled"))
x, out = np.arange(300, dtype=np.float32), np.zeros(300)
scaled.launch(300, 3, x, np.float32(0.5), out, device=device)
assert np.array_equal(out, 1.5 * x), out
print(device.arch)
"""


@pytest.mark.parametrize("no_ptxas", [False, True], ids=["cubin", "ptx"])
@pytest.mark.parametrize("arch", ["75", "80", "89"])
def test_kernels_are_built_for_the_architecture_the_driver_reports(arch, no_ptxas):
    # The simulated driver refuses a cubin for another architecture and PTX for a newer
    # one, as CUDA does; PTX targets are capped at LLVM 15's newest, sm_86.
    code = KERNEL_ON_THE_GPU.format(no_ptxas=no_ptxas, source=SCALED)
    out = run_under_the_simulator(code, ENZYME_PY_SIMULATED_GPU_ARCH=arch, ENZYME_PY_GPU_ARCH="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == f"sm_{arch}"


def test_the_device_heap_is_sized_for_tapes():
    gpu()  # liboffload starts its plugins here
    assert SIMULATOR.heap_limit() == 256 << 20


def test_a_heap_size_the_user_set_is_kept():
    code = (
        "import enzyme_py as ez, simulator\n"
        "sim = simulator.connect()\n"
        "ez.offload.devices()\n"
        "print(sim.heap_limit())\n"
    )
    out = run_under_the_simulator(code, LIBOMPTARGET_HEAP_SIZE=str(64 << 20))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(64 << 20)


def test_numba_kernel_with_shapes_and_errors():
    numba = pytest.importorskip("numba")

    @numba.njit
    def body(i, x, out):
        if x[i] < 0:
            raise ValueError("negative")
        out[i] = np.sqrt(x[i]) * x.shape[0]

    k = ez.offload.kernel(body)
    x, out = np.linspace(0, 4, 300), np.zeros(300)
    k.launch(300, x, out, device=gpu())
    np.testing.assert_allclose(out, np.sqrt(x) * 300)
    x[17] = -1
    with pytest.raises(RuntimeError, match="kernel body failed with status 1 on Simulated H200"):
        k.launch(300, x, out, device=gpu())


def test_a_launch_past_the_arrays_fails_on_the_gpu():
    numba = pytest.importorskip("numba")

    @numba.njit
    def body(i, x, out):
        out[i] = 2 * x[i]

    x, out = np.ones(10), np.zeros(10)
    with pytest.raises(RuntimeError, match="indexed past an array.*launch on ez.offload.CPU"):
        ez.offload.kernel(body).launch(15, x, out, device=gpu())


def test_numba_reverse_kernel():
    numba = pytest.importorskip("numba")

    @numba.njit
    def body(i, x, out):
        out[i] = np.sin(x[i]) * x[(i + 1) % x.shape[0]]

    dk = ez.autodiff(ez.offload.kernel(body), ez.Reverse, ez.Duplicated, ez.Duplicated)
    n = 500
    x = np.linspace(0, 2, n)
    dx, out, dout = np.zeros(n), np.zeros(n), np.ones(n)
    dk.launch(n, x, dx, out, dout, device=gpu())
    expected = np.cos(x) * np.roll(x, -1) + np.roll(np.sin(x), 1)
    np.testing.assert_allclose(dx, expected, rtol=1e-12)


def test_device_arrays_are_not_copied_by_launches():
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    n = 4096
    x = np.linspace(0, 1, n).astype(np.float32)
    with ez.offload.to_device(x, gpu()) as dx, ez.offload.to_device(np.zeros(n), gpu()) as do:
        before = SIMULATOR.bytes_copied()
        k.launch(n, 2, dx, np.float32(1.0), do, device=gpu())
        assert SIMULATOR.bytes_copied() == before
        np.testing.assert_allclose(do.to_host(), 2 * x, rtol=1e-6)


def test_host_arrays_go_to_the_device_and_back():
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    n = 4096
    x, out = np.linspace(0, 1, n).astype(np.float32), np.zeros(n)
    to_device, to_host = SIMULATOR.bytes_copied()
    k.launch(n, 2, x, np.float32(1.0), out, device=gpu())
    sent, received = SIMULATOR.bytes_copied()
    assert sent - to_device == x.nbytes + out.nbytes
    assert received - to_host == out.nbytes  # x is only read: it does not come back
    np.testing.assert_allclose(out, 2 * x, rtol=1e-6)


def test_device_memory_is_freed_when_closed_or_collected():
    big = np.zeros(4 << 20)  # past liboffload's pool of small allocations
    live = SIMULATOR.live_allocations()
    array = ez.offload.to_device(big, gpu())
    assert SIMULATOR.live_allocations() == live + 1
    array.close()
    assert SIMULATOR.live_allocations() == live
    with pytest.raises(ValueError, match="freed"):
        array.to_host()
    array = ez.offload.to_device(big, gpu())
    del array
    assert SIMULATOR.live_allocations() == live


def test_a_failed_launch_raises_and_the_next_one_runs():
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    x, out = np.ones(64, np.float32), np.zeros(64)
    SIMULATOR.fail_next_launch(719)  # CUDA_ERROR_LAUNCH_FAILED
    with pytest.raises(RuntimeError, match="olLaunchKernel failed.*error 719") as failed:
        k.launch(64, 1, x, np.float32(1.0), out, device=gpu())
    assert "heap" not in str(failed.value)  # this kernel keeps no tape
    k.launch(64, 1, x, np.float32(1.0), out, device=gpu())
    np.testing.assert_array_equal(out, 1.0)


def test_a_cubin_for_another_architecture_is_refused_with_advice(monkeypatch):
    monkeypatch.setenv("ENZYME_PY_GPU_ARCH", "sm_89")
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    try:
        k.cubin(1, np.ones(1, np.float32), np.float32(1.0), np.zeros(1), arch="sm_89")
    except RuntimeError:
        pytest.skip("no ptxas here: images are PTX")
    with pytest.raises(RuntimeError, match="a cubin for sm_89.*ENZYME_PY_GPU_ARCH"):
        k.launch(4, 1, np.ones(4, np.float32), np.float32(1.0), np.zeros(4), device=gpu())


def test_an_error_of_ptxas_is_reported_not_papered_over_with_ptx(monkeypatch):
    try:
        ez.offload._ptx.ptxas()
    except RuntimeError:
        pytest.skip("no ptxas here")
    monkeypatch.setenv("ENZYME_PY_GPU_ARCH", "sm_1")  # no such architecture
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    with pytest.raises(RuntimeError, match="ptxas failed for scaled"):
        k.launch(4, 1, np.ones(4, np.float32), np.float32(1.0), np.zeros(4), device=gpu())


def test_ptx_is_loaded_where_ptxas_is_missing(monkeypatch):
    from enzyme_py.offload import _ptx

    def no_ptxas():
        raise RuntimeError("CUDA's ptxas is needed to assemble PTX and was not found")

    monkeypatch.setattr(_ptx, "ptxas", no_ptxas)
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    n = 300
    x, out = np.linspace(0, 1, n).astype(np.float32), np.zeros(n)
    launches = SIMULATOR.launches()
    k.launch(n, 4, x, np.float32(0.25), out, device=gpu())
    assert SIMULATOR.launches() == launches + 1
    np.testing.assert_allclose(out, x, rtol=1e-6)


def test_device_arrays_alive_at_exit_are_freed_quietly():
    code = (
        "import numpy as np, enzyme_py as ez, simulator\n"
        "simulator.connect()\n"
        "gpu = next(d for d in ez.offload.devices() if d.is_gpu)\n"
        "kept = ez.offload.to_device(np.zeros(4 << 20), gpu)\n"
        "closed = ez.offload.to_device(np.zeros(10), gpu)\n"
        "closed.close()\n"
    )
    out = run_under_the_simulator(code)
    assert out.returncode == 0, out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr


def test_the_offload_example_runs_on_the_gpu(capsys):
    pytest.importorskip("numba")
    import runpy
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "offload_kernel.py"
    runpy.run_path(str(example), run_name="__main__")
    printed = capsys.readouterr().out
    assert "device: Simulated H200" in printed and "OK" in printed


def test_a_failed_launch_of_a_kernel_with_a_tape_points_at_the_device_heap():
    k = ez.offload.kernel(ez.llvm_ir(HORNER, "horner"))
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Duplicated)
    n, m = 1000, 4
    x, c = np.linspace(-1, 1, n), np.ones(m)
    dx, dc, out, dout = np.zeros(n), np.zeros(m), np.zeros(n), np.ones(n)
    dk.launch(n, x, dx, c, dc, m, out, dout, device=gpu())  # compiled, and it runs
    SIMULATOR.fail_next_launch(700)  # CUDA_ERROR_ILLEGAL_ADDRESS: what a NULL tape gives
    with pytest.raises(
        RuntimeError, match=r"error 700.*tape per index.*LIBOMPTARGET_HEAP_SIZE.*fewer indices"
    ):
        dk.launch(n, x, dx, c, dc, m, out, dout, device=gpu())


def test_a_range_past_the_gpu_grid_is_refused_before_anything_is_copied():
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    sent = SIMULATOR.bytes_copied()
    with pytest.raises(ValueError, match=r"n = 1099511627776 is more indices than one GPU"):
        k.launch(2**40, 1, np.ones(4, np.float32), np.float32(1), np.zeros(4), device=gpu())
    assert SIMULATOR.bytes_copied() == sent


def test_a_host_array_passed_twice_has_one_device_copy():
    # Each argument had its own copy; whichever came back last won (here: b's 10.0).
    numba = pytest.importorskip("numba")

    @numba.njit
    def two_writes(i, a, b):
        a[i] = a[i] + 1.0
        b[i] = b[i] * 10.0

    a = np.ones(4)
    ez.offload.kernel(two_writes).launch(4, a, a, device=gpu())
    np.testing.assert_array_equal(a, 20.0)  # as on the CPU device
    buffer = np.ones(8)
    with pytest.raises(ValueError, match=r"b \(argument 2 after n\).*shares memory"):
        ez.offload.kernel(two_writes).launch(4, buffer[:4], buffer[2:6], device=gpu())
    np.testing.assert_array_equal(buffer, 1.0)  # nothing ran


def test_gpu_launches_check_arguments_as_the_cpu_device_does():
    # The device would read float32 memory as float64, past its end.
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    x, out = np.ones(64, np.float32), np.zeros(64)
    launches = SIMULATOR.launches()
    with pytest.raises(ValueError, match=r"argument 4 after n\) of kernel scaled needs dtype"):
        k.launch(64, 1, x, np.float32(1.0), out.astype(np.float32), device=gpu())
    with pytest.raises(TypeError, match=r"argument 3 after n\) of kernel scaled is a float32"):
        k.launch(64, 1, x, "1.0", out, device=gpu())
    wrong = ez.offload.to_device(out.astype(np.float32), gpu())
    with wrong, pytest.raises(ValueError, match="needs dtype float64; got float32"):
        k.launch(64, 1, x, np.float32(1.0), wrong, device=gpu())
    assert SIMULATOR.launches() == launches


def test_a_device_array_closed_during_a_launch_is_freed_after_it():
    big = np.zeros(4 << 20)
    live = SIMULATOR.live_allocations()
    array = ez.offload.to_device(big, gpu())
    array._enter_launch()  # as a launch on another thread holds it
    array.close()
    with pytest.raises(ValueError, match="freed"):
        array.to_host()
    assert SIMULATOR.live_allocations() == live + 1  # the launch may still use it
    array._leave_launch()
    assert SIMULATOR.live_allocations() == live


def test_a_launch_runs_where_its_device_arrays_live():
    # The default device is the GPU here; arrays on the CPU device used to be refused.
    k = ez.offload.kernel(ez.llvm_ir(SCALED, "scaled"))
    x = np.ones(64, np.float32)
    launches = SIMULATOR.launches()
    with ez.offload.to_device(np.zeros(64), ez.offload.CPU) as out:
        k.launch(64, 2, x, np.float32(1.0), out)
        np.testing.assert_array_equal(out.to_host(), 2.0)
    assert SIMULATOR.launches() == launches
