"""Enzyme's min-cut caching on loops whose running value starts from a load (a running
maximum seeded with the first entry, as in logsumexp): Enzyme v0.0.289 aborted its
build there ("Assertion `legalRecompute(V, Available2, nullptr)' failed"), and the
derivative was built a second time without min-cut caching. The engine now feeds such
a value into its loop through a `freeze` (src/rewrites.h): one build, the same numbers."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from conftest import run_python

pytestmark = pytest.mark.needs_enzyme

# max(d[0..7]) written to out[7] and squared; the maximum starts from d[0] (a load),
# the loop runs over d[1..7]. As LLVM IR, so that no frontend reshapes the loop.
RUNNING_MAX = """
define double @running_max(double* nocapture readonly %d, double* nocapture %out) {
start:
  %seed = load double, double* %d, align 8
  br label %loop
loop:
  %i = phi i64 [ 1, %start ], [ %i.next, %loop ]
  %m = phi double [ %seed, %start ], [ %m.next, %loop ]
  %p = getelementptr inbounds double, double* %d, i64 %i
  %v = load double, double* %p, align 8
  %bigger = fcmp ogt double %v, %m
  %m.next = select i1 %bigger, double %v, double %m
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, 8
  br i1 %done, label %exit, label %loop
exit:
  %slot = getelementptr inbounds double, double* %out, i64 7
  store double %m.next, double* %slot, align 8
  %r = fmul double %m.next, %m.next
  ret double %r
}
"""

RETRY = "retrying without min-cut caching"
ASSERTION = "legalRecompute"


def _build_and_print(body: str) -> tuple[str, str]:
    """Run ``body`` in a fresh interpreter with the build log on and no disk cache
    (so that Enzyme runs); its stdout and stderr."""
    code = "import numpy as np, enzyme_py as ez\n" + textwrap.dedent(body)
    proc = run_python(code, env={"ENZYME_PY_LOG": "1", "ENZYME_PY_DISK_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, proc.stderr


def test_a_running_maximum_seeded_from_a_load_builds_once_with_the_right_gradient():
    out, err = _build_and_print(
        f"""
        f = ez.llvm_ir({RUNNING_MAX!r}, "running_max")
        df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.Duplicated, ez.Active)
        d = np.array([0.5, -1.0, 2.5, 1.0, 2.0, -3.0, 0.0, 1.5])
        dd, out, dout = np.zeros(8), np.zeros(8), np.zeros(8)
        df(d, dd, out, dout, 1.0)
        print(repr(dd.tolist()), out[7])
        """
    )
    assert RETRY not in err and ASSERTION not in err
    gradient, maximum = out.split("]")
    expected = np.zeros(8)
    expected[2] = 2 * 2.5  # d(max^2)/d d[argmax]
    np.testing.assert_array_equal(np.array(eval(gradient + "]")), expected)
    assert float(maximum) == 2.5


def test_the_gmm_objective_with_its_logsumexp_builds_once_and_matches_finite_differences():
    # The benchmark's GMM (logsumexp of alphas: a running maximum from alphas[0]):
    # its build was retried without min-cut caching before.
    out, err = _build_and_print(
        """
        import sys
        sys.path.insert(0, ".")
        from benchmarks import kernels
        args = list(kernels.gmm_inputs(3, 4, 20))
        g = ez.grad(kernels.gmm_objective, argnums=(0, 1, 2))(*args)
        f = kernels.gmm_objective
        worst = 0.0
        for k, a in enumerate(args[:3]):
            for j in range(a.size):
                plus = [x.copy() if i < 3 else x for i, x in enumerate(args)]
                minus = [x.copy() if i < 3 else x for i, x in enumerate(args)]
                plus[k].flat[j] += 1e-6
                minus[k].flat[j] -= 1e-6
                fd = (f(*plus) - f(*minus)) / 2e-6
                worst = max(worst, abs(fd - g[k].flat[j]) / max(1.0, abs(fd)))
        print(worst)
        """
    )
    assert RETRY not in err and ASSERTION not in err
    assert float(out) < 1e-6
