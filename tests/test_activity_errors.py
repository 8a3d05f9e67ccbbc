"""The error contract: wrong activities and wrong arguments, typed and named."""

import numpy as np
import pytest

import enzyme_py as ez

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

SOURCE = r"""
double dot(const double *a, const double *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}
double poly(double x, int k) { return x * x * k; }
void scale(double *x, int n) { for (int i = 0; i < n; ++i) x[i] *= 2.0; }
"""


@pytest.fixture(scope="module")
def m():
    return ez.c(SOURCE)


@pytest.mark.parametrize(
    ("fn", "mode", "acts", "pattern"),
    [
        (
            "poly",
            ez.Reverse,
            (ez.Duplicated, ez.Const, ez.Active),
            r"parameter 0 \('x'\) of 'poly' is a float64 scalar passed by value.*use Active",
        ),
        (
            "poly",
            ez.Reverse,
            (ez.Active, ez.Active, ez.Active),
            r"parameter 1 \('k'\) of 'poly' is an integer .*only be Const",
        ),
        (
            "poly",
            ez.Forward,
            (ez.Active, ez.Const, ez.Dual),
            r"Active is not allowed in Forward mode \(parameter 0 \('x'\)",
        ),
        (
            "poly",
            ez.Reverse,
            (ez.Dual, ez.Const, ez.Active),
            r"Dual is not allowed in Reverse mode \(parameter 0 \('x'\)",
        ),
        (
            "poly",
            ez.Forward,
            (ez.Dual, ez.Const, ez.Duplicated),
            r"Duplicated is not allowed in Forward mode \(the return value",
        ),
        (
            "dot",
            ez.Reverse,
            (ez.Active, ez.Const, ez.Const, ez.Active),
            r"parameter 0 \('a'\) of 'dot' is an array .*use Duplicated",
        ),
        (
            "dot",
            ez.Reverse,
            (ez.Duplicated, ez.Const, ez.Active),
            r"'dot' has 3 parameters and a return value .* needs 4 activities; got 3",
        ),
        (
            "scale",
            ez.Reverse,
            (ez.Duplicated, ez.Const, ez.Active),
            r"'scale' has 2 parameters and returns nothing, so autodiff needs 2 activities",
        ),
        (
            "poly",
            ez.Reverse,
            (ez.ActiveOnly, ez.Const, ez.Active),
            r"ActiveOnly describes a return value, not parameter 0 \('x'\)",
        ),
        (
            "poly",
            ez.Reverse,
            ("Active", ez.Const, ez.Active),
            r"activity of parameter 0 \('x'\) of 'poly' is 'Active', not an enzyme_py activity",
        ),
        (
            "poly",
            ez.Reverse,
            (ez.Active, ez.Const, ez.Duplicated),
            r"return value \(float64\) of 'poly' is a scalar returned by value",
        ),
    ],
)
def test_activity_errors(m, fn, mode, acts, pattern):
    with pytest.raises(ez.ActivityError, match=pattern) as info:
        ez.autodiff(getattr(m, fn), mode, *acts)
    assert isinstance(info.value, TypeError)


def test_bad_mode_and_width(m):
    with pytest.raises(ez.ActivityError, match="mode must be ez.Reverse or ez.Forward"):
        ez.autodiff(m.poly, "reverse", ez.Active, ez.Const, ez.Active)
    with pytest.raises(ValueError, match="width must be a positive integer"):
        ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active, width=0)
    with pytest.raises(ValueError, match="width must be a positive integer"):
        ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active, width=np.bool_(True))
    batched = ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active, width=np.int64(2))
    assert batched.width == 2 and type(batched.width) is int
    with pytest.raises(TypeError, match="cannot differentiate"):
        ez.autodiff(lambda x: x, ez.Reverse, ez.Active, ez.Active)


@pytest.fixture(scope="module")
def ddot(m):
    return ez.autodiff(m.dot, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)


def good():
    return np.ones(4), np.zeros(4), np.ones(4)


@pytest.mark.parametrize(
    ("mutate", "exc", "pattern"),
    [
        (
            lambda a, da, b: (a, np.zeros(3), b),
            ValueError,
            r"shadow of parameter 0 \('a'\) of 'dot' needs shape \(4,\); got \(3,\)",
        ),
        (
            lambda a, da, b: (a, np.zeros(4, np.float32), b),
            ValueError,
            r"shadow of parameter 0 \('a'\).* needs dtype float64",
        ),
        (
            lambda a, da, b: (a, np.broadcast_to(0.0, (4,)), b),
            ValueError,
            r"shadow of parameter 0 \('a'\).* must be writable",
        ),
        (lambda a, da, b: (a, a, b), ValueError, r"overlaps its array"),
        (
            lambda a, da, b: (a, b, b),
            ValueError,
            r"shadow of parameter 0 \('a'\) of 'dot' overlaps parameter 1 \('b'\) of 'dot'",
        ),
        (
            lambda a, da, b: (a, da, da),
            ValueError,
            r"shadow of parameter 0 \('a'\) of 'dot' overlaps parameter 1 \('b'\)",
        ),
        (
            lambda a, da, b: (a.astype(np.float32), da, b),
            ValueError,
            r"parameter 0 \('a'\) of 'dot' needs dtype float64; got float32",
        ),
        (
            lambda a, da, b: (list(a), da, b),
            TypeError,
            r"parameter 0 \('a'\) of 'dot' is an array; got list",
        ),
        (
            lambda a, da, b: (a, da, np.ones(8)[::2]),
            ValueError,
            r"parameter 1 \('b'\) of 'dot' must be C-contiguous",
        ),
        (lambda a, da, b: (a, list(da), b), TypeError, r"shadow of parameter 0 \('a'\)"),
    ],
)
def test_argument_errors_before_native_call(ddot, mutate, exc, pattern):
    a, da, b = mutate(*good())
    with pytest.raises(exc, match=pattern):
        ddot(a, da, b, 4, 1.0)


