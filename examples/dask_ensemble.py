"""Gradients of a Numba model for many parameter sets on a Dask cluster.

    python examples/dask_ensemble.py [--sets 2000] [--workers 2] [--json out.json]

Needs `pip install 'enzyme_py[numba,dask]'`. The derivative is built once here, pickled
to the workers (a Numba derivative pickles as its dispatcher and its activities) and
rebuilt in each worker on its first call: from the disk cache when the workers share
this process's ENZYME_PY_CACHE_DIR, from scratch when each has its own. Both are timed,
and every gradient computed on the cluster is checked against a serial run here.

On a multi-machine cluster the same code runs with `Client("tcp://scheduler:8786")`
instead of the LocalCluster: give the workers one ENZYME_PY_CACHE_DIR on a shared
filesystem (entries are written atomically; a worker loads what another built) or let
each build its own on its first call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np

import enzyme_py as ez


@numba.njit
def loss(p, t, y):
    """Squared error of a logistic growth curve, p = (rate, capacity, initial size)."""
    rate, capacity, n0 = p[0], p[1], p[2]
    s = 0.0
    for i in range(t.shape[0]):
        model = capacity / (1.0 + (capacity / n0 - 1.0) * math.exp(-rate * t[i]))
        d = model - y[i]
        s += d * d
    return s


def make_derivative():
    # loss(p, t, y): p differentiated (its adjoint added into a shadow), t and y data.
    return ez.autodiff(loss, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)


def gradients(df, params, t, y):
    """(values, gradients) of the loss for each row of `params` (runs on a worker)."""
    values = np.empty(params.shape[0])
    grads = np.zeros_like(params)
    for k in range(params.shape[0]):
        (values[k],) = df(params[k], grads[k], t, y, 1.0)
    return values, grads


def first_call(payload, t, y, p):
    """Unpickle the derivative and call it once, timed (runs on each worker)."""
    start = time.perf_counter()
    df = pickle.loads(payload)  # imports Numba and enzyme_py in a fresh worker
    unpickled = time.perf_counter()
    df(p, np.zeros_like(p), t, y, 1.0)  # Numba's compile, then Enzyme's build or the cache
    call_s = time.perf_counter() - unpickled
    folder = os.environ.get("ENZYME_PY_CACHE_DIR")
    entries = len(list(Path(folder).rglob("*.ezo"))) if folder else None
    return {
        "unpickle_s": unpickled - start,
        "call_s": call_s,
        "cache_dir": folder,
        "cache_entries": entries,
    }


def own_cache_dir(base):
    """Give this worker an empty disk cache of its own: it builds from scratch."""
    os.environ["ENZYME_PY_CACHE_DIR"] = tempfile.mkdtemp(prefix="worker_", dir=base)
    return os.environ["ENZYME_PY_CACHE_DIR"]


def data(n_points=200):
    t = np.linspace(0.0, 10.0, n_points)
    rng = np.random.default_rng(0)
    y = 50.0 / (1.0 + 49.0 * np.exp(-0.9 * t)) + rng.normal(0.0, 0.5, n_points)
    return t, y


def parameter_sets(n):
    rng = np.random.default_rng(1)
    return np.column_stack(
        [rng.uniform(0.2, 2.0, n), rng.uniform(20.0, 80.0, n), rng.uniform(0.5, 5.0, n)]
    )


def main(argv=None):
    from dask.distributed import Client, LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=2000, help="parameter sets")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--json", help="write the measured numbers here")
    args = parser.parse_args(argv)

    t, y = data()
    params = parameter_sets(args.sets)
    df = make_derivative()
    start = time.perf_counter()
    df(params[0], np.zeros(3), t, y, 1.0)  # the build, here: stored in the disk cache
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    serial_values, serial_grads = gradients(df, params, t, y)
    serial_s = time.perf_counter() - start
    report = ez.check_grad(loss, params[0], t, y)  # the derivative against differences
    if not report.ok:
        raise SystemExit(f"dask_ensemble: check_grad failed\n{report}")
    payload = pickle.dumps(df)

    results = {
        "sets": args.sets,
        "workers": args.workers,
        "first_call_here_s": build_s,
        "serial_s": serial_s,
        "load_average_before": os.getloadavg()[0],
    }
    with (
        tempfile.TemporaryDirectory(prefix="enzyme_py_workers_") as worker_caches,
        LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        # The workers inherit this process's ENZYME_PY_CACHE_DIR, where the serial run
        # stored the derivative (a shared cache); half of them get an empty cache of
        # their own instead (per-worker builds). Each then makes its first call.
        workers = sorted(client.scheduler_info()["workers"])
        own = workers[: max(1, len(workers) // 2)]
        client.run(own_cache_dir, worker_caches, workers=own)
        firsts = {}
        for w in workers:  # one at a time, so that they do not share the cores
            firsts.update(client.run(first_call, payload, t, y, params[0], workers=[w]))
        results["first_call_own_cache"] = [firsts[w] for w in own]
        results["first_call_shared_cache"] = [firsts[w] for w in workers if w not in own]
        # The ensemble: one task per chunk of parameter sets, the derivative pickled
        # into each task, results gathered in order.
        chunks = np.array_split(params, 4 * len(workers))
        start = time.perf_counter()
        futures = [client.submit(gradients, df, chunk, t, y, pure=False) for chunk in chunks]
        parts = client.gather(futures)
        results["cluster_s"] = time.perf_counter() - start
        values = np.concatenate([v for v, _ in parts])
        grads = np.concatenate([g for _, g in parts])

    results["max_abs_diff"] = float(
        max(np.max(np.abs(values - serial_values)), np.max(np.abs(grads - serial_grads)))
    )
    ok = np.allclose(values, serial_values, rtol=1e-12, atol=0.0) and np.allclose(
        grads, serial_grads, rtol=1e-12, atol=1e-300
    )
    results["ok"] = bool(ok)
    print(f"the first call here (Numba's compile and Enzyme's build): {build_s:.2f} s")
    print(
        f"{args.sets} gradients: serial {serial_s:.3f} s, "
        f"{args.workers} workers {results['cluster_s']:.3f} s (the derivative pickled per task)"
    )
    for kind in ("own", "shared"):
        for first in results[f"first_call_{kind}_cache"]:
            print(
                f"a worker's first call, {kind} cache: unpickling (imports) "
                f"{first['unpickle_s']:.2f} s, the call {first['call_s']:.2f} s"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if not ok:
        print(f"dask_ensemble: cluster and serial disagree by {results['max_abs_diff']}")
        return 1
    print("dask_ensemble: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
