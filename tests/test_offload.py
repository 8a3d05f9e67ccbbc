"""Offload on the CPU device: kernels over a range, their derivatives, device arrays."""

import math

import numpy as np
import pytest

import enzyme_py as ez

from ir_kernels import HORNER

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.needs_enzyme


@numba.njit
def sin_x(i, x, out):
    out[i] = math.sin(x[i]) * x[i]


@numba.njit
def gather_square(i, idx, x, out):
    out[i] = x[idx[i]] ** 2


@numba.njit(boundscheck=True)
def shifted(i, x, out):
    out[i] = x[i + 1]


C = (
    ez.c(
        """
    #include <math.h>
    void scale_exp(long i, const double *x, double *out, double a) { out[i] = a * exp(x[i]); }
    """
    )
    if ez.has_autodiff()
    else None
)


def test_devices_and_default():
    devices = ez.offload.devices()
    assert devices[0] is ez.offload.CPU
    assert ez.offload.default_device() is ez.offload.CPU
    assert all(d.type == "gpu" for d in devices[1:])
    assert ez.offload.CPU.memory > 0


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_numba_kernel_launch(threads):
    n = 10_001
    x = np.linspace(0, 2, n)
    out = np.zeros(n)
    ez.offload.kernel(sin_x).launch(n, x, out, threads=threads)
    np.testing.assert_allclose(out, np.sin(x) * x, rtol=1e-15)


@pytest.mark.parametrize("threads", [4, 1])
def test_reverse_kernel_into_a_small_shared_shadow(threads):
    # Many indices add into the same shadow entries. On several threads each gets a
    # copy of the small shadow, added up at the end (atomic adds would contend); on
    # one thread the derivative is built without atomic adds at all.
    k = ez.offload.kernel(gather_square)
    dk = ez.autodiff(k, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated)
    n = 20_000
    idx = np.arange(n, dtype=np.int64) % 3
    x = np.array([1.0, 2.0, 3.0])
    dx, out, dout = np.full(3, 0.5), np.zeros(n), np.ones(n)  # adds onto what dx holds
    dk.launch(n, idx, x, dx, out, dout, threads=threads)
    counts = np.bincount(idx, minlength=3)
    np.testing.assert_allclose(dx, 0.5 + 2 * x * counts, rtol=1e-12)
    np.testing.assert_allclose(out, x[idx] ** 2)
    np.testing.assert_array_equal(dout, 0)  # the adjoint of a store clears its shadow
    (launcher,) = dk._cpu.launchers.values()
    assert "atomicrmw" not in launcher.inspect_llvm(optimized=True)


def test_reverse_kernel_adds_atomically_into_shadows_too_big_to_copy(monkeypatch):
    from enzyme_py.offload import _cpu

    monkeypatch.setattr(_cpu, "PRIVATE_BYTES", 0)
    k = ez.offload.kernel(gather_square)
    dk = ez.autodiff(k, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated)
    n = 20_000
    idx = (np.arange(n, dtype=np.int64) * 7) % 1000
    x = np.linspace(1, 2, n)  # only its first 1000 entries are read
    dx, out, dout = np.zeros(n), np.zeros(n), np.ones(n)
    # dout: plain
    assert dk._cpu.shadow_plan((idx, x, dx, out, dout), n, 4) == (frozenset(), {4}, 0)
    dk.launch(n, idx, x, dx, out, dout, threads=4)
    np.testing.assert_allclose(dx, 2 * x * np.bincount(idx, minlength=n), rtol=1e-12)
    (launcher,) = dk._cpu.launchers.values()
    assert "atomicrmw" in launcher.inspect_llvm(optimized=True)


def test_how_threads_share_each_shadow():
    dk = ez.autodiff(ez.offload.kernel(gather_square), ez.Reverse, ez.Const, *[ez.Duplicated] * 2)
    n = 1 << 20
    idx, x, dx = np.zeros(n, np.int64), np.ones(8), np.zeros(8)
    out, dout = np.zeros(n), np.ones(n)
    # dx: entries idx[i], anywhere, but small: copied; dout: entry i only, shared
    assert dk._cpu.shadow_plan((idx, x, dx, out, dout), n, 4) == ({2}, {2, 4}, 0)
    assert dk._cpu.shadow_plan((idx, x, dx, out, dout), n, 1) == (set(), set(), 0)  # one thread
    assert dk._cpu.shadow_plan((idx, x, x, out, dout), n, 4) == (set(), {4}, 0)  # dx is x: atomic