def test_read_only_arrays_are_refused(ddot):
    a, da, b = good()
    da.flags.writeable = False
    with pytest.raises(ValueError, match="must be writable"):
        ddot(a, da, b, 4, 1.0)


def test_scalar_argument_errors(m, ddot):
    a, da, b = good()
    with pytest.raises(TypeError, match=r"takes 5 arguments \(a, da, b, n, seed\); got 4"):
        ddot(a, da, b, 4)
    with pytest.raises(TypeError, match=r"parameter 2 \('n'\) of 'dot' is an integer"):
        ddot(a, da, b, 4.5, 1.0)
    with pytest.raises(ValueError, match=r"parameter 2 \('n'\) of 'dot' is int32; .* does not fit"):
        ddot(a, da, b, 2**40, 1.0)
    dpoly = ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active)
    with pytest.raises(TypeError, match=r"parameter 0 \('x'\) of 'poly' is a float64 scalar"):
        dpoly("a", 2, 1.0)
    with pytest.raises(ValueError, match=r"seed of 'poly' needs 2 values \(width=2\)"):
        ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active, width=2)(1.0, 2, 1.0)


@pytest.mark.parametrize(
    "bad",
    ["1.0", b"1.0", None, 1 + 1j, np.complex128(1 + 1j), np.array([1.0]), np.array("1")],
    ids=["str", "bytes", "None", "complex", "np.complex128", "1-d array", "0-d str array"],
)
def test_float_scalars_seeds_and_tangents_are_real_numbers(m, bad):
    # float(value) took strings and bytes; NumPy dropped an imaginary part with a warning.
    real = "pass a real number .*; got"
    dpoly = ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active)
    with pytest.raises(
        TypeError, match=rf"parameter 0 \('x'\) of 'poly' is a float64 scalar: {real}"
    ):
        dpoly(bad, 2, 1.0)
    with pytest.raises(TypeError, match=rf"the seed of 'poly' is a float64 scalar: {real}"):
        dpoly(3.0, 2, bad)
    fpoly = ez.autodiff(m.poly, ez.Forward, ez.Dual, ez.Const, ez.Dual)
    with pytest.raises(TypeError, match=rf"the tangent of parameter 0 \('x'\) of 'poly'.*{real}"):
        fpoly(3.0, bad, 2)
    wide = ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active, width=2)
    with pytest.raises(TypeError, match=rf"the seed of 'poly' \(value 0\) .*{real}"):
        wide(3.0, 2, [bad, 1.0])


def test_real_numbers_of_every_kind_are_taken(m):
    dpoly = ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active)
    for seed in (2, True, np.float32(2.0), np.int8(2), np.array(2.0), np.bool_(True)):
        assert dpoly(3.0, 2, seed) == (18.0, 12.0 * float(seed))
    wide = ez.autodiff(m.poly, ez.Reverse, ez.Active, ez.Const, ez.Active, width=2)
    for seeds in ([1, 2.0], (np.float32(1.0), True), np.array([1, 2]), range(1, 3)):
        _, dx = wide(3.0, 2, seeds)
        assert dx.tolist() == [12.0, 12.0 * float(seeds[1])]
    with pytest.raises(TypeError, match=r"seed of 'poly' needs 2 real numbers \(width=2\).*str"):
        wide(3.0, 2, "12")


def test_bad_inputs_never_crash_the_interpreter():
    # Run in a fresh interpreter: a crash would show as a failing return code.
    code = r"""
import numpy as np, enzyme_py as ez
m = ez.c('double dot(const double *a, const double *b, int n) {'
         ' double s = 0; for (int i = 0; i < n; ++i) s += a[i] * b[i]; return s; }')
df = ez.autodiff(m.dot, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)
class Weird:
    def __float__(self): raise RuntimeError("no")
    def __index__(self): raise RuntimeError("no")
bad_values = [None, "x", b"x", [1.0], (1.0,), {}, Weird(), object(), np.float64("nan"),
              np.zeros(0), np.zeros((2, 2)), np.zeros(4, np.complex128), np.zeros(4, object),
              np.zeros(4)[::-1], np.zeros(4).astype(">f8"), 2**70, -1]
good = [np.ones(4), np.zeros(4), np.ones(4), 4, 1.0]
errors = 0
for position in range(len(good)):
    for bad in bad_values:
        args = list(good)
        args[position] = bad
        args[1] = np.zeros(4)
        try:
            df(*args)
        except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
            errors += 1
print("survived", errors)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("survived")
    assert int(proc.stdout.split()[1]) > 60  # nearly every bad input is refused
