"""Comparison suite: enzyme_py against JAX, PyTorch and finite differences.

Usage (from the repository root)::

    python -m benchmarks [--quick] [--out DIR] [--jobs N] [--only KERNEL,...]

Kernels (``benchmarks/kernels.py``; JAX and PyTorch twins in ``benchmarks/contenders.py``):

1. ``rosenbrock``: Rosenbrock sum, n = 10^6; gradient with respect to x.
2. ``gmm``: ADBench GMM objective, d = 10, k = 25, n = 10^4; gradient with respect to
   alphas, means, icf.
3. ``heat``: explicit-Euler 1-D heat equation, 1000 cells x 1000 steps, r = 0.25, fixed
   ends, loss 0.5 * sum((u_final - target)^2); gradient with respect to u0.
4. ``nbody``: kinetic + softened pairwise potential energy of 100 bodies in 3-D; a
   forward-mode Jacobian-vector product along a random direction in positions and
   velocities.
5. ``scalar``: f(x) = x * x * sin(x): the cost of one derivative call (call overhead).
6. ``rosenbrock_prange``, ``gmm_prange``, ``heat_prange``: kernels 1-3 written with
   ``parallel=True`` and ``prange`` (over i, over samples, over cells), same sizes and
   contenders (JAX and PyTorch run their one version of the math again). The Numba primal
   runs on Numba's threads; ``enzyme_py_reverse`` is ``ez.grad`` as a user calls it
   (threads= left out: the prange loops on every Numba thread where a loop's body has a
   loop of its own, GMM's, or where they run once per call, Rosenbrock's, else the
   serial twin, prange as range: heat's, inside its time loop), ``enzyme_py_threads``
   runs every prange loop on every core (``ez.autodiff(..., threads=os.cpu_count())``,
   its shadows zeroed by the caller with ``np.zeros_like``).
7. ``rosenbrock_small``: kernel 1 on 10 doubles (the same at ``--quick``): what a
   gradient costs per call where the array is small (``ez.grad``'s own overhead, JAX's
   and PyTorch's dispatch), as in an optimiser's loop over a few parameters.

``--quick`` runs tiny sizes (Rosenbrock n = 1000, GMM d = 3 k = 4 n = 50, heat 32 cells
x 20 steps, 8 bodies) with fewer repeats, and still runs every installed contender.

Contenders, each on the same inputs (built from the same seeds), all in float64:

- ``numba_primal``: the Numba ``@njit`` function itself: the reference (1.0);
- ``enzyme_py_reverse``: ``ez.grad`` (kernels 1-3, 6, 7) or
  ``ez.autodiff(f, ez.Reverse, ez.Active, ez.Active)`` (kernel 5);
- ``enzyme_py_forward``: ``ez.autodiff(f, ez.Forward, ...)`` with Dual arguments
  (kernels 4, 5); ``enzyme_py_jvp_helper``: ``ez.jvp(f, primals, tangents)`` called
  as is, once per JVP (kernel 4);
- ``jax``: ``jax.jit(jax.grad(f))`` / ``jax.jit(lambda ...: jax.jvp(...))`` on the CPU,
  with ``jax_enable_x64``, inputs already on the device, every call ended with
  ``block_until_ready`` (kernel 5: ``float(g(x))``);
- ``torch``: PyTorch autograd on the CPU (``torch.autograd.grad``; kernel 4
  ``torch.func.jvp``; kernel 5 a fresh scalar tensor, ``backward()``, ``.grad.item()``),
  with ``torch.set_num_threads(os.cpu_count())``;
- ``finite_differences``: central differences of the Numba primal (step
  1e-6 * max(1, |x_i|); 1e-6 along the direction for the JVP): 2 primal evaluations
  for the JVP and for kernel 5; 2 per input for a gradient, run only when that is
  estimated to take under ``FD_BUDGET_S`` (so at the --quick sizes; otherwise reported
  as not feasible with the estimate);
- the Cython row (kernels 1 and 3): the same kernels written in Cython (``ez.cython``,
  ``const double[::1]`` memoryviews) and in C (``ez.c``), those of
  ``benchmarks/cython_gradients.py``: ``cython_primal`` / ``c_primal`` (the function
  called through enzyme_py; the module's compile is in its first call) and
  ``enzyme_py_cython`` / ``enzyme_py_c`` (``ez.grad``), each gradient also given as a
  ratio to its own primal (``over_own_primal``). Skipped without Cython.

Numba and enzyme_py run on one thread on the serial kernels (the prange kernels' Numba
primal on all cores, and their enzyme_py rows as said above); JAX (XLA's CPU client)
and PyTorch may use every core.

Method:

- Every contender of every kernel runs in its own child process
  (``python -m benchmarks.suite --child SPEC``), one after the other (``--jobs 1``, the
  default without ``--quick``), so that no library's threads, caches or allocations
  affect another's numbers. The child imports only what its contender needs.
- Time: the first call is timed alone (first-call latency: tracing, compilation, JIT);
  after one more warm-up call, the median over at least 5 (7 without --quick) samples,
  each sample the mean of ``number`` calls in a row, with ``number`` chosen so that a
  sample lasts about 20 ms (1 ms with --quick), and more samples (up to 50) while they
  fit in about 1 s. Derivative time / primal time, and enzyme_py time /
  contender time (enzyme_py's reverse derivative; the forward one for kernel 4).
- Compile latency of enzyme_py: the first call in a child with an empty
  ``ENZYME_PY_CACHE_DIR``, then the first call in new children with the same (now
  filled) cache folder: the median of three (one with --quick), every sample kept in
  the JSON file. ``ENZYME_PY_LOG=1`` in those children records where each
  derivative came from (Enzyme or the disk cache). enzyme_py's first call is timed after
  the Numba primal has been compiled (its Numba compile is the primal's first call).
  The report also gives the filled-cache first call less the row's time per call: what
  loading the derivative cost beyond running it once.
- Peak memory: each child reads ``ru_maxrss`` (``getrusage(RUSAGE_SELF)``) just
  before the first call, once it has imported its libraries, built its inputs (as the
  arrays or tensors it uses) and, for the contenders that call the Numba primal
  (enzyme_py, finite differences), compiled the primal: the baseline, the figure a
  separate child that stopped there would report. It reads it again after the first
  call and after the timed calls; "peak" is the larger of those two minus the baseline
  (the larger, because resetting the high-water mark, below, resets ``ru_maxrss`` too
  on Linux). The peak includes the first call, so compilation (XLA, Numba, the JIT) is
  in it. enzyme_py runs Enzyme in a forked child by default, whose memory is not in
  ``RUSAGE_SELF`` (``enzyme_build_child_maxrss_mib`` in the JSON). "steady" is the
  peak of the timed calls alone: the high-water mark is reset (``/proc/self/clear_refs``)
  after the warm-up calls, and ``VmHWM`` afterwards minus ``VmRSS`` before the timed
  calls is reported (memory the allocators kept from the warm-up calls, and reuse, is
  not counted again; memory they take from the system on every call, is; in the JSON
  only). "per call", the table's memory per gradient: after the timed calls, the C
  heap's free memory is handed back to the system (glibc's ``malloc_trim(0)``: the
  free pages of every arena), the high-water mark is reset, and one more call is made:
  ``VmHWM`` after it minus ``VmRSS`` before it, the least of 3 such readings. It counts
  the pages the call touches anew (its result, its temporaries: a reverse pass's tape,
  the shadows of arrays made inside the function) and not what stays allocated
  between calls (inputs, compiled code, pools a library keeps outside malloc). For
  enzyme_py the most its tape held during the call is added (``tape_mib``, from
  ``_native.tape_bytes()``): Enzyme's tape lives on a stack of enzyme_py's own that
  stays resident between calls (up to 1 GiB or a sixteenth of the machine's memory;
  chunks beyond it are given back after each call, faulted in anew, and already in
  the new pages).
- Checks: every derivative is compared with another contender's: enzyme_py with JAX,
  else PyTorch, else finite differences (full, or at 3 sampled coordinates per input
  array when a full one is not feasible); every other derivative with enzyme_py.
  The error is max_i |a_i - b_i| / max_i |b_i| (b the reference). The values computed
  by JAX, PyTorch and enzyme_py's forward mode are compared with the Numba primal's.
- ``BENCH_VERBOSE=1`` prints each child's wall time to stderr; ``--only rosenbrock,gmm``
  runs some kernels. The 1-minute load average before the run (and at its end, the
  suite's own children included) is recorded: other processes disturb the times.
- Missing libraries: a contender whose library cannot be imported is "skipped" with
  the reason, never a failure. ``BENCH_DISABLE=jax,torch`` blocks those imports
  (``sys.modules[name] = None`` in this process and every child), as if not installed.

Results: ``suite.json`` (every sample), ``suite.md`` (printed too) and ``suite.png``
(gradient time / primal time per kernel and contender, log scale; needs matplotlib) in
``--out`` (default ``benchmarks/results/``). The exit code is 1 when a contender fails
or a check exceeds its tolerance, else 0. Nothing asserts anything about the times.

Modules: ``table`` (the kernels, contenders, tolerances, and what parent and children
share), ``setups`` (``Setup``, the kernels' inputs), one setup per contender family
(``numba_setup``: the Numba primal and finite differences; ``enzyme_setup``: enzyme_py on
Numba, Cython and C; ``jax_torch_setup``), ``child`` (one child's measurement) and
``memory`` (its memory readings), ``runner`` (the parent's child processes), ``checks``
(derivative checks, ratios), ``report`` (environment, markdown, chart), ``cli``.
"""

from __future__ import annotations

from benchmarks.suite.cli import main

__all__ = ["main"]