def test_forward_kernel_equals_cpu_derivative():
    n = 1000
    x = np.linspace(0.1, 1.0, n)
    tx = np.linspace(-1, 1, n)
    out, tout = np.zeros(n), np.zeros(n)
    fk = ez.autodiff(ez.offload.kernel(sin_x), ez.Forward, ez.Dual, ez.Dual)
    fk.launch(n, x, tx, out, tout)
    np.testing.assert_allclose(tout, (np.cos(x) * x + np.sin(x)) * tx, rtol=1e-14)


def test_c_kernel_and_its_gradient():
    n = 257
    x = np.linspace(-1, 1, n)
    out = np.zeros(n)
    k = ez.offload.kernel(C.scale_exp)
    k.launch(n, x, out, 2.0)
    np.testing.assert_allclose(out, 2.0 * np.exp(x), rtol=1e-15)
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)
    dx, dout = np.zeros(n), np.ones(n)
    dk.launch(n, x, dx, out, dout, 2.0)
    np.testing.assert_allclose(dx, 2.0 * np.exp(x), rtol=1e-14)


def test_kernel_errors_surface():
    x, out = np.arange(4.0), np.zeros(4)
    with pytest.raises(IndexError):
        ez.offload.kernel(shifted).launch(4, x, out)
    with pytest.raises(TypeError, match="takes the index first"):
        ez.offload.kernel(ez.c("void f(double *x) { x[0] = 1; }").f).launch(1, np.zeros(1))


def inside(parent, n):
    """The first n elements of parent: an array whose neighbours a test can watch."""
    return parent[:n]


@pytest.mark.parametrize("threads", [1, None])
def test_a_launch_past_the_arrays_raises_and_writes_nothing_outside(threads):
    x_parent, out_parent = np.arange(20.0), np.full(20, 7.0)
    x, out = inside(x_parent, 10), inside(out_parent, 10)
    with pytest.raises(IndexError, match="out of bounds"):
        ez.offload.kernel(sin_x).launch(15, x, out, threads=threads)
    np.testing.assert_array_equal(out_parent[10:], 7.0)

    dk = ez.autodiff(ez.offload.kernel(sin_x), ez.Reverse, ez.Duplicated, ez.Duplicated)
    dx_parent = np.full(20, 7.0)
    with pytest.raises(IndexError, match="out of bounds"):
        dk.launch(15, x, inside(dx_parent, 10), out, np.ones(10), threads=threads)
    np.testing.assert_array_equal(dx_parent[10:], 7.0)


@numba.njit(boundscheck=False)
def sin_x_unchecked(i, x, out):
    out[i] = math.sin(x[i]) * x[i]


@pytest.mark.parametrize(
    "body, boundscheck",
    [(sin_x, False), (sin_x_unchecked, None)],
    ids=["kernel(boundscheck=False)", "njit(boundscheck=False)"],
)
def test_boundscheck_can_be_turned_off(body, boundscheck):
    # Unchecked, indices past the arrays reach their neighbours (here: the parent's).
    x_parent, out_parent = np.arange(20.0), np.zeros(20)
    k = ez.offload.kernel(body, boundscheck=boundscheck)
    k.launch(12, inside(x_parent, 10), inside(out_parent, 10), threads=1)
    np.testing.assert_allclose(out_parent[:12], np.sin(x_parent[:12]) * x_parent[:12])


def test_boundscheck_errors():
    with pytest.raises(TypeError, match="boundscheck=True needs a Numba body"):
        ez.offload.kernel(C.scale_exp, boundscheck=True)
    with pytest.raises(TypeError, match="boundscheck must be True, False or None, not 'yes'"):
        ez.offload.kernel(sin_x, boundscheck="yes")
    ez.offload.kernel(C.scale_exp, boundscheck=False)  # unchecked already: allowed


@pytest.mark.parametrize(
    "n, args, options, error, message",
    [
        (3.5, 2, {}, TypeError, "n, the number of indices, must be an integer, not float"),
        ("10", 2, {}, TypeError, "n, the number of indices, must be an integer, not str"),
        (-1, 2, {}, ValueError, "n, the number of indices, must be 0 or more, not -1"),
        (10, 1, {}, TypeError, r"kernel sin_x takes 2 arguments after n \(x, out\); 1 were"),
        (10, 3, {}, TypeError, "kernel sin_x takes 2 arguments after n"),
        (10, 2, {"threads": 0}, ValueError, "threads must be a positive integer or None, not 0"),
        (10, 2, {"threads": "2"}, ValueError, "threads must be a positive integer"),
        (10, 2, {"device": "cpu"}, TypeError, "device must be an ez.offload.Device"),
    ],
)
def test_launch_argument_errors(n, args, options, error, message):
    x, out = np.ones(10), np.full(10, 7.0)
    with pytest.raises(error, match=message):
        ez.offload.kernel(sin_x).launch(n, *(x, out, x)[:args], **options)
    np.testing.assert_array_equal(out, 7.0)  # nothing ran


def test_launch_argument_count_of_derivative_and_c_kernels():
    dk = ez.autodiff(ez.offload.kernel(sin_x), ez.Reverse, ez.Duplicated, ez.Const)
    with pytest.raises(TypeError, match=r"3 arguments after n \(x, the shadow of x, out\)"):
        dk.launch(4, np.ones(4), np.zeros(4), np.zeros(4), np.zeros(4))
    with pytest.raises(TypeError, match=r"scale_exp takes 3 arguments after n \(x, out, a\)"):
        ez.offload.kernel(C.scale_exp).launch(4, np.ones(4), np.zeros(4))


def test_launch_argument_errors_count_as_launch_does():
    # The launcher's own range parameters came first: x was "parameter 2".
    x, out, read_only = np.ones(10), np.zeros(10), np.zeros(10)
    read_only.flags.writeable = False
    k = ez.offload.kernel(sin_x)
    with pytest.raises(ValueError, match=r"^x \(argument 1 after n\) of kernel sin_x must be C-"):
        k.launch(5, x[::2], out)
    with pytest.raises(ValueError, match=r"^out \(argument 2 after n\) of kernel sin_x is read-"):
        k.launch(5, x, read_only)
    with pytest.raises(ValueError, match=r"^x \(argument 1 after n\) of kernel scale_exp needs"):
        ez.offload.kernel(C.scale_exp).launch(4, np.ones(4, np.float32), np.zeros(4), 2.0)
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated)
    with pytest.raises(ValueError, match=r"^x \(argument 1 after n\) of kernel sin_x must be C-"):
        dk.launch(5, x[::2], np.zeros(5), out, np.ones(10))


def test_device_arrays():
    x = np.linspace(0, 1, 16)
    with ez.offload.to_device(x) as dx:
        out = ez.offload.to_device(np.zeros(16))
        ez.offload.kernel(sin_x).launch(16, dx, out)
        np.testing.assert_allclose(ez.offload.to_host(out), np.sin(x) * x)
        assert dx.shape == (16,) and dx.dtype == np.float64
    with pytest.raises(ValueError, match="freed"):
        dx.to_host()


def test_amd_gpu_launch_says_it_is_not_there_yet():
    fake_gpu = ez.offload.Device("MI300", "amdgpu", "gpu", 1 << 37, index=0)
    assert fake_gpu.is_gpu and not fake_gpu.can_launch
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        ez.offload.kernel(sin_x).launch(4, np.zeros(4), np.zeros(4), device=fake_gpu)


def test_gpu_kernel_parameters_are_packed_at_natural_alignment():
    from enzyme_py.offload._gpu import pack

    packed = pack([("i64", 7), ("i8", 1), ("double", 2.5), ("float", 1.0), ("ptr", 16)])
    assert len(packed) == 8 + 8 + 8 + 8 + 8  # i8 padded to 8 before the double, float to 8
    assert packed[:8] == (7).to_bytes(8, "little")
    assert packed[8] == 1 and packed[9:16] == bytes(7)
    assert np.frombuffer(packed[16:24], np.float64)[0] == 2.5
    assert np.frombuffer(packed[24:28], np.float32)[0] == 1.0
    assert packed[32:40] == (16).to_bytes(8, "little")


def test_in_place_kernel_with_overlapping_arrays():
    @numba.njit
    def double_it(i, x, out):
        out[i] = 2.0 * x[i]

    x = np.linspace(0, 1, 100)
    expected = 2.0 * x
    ez.offload.kernel(double_it).launch(100, x, x)  # the same array as input and output
    np.testing.assert_allclose(x, expected)


def _ptxas_available():
    try:
        ez.offload._ptx.ptxas()
    except RuntimeError:
        return False
    return True


@numba.njit
def polynomial(i, x, c, out):
    s = 0.0
    for k in range(c.shape[0]):  # a run-time trip count: Enzyme grows its tape by realloc
        s = s * x[i] + c[k]
    out[i] = s


def _device_kernels():
    k = ez.offload.kernel(sin_x)
    g = ez.offload.kernel(gather_square)
    x, out, idx = np.zeros(8), np.zeros(8), np.zeros(8, np.int64)
    c = np.zeros(3)
    return [
        (
            "Numba polynomial reverse (tape on the device heap)",
            ez.autodiff(ez.offload.kernel(polynomial), ez.Reverse, *[ez.Duplicated] * 3),
            (x, x.copy(), c, c.copy(), out, out.copy()),
        ),
        ("sin_x", k, (x, out)),
        (
            "sin_x reverse",
            ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated),
            (x, x.copy(), out, out.copy()),
        ),
        (
            "sin_x forward",
            ez.autodiff(k, ez.Forward, ez.Dual, ez.Dual),
            (x, x.copy(), out, out.copy()),
        ),
        (
            "gather reverse",
            ez.autodiff(g, ez.Reverse, ez.Const, ez.Duplicated, ez.Duplicated),
            (idx, x, x.copy(), out, out.copy()),
        ),
        ("C scale_exp", ez.offload.kernel(C.scale_exp), (x, out, 2.0)),
    ]


def test_ptx_for_every_test_kernel_and_assembled_by_ptxas():
    for name, k, args in _device_kernels():
        ptx = k.ptx(*args)
        assert ".entry __enzyme_py_kernel" in ptx, name
        assert ".target sm_86" in ptx, name
        if "reverse" in name:
            assert "atom.global.add.f64" in ptx or "atom.add.f64" in ptx, name
        if "device heap" in name:  # CUDA's malloc, and enzyme_py's realloc over it
            assert "call.uni" in ptx and "malloc" in ptx and "realloc" not in ptx, name
        if _ptxas_available():
            cubin = k.cubin(*args, arch="sm_90")
            assert cubin[:4] == b"\x7fELF", name


def test_ptx_for_a_newer_gpu_targets_the_newest_llvm_15_knows():
    k = ez.offload.kernel(sin_x)
    x = ez.offload.to_device(np.zeros(8), ez.offload.CPU)  # device arrays, as launch takes
    ptx = k.ptx(x, np.zeros(8), arch="sm_90")
    assert ".target sm_86" in ptx and ".version 3.2" not in ptx


# libm functions and intrinsics NVPTX cannot lower come from libdevice.
MATH = """
declare double @fmod(double, double)
declare double @cbrt(double)
declare float @llvm.exp2.f32(float)
declare double @llvm.round.f64(double)
define void @math(i64 %i, double* %x, float* %y) {
  %px = getelementptr double, double* %x, i64 %i
  %v = load double, double* %px
  %a = call double @fmod(double %v, double 3.0)
  %b = call double @cbrt(double %a)
  %c = call double @llvm.round.f64(double %b)
  store double %c, double* %px
  %py = getelementptr float, float* %y, i64 %i
  %w = load float, float* %py
  %e = call float @llvm.exp2.f32(float %w)
  store float %e, float* %py
  ret void
}
"""


def test_math_calls_come_from_libdevice():
    if not ez.offload._ptx.libdevice():
        pytest.skip("no libdevice here (the CUDA toolkit or the cuda extra has it)")
    k = ez.offload.kernel(ez.llvm_ir(MATH, "math"))
    ptx = k.ptx(np.zeros(2), np.zeros(2, np.float32))
    for name in ("fmod", "cbrt", "llvm.exp2", "llvm.round", "__nv_"):
        assert f"{name}" not in ptx.replace("__enzyme_py_kernel", ""), name  # all inlined
    if _ptxas_available():
        assert k.cubin(np.zeros(2), np.zeros(2, np.float32))[:4] == b"\x7fELF"


READ_WRITE = """
declare void @opaque(double*)
define void @rw(i64 %i, double* %a, double* %b, double* %c, double* %d) {
  %pa = getelementptr double, double* %a, i64 %i
  %va = load double, double* %pa
  %pb = getelementptr double, double* %b, i64 %i
  store double %va, double* %pb
  %pc = getelementptr double, double* %c, i64 %i
  %vc = load double, double* %pc
  %w = fadd double %vc, 1.0
  store double %w, double* %pc
  call void @opaque(double* %d)
  ret void
}
"""


def test_read_only_parameters_are_inferred():
    # a is only read; b written; c read and written; d goes to a function nobody can see
    from enzyme_py import _state

    flags = _state.native.read_only_params(READ_WRITE, "rw")
    assert flags == [False, True, False, False, False]  # the index: not a pointer


def test_ptx_of_kernel_with_host_only_calls_is_refused():
    @numba.njit
    def with_temporary(i, x, out):
        t = np.empty(2)
        t[0] = x[i]
        out[i] = t[0]

    with pytest.raises(RuntimeError, match="do not exist on the GPU: .*NRT_MemInfo_alloc"):
        ez.offload.kernel(with_temporary).ptx(np.zeros(2), np.zeros(2))


def test_reverse_kernel_whose_body_loops_keeps_a_tape_per_index():
    k = ez.offload.kernel(ez.llvm_ir(HORNER, "horner"))
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Duplicated)
    n, m = 2000, 6
    x, c = np.linspace(-1.5, 1.5, n), np.arange(1.0, m + 1)
    dx, dc, out, dout = np.zeros(n), np.zeros(m), np.zeros(n), np.ones(n)
    dk.launch(n, x, dx, c, dc, m, out, dout, threads=3)
    poly = np.polynomial.polynomial
    coef = c[::-1]  # numpy's order: lowest power first
    np.testing.assert_allclose(out, poly.polyval(x, coef), rtol=1e-13)
    np.testing.assert_allclose(dx, poly.polyval(x, poly.polyder(coef)), rtol=1e-12)
    expected_dc = [np.sum(x ** (m - 1 - j)) for j in range(m)]  # odd powers sum to ~0
    np.testing.assert_allclose(dc, expected_dc, rtol=1e-12, atol=1e-9)
    ptx = dk.ptx(x, dx, c, dc, m, out, dout)
    assert "malloc" in ptx and "free" in ptx, "the tape comes from the device heap"
    if _ptxas_available():
        assert dk.cubin(x, dx, c, dc, m, out, dout, arch="sm_90")[:4] == b"\x7fELF"


ATOMIC_ADDS = """
define void @f(double* %a, double* %b, double** %c, double %v) {
  %pa = getelementptr double, double* %a, i64 3
  %old = atomicrmw fadd double* %pa, double %v monotonic, align 8
  %raw = bitcast double* %b to i8*
  %pb = bitcast i8* %raw to double*
  %s = atomicrmw fsub double* %pb, double %v monotonic, align 8
  %pc = load double*, double** %c
  %t = atomicrmw fadd double* %pc, double %v monotonic, align 8
  %u = atomicrmw fadd double* %a, double %old monotonic, align 8
  %w = atomicrmw xchg double* %a, double %v monotonic, align 8
  ret void
}
"""


def test_atomic_adds_into_chosen_parameters_are_made_plain():
    from enzyme_py.frontends.ir import parse_module

    module = parse_module(ATOMIC_ADDS)
    assert module.native.make_adds_plain("f", [2]) == 0  # %c's target is loaded: unknown
    assert module.native.make_adds_plain("f", [0, 1]) == 3
    ir = module.ir()
    # Left atomic: the add through the loaded pointer, and the exchange (not an add).
    assert ir.count("atomicrmw") == 2 and "atomicrmw xchg" in ir
    assert "fsub double" in ir and ir.count("store double") == 3
    parse_module(ir)  # still valid IR
    with pytest.raises(RuntimeError, match="no function named 'g'"):
        module.native.make_adds_plain("g", [0])


@numba.njit
def slow_unless_first(i, out):
    if i == 0:
        raise ValueError("index 0")
    s = 0.0
    for k in range(2000):
        s += math.sin(k * 1e-3 + i)
    out[i] = s


def test_a_failing_thread_is_raised_after_every_thread_has_stopped():
    n = 20_000
    out = np.zeros(n)
    with pytest.raises(ValueError, match="index 0"):
        ez.offload.kernel(slow_unless_first).launch(n, out, threads=4)
    last = out[3 * n // 4 :].copy()  # the last thread's share, complete when launch raised
    assert np.all(last != 0)
    np.testing.assert_array_equal(out[3 * n // 4 :], last)


@numba.njit
def checked_copy(i, x, out):
    if x[i] < 0:
        raise ValueError("negative at", i)
    out[i] = x[i]


def test_an_exception_with_a_run_time_value_says_so():
    # Its pickled part held an llvmlite placeholder, shown as "<ir.Constant ...>".
    x = np.ones(4)
    x[2] = -1.0
    with pytest.raises(ValueError) as info:
        ez.offload.kernel(checked_copy).launch(4, x, np.zeros(4))
    assert info.value.args == ("negative at", "<a value known only at run time>")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "shadow, error, message",
    [
        (np.zeros(5), ValueError, r"the shadow of x \(argument 2 after n\) needs shape \(10,\)"),
        (np.zeros(10, np.float32), ValueError, "needs dtype float64 \\(as its array\\)"),
        ([0.0] * 10, TypeError, "the shadow of x .* must be an array like x; got list"),
    ],
    ids=["shorter", "float32", "list"],
)
def test_reverse_kernel_shadows_must_be_like_their_arrays(threads, shadow, error, message):
    dk = ez.autodiff(ez.offload.kernel(sin_x), ez.Reverse, ez.Duplicated, ez.Duplicated)
    x, out, dout = np.ones(10), np.zeros(10), np.ones(10)
    with pytest.raises(error, match=message):
        dk.launch(10, x, shadow, out, dout, threads=threads)
    np.testing.assert_array_equal(dout, 1)  # nothing ran


@numba.njit
def scaled_by(i, x, a, out):
    out[i] = a[0] * x[i] ** 2


@pytest.mark.parametrize("threads", [1, 2])
def test_reverse_kernel_shadows_must_not_overlap_other_arrays(threads):
    dk = ez.autodiff(ez.offload.kernel(scaled_by), ez.Reverse, *[ez.Duplicated] * 3)
    x, a, out, dout = np.ones(10), np.array([2.0]), np.zeros(10), np.ones(10)
    # The shadow of a is a view of x: adding into it would change x.
    with pytest.raises(
        ValueError,
        match=r"the shadow of a \(argument 4 after n\) overlaps x \(argument 1 after n\)",
    ):
        dk.launch(10, x, np.zeros(10), a, x[3:4], out, dout, threads=threads)
    with pytest.raises(ValueError, match=r"the shadow of x \(argument 2 after n\) overlaps out"):
        dk.launch(10, x, out, a, np.zeros(1), out, dout, threads=threads)
    np.testing.assert_array_equal(x, 1)  # nothing ran
    np.testing.assert_array_equal(dout, 1)
    on_cpu = ez.offload.to_device(np.ones(10), ez.offload.CPU)
    with pytest.raises(ValueError, match=r"the shadow of x \(argument 2 after n\) overlaps x"):
        dk.launch(10, on_cpu, on_cpu, a, np.zeros(1), out, dout, device=ez.offload.CPU)
    # out's shadow is the seed, read back and zeroed: x's adjoints must not land in it.
    shared = np.ones(10)
    with pytest.raises(ValueError, match=r"the shadow of out .* overlaps the shadow of x"):
        dk.launch(10, x, shared, a, np.zeros(1), out, shared, threads=threads)
    np.testing.assert_array_equal(shared, 1)


def test_device_array_shadows_must_be_like_their_arrays():
    dk = ez.autodiff(ez.offload.kernel(sin_x), ez.Reverse, ez.Duplicated, ez.Duplicated)
    x = ez.offload.to_device(np.ones(10), ez.offload.CPU)
    with pytest.raises(ValueError, match=r"needs shape \(10,\) and dtype float64"):
        dk.launch(10, x, np.zeros(4), np.zeros(10), np.ones(10), device=ez.offload.CPU)


@numba.njit
def scaled_square(i, x, a, out):
    out[i] = a * x[i] ** 2


@pytest.mark.parametrize(
    "mode, activities, message",
    [
        (ez.Reverse, (ez.Duplicated, ez.Active, ez.Duplicated), "activity of a is Active, which"),
        (ez.Reverse, (ez.Duplicated, ez.Const), r"takes 3 arguments after the index \(x, a, out\)"),
        (ez.Reverse, (ez.Dual, ez.Const, ez.Dual), "x is Dual, which is not for Reverse mode"),
        (ez.Forward, (ez.Duplicated, ez.Const, ez.Dual), "Const or Dual"),
        (ez.Reverse, ("x", ez.Const, ez.Const), "activity of x must be an activity.*got 'x'"),
    ],
    ids=["active-scalar", "count", "dual-in-reverse", "duplicated-in-forward", "not-an-activity"],
)
def test_kernel_activity_errors_at_autodiff(mode, activities, message):
    with pytest.raises(ez.ActivityError, match=message):
        ez.autodiff(ez.offload.kernel(scaled_square), mode, *activities)


def test_a_derivative_kernel_is_not_differentiated_again():
    dk = ez.autodiff(ez.offload.kernel(sin_x), ez.Forward, ez.Dual, ez.Dual)
    with pytest.raises(ez.ActivityError, match="already a derivative"):
        ez.autodiff(dk, ez.Forward, ez.Dual, ez.Dual, ez.Dual, ez.Dual)


REACH = """
declare void @use(double*)
define void @f(i64 %i, double* %near, double* %same, double* %passed, double* %pairs,
               double* %merged, double* %apart, i1 %c) {
entry:
  %m = add i64 %i, -1
  %p = add i64 %i, 1
  %a = getelementptr double, double* %near, i64 %m
  %b = getelementptr double, double* %near, i64 %p
  %va = load double, double* %a
  store double %va, double* %b
  %s = getelementptr double, double* %same, i64 3
  store double 1.0, double* %s
  call void @use(double* %passed)
  %twice = shl i64 %i, 1
  %odd = or i64 %twice, 1
  %e = getelementptr double, double* %pairs, i64 %twice
  store double 1.0, double* %e
  %x = getelementptr double, double* %merged, i64 %i
  %y = getelementptr double, double* %merged, i64 %i
  %z = select i1 %c, double* %x, double* %y
  store double 2.0, double* %z
  %u = getelementptr double, double* %apart, i64 %i
  %v = getelementptr double, double* %apart, i64 %p
  %w = select i1 %c, double* %u, double* %v
  store double 2.0, double* %w
  ret void
}
"""


def test_how_far_each_index_reaches_into_its_arrays():
    from enzyme_py import _state

    reach = _state.native.index_reach(REACH, "f", 0, [1, 2, 3, 4, 5, 6])
    # near: i-1 and i+1 (2 apart); same: one entry for all indices; passed: given away;
    # pairs: entry 2i only (stride 2); merged: a select of one address; apart: of two.
    assert reach == [2, None, None, 0, 0, None]


def test_several_functions_reach_as_each_alone():
    # index_reaches: one parse and simplification for all; the other functions lose
    # their bodies there (the passes inline nothing: a call stays an opaque call),
    # here @use's, which stores what it is given.
    from enzyme_py import _state

    text = REACH.replace(
        "declare void @use(double*)",
        "@kept = global double* null\n"
        "define void @use(double* %q) {\n  store double* %q, double** @kept\n  ret void\n}",
    )
    text += REACH.split("declare void @use(double*)")[1].replace("@f(", "@f2(")
    alone = _state.native.index_reach(text, "f", 0, [1, 2, 3, 4, 5, 6])
    assert alone == [2, None, None, 0, 0, None]
    both = _state.native.index_reaches(text, [("f", 0, [1, 2, 3, 4, 5, 6]), ("f2", 0, [1, 3, 4])])
    assert both == [alone, [2, None, 0]]
    with pytest.raises(RuntimeError, match="no function named 'g'"):
        _state.native.index_reaches(text, [("f", 0, [1]), ("g", 0, [1])])


@numba.njit
def heat(i, u, out, r):
    n = u.shape[0]
    if i == 0 or i == n - 1:
        out[i] = u[i]
    else:
        out[i] = u[i] + r * (u[i - 1] - 2.0 * u[i] + u[i + 1])


@pytest.mark.parametrize("boundscheck", [True, False])
def test_a_reverse_stencil_runs_on_several_threads_without_atomic_adds(boundscheck):
    k = ez.offload.kernel(heat, boundscheck=boundscheck)
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)
    n, r = 1001, 0.25
    u = np.random.default_rng(1).random(n)
    du, out, dout = np.zeros(n), np.zeros(n), np.linspace(1, 2, n)
    args = (u, du, out, dout, r)
    assert dk._cpu.shadow_plan(args, n, 7) == (set(), {1, 3}, 2)  # du[i-1], du[i], du[i+1]
    dk.launch(n, *args, threads=7)
    # The step's Jacobian, transposed, applied to dout.
    jacobian = np.eye(n)
    for i in range(1, n - 1):
        jacobian[i, i - 1 : i + 2] = [r, 1 - 2 * r, r]
    np.testing.assert_allclose(du, jacobian.T @ np.linspace(1, 2, n), rtol=1e-13)
    np.testing.assert_array_equal(dout, 0)
    for launcher in dk._cpu.launchers.values():
        assert "atomicrmw" not in launcher.inspect_llvm(optimized=True)


def test_overlapping_shadows_are_added_into_atomically():
    dk = ez.autodiff(ez.offload.kernel(heat), ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)
    n = 100
    shadows = np.zeros(n + 5)
    args = (np.ones(n), shadows[:n], np.zeros(n), shadows[5:], 0.25)  # du[i + 5] is dout[i]
    assert dk._cpu.shadow_plan(args, n, 2) == (set(), set(), 0)
    apart = np.zeros(2 * n)
    args = (np.ones(n), apart[:n], np.zeros(n), apart[n:], 0.25)
    assert dk._cpu.shadow_plan(args, n, 2) == (set(), {1, 3}, 2)


def test_a_pointer_stored_away_has_no_known_reach():
    from enzyme_py import _state

    stored = """
define void @g(i64 %i, double* %x, double** %slot) {
  %p = getelementptr double, double* %x, i64 %i
  store double* %p, double** %slot
  ret void
}
"""
    assert _state.native.index_reach(stored, "g", 0, [1]) == [None]


@pytest.mark.parametrize(
    "value, error, message",
    [
        (np.array([1, "a"], dtype=object), TypeError, "numbers or booleans.*got dtype object"),
        ("abc", TypeError, "numbers or booleans.*got dtype <U3"),
    ],
)
def test_to_device_refuses_what_is_not_numbers(value, error, message):
    with pytest.raises(error, match=message):
        ez.offload.to_device(value, ez.offload.CPU)


def test_to_device_keeps_shapes_and_names_a_wrong_device():
    for value in (np.array(2.5), np.zeros(0), np.arange(6, dtype=np.int32).reshape(2, 3)[:, ::2]):
        with ez.offload.to_device(value, ez.offload.CPU) as on_device:
            back = on_device.to_host()
        assert back.shape == value.shape and back.dtype == value.dtype
        np.testing.assert_array_equal(back, value)
    with pytest.raises(TypeError, match="device must be an ez.offload.Device.*not 'cpu'"):
        ez.offload.to_device(np.ones(3), "cpu")


def test_indices_near_the_ends_of_each_thread_run_after_all_threads(monkeypatch):
    # With reach 2 (the stencil), each thread's last 2 indices are held back until every
    # thread is done: indices running at once are then more than 2 apart.
    dk = ez.autodiff(ez.offload.kernel(heat), ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const)
    n = 100
    args = (np.ones(n), np.zeros(n), np.zeros(n), np.ones(n), 0.25)
    dk.launch(n, *args, threads=1)  # built
    calls = []
    real = type(dk._cpu).launcher

    def recording(self, *a, **k):
        launcher = real(self, *a, **k)

        def run(start, end, *rest):
            calls.append((start, end))
            return launcher(start, end, *rest)

        return run

    monkeypatch.setattr(type(dk._cpu), "launcher", recording)
    dk.launch(n, *args, threads=4)
    first, then = sorted(calls[:4]), calls[4:]
    assert first == [(0, 23), (25, 48), (50, 73), (75, 98)]
    assert then == [(23, 25), (48, 50), (73, 75), (98, 100)]


@numba.njit
def row_norm(i, x, out):
    out[i] = np.sqrt(x[i, 0] ** 2 + x[i, 1] ** 2 + x[i, 2] ** 2)


def test_loops_of_constant_length_leave_no_tape():
    # Numba computes x ** 2 with a loop over the exponent's bits; unrolled before Enzyme,
    # it leaves nothing to record per index (it took 9 tape blocks per index).
    dk = ez.autodiff(ez.offload.kernel(row_norm), ez.Reverse, ez.Duplicated, ez.Duplicated)
    n = 1000
    x = np.random.default_rng(2).random((n, 3))
    dx, out, dout = np.zeros_like(x), np.zeros(n), np.ones(n)
    dk.launch(n, x, dx, out, dout, threads=2)
    np.testing.assert_allclose(dx, x / np.linalg.norm(x, axis=1)[:, None], rtol=1e-14)
    assert dk._cpu.shadow_plan((x, dx, out, dout), n, 2) == (set(), {1, 3}, 0)  # rows: own only
    for launcher in dk._cpu.launchers.values():
        ir = launcher.inspect_llvm(optimized=True)
        assert "tape_alloc" not in ir and "@malloc(" not in ir


def test_a_reverse_kernel_whose_body_loops_takes_its_tape_from_the_arena():
    k = ez.offload.kernel(ez.llvm_ir(HORNER, "horner"))
    dk = ez.autodiff(k, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Const, ez.Duplicated)
    n, m = 100, 4
    x, c = np.linspace(-1, 1, n), np.ones(m)
    dk.launch(n, x, np.zeros(n), c, np.zeros(m), m, np.zeros(n), np.ones(n), threads=1)
    (launcher,) = dk._cpu.launchers.values()
    ir = launcher.inspect_llvm(optimized=True)
    assert "@__enzyme_py_tape_alloc(" in ir and "@malloc(" not in ir
