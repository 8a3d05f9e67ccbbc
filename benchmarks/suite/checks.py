"""Each derivative checked against another contender's; the time ratios."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmarks.suite.table import (
    AD_TOLERANCE,
    FD_TOLERANCE,
    OWN_PRIMAL,
    VALUE_TOLERANCE,
    Kernel,
    relative_error,
)


def _load(entry: dict[str, Any], key: str) -> np.ndarray | None:
    path = entry.get("_npz")
    if not path:
        return None
    with np.load(path) as data:
        return data[key] if key in data.files else None


def add_checks(kernel: Kernel, result: dict[str, Any]) -> list[str]:
    """Compare each derivative with another contender's and each value with the
    Numba primal's; returns the failures."""
    entries = result["contenders"]
    failures: list[str] = []
    derivatives = {
        name: d
        for name, e in entries.items()
        if e["status"] == "ok" and (d := _load(e, "derivative")) is not None
    }
    primal = entries.get("numba_primal", {})
    spot_index = _load(primal, "spot_index") if primal.get("status") == "ok" else None
    spot_value = _load(primal, "spot_value") if primal.get("status") == "ok" else None
    primal_value = primal.get("value")
    for name, entry in entries.items():
        if entry["role"] != "derivative" or entry["status"] != "ok":
            continue
        if name.startswith("enzyme_py"):
            order = ["jax", "torch", "finite_differences"]
        else:
            order = [kernel.enzyme_reference, "jax", "torch", "finite_differences"]
        reference = next((r for r in order if r != name and r in derivatives), None)
        fd_involved = name == "finite_differences" or reference == "finite_differences"
        check: dict[str, Any]
        if name not in derivatives:
            check = {"against": None, "max_rel_error": None, "tolerance": None}
        elif reference is not None:
            check = {
                "against": reference,
                "max_rel_error": relative_error(derivatives[name], derivatives[reference]),
                "tolerance": FD_TOLERANCE if fd_involved else AD_TOLERANCE,
            }
        elif spot_index is not None and spot_value is not None and spot_index.size:
            check = {
                "against": f"finite differences at {spot_index.size} sampled inputs",
                "max_rel_error": relative_error(derivatives[name][spot_index], spot_value),
                "tolerance": FD_TOLERANCE,
            }
        else:
            check = {"against": None, "max_rel_error": None, "tolerance": None}
        error = check["max_rel_error"]
        check["ok"] = error is not None and math.isfinite(error) and error <= check["tolerance"]
        if not check["ok"]:
            failures.append(f"{kernel.name}/{name}: derivative check {check}")
        entry["check"] = check
        if "value" in entry and primal_value is not None:
            value_error = relative_error(np.array([entry["value"]]), np.array([primal_value]))
            entry["value_check"] = {
                "against": "numba_primal",
                "rel_error": value_error,
                "tolerance": VALUE_TOLERANCE,
                "ok": value_error <= VALUE_TOLERANCE,
            }
            if value_error > VALUE_TOLERANCE:
                failures.append(f"{kernel.name}/{name}: value differs by {value_error:.2e}")
    for name, entry in entries.items():
        entry.pop("_npz", None)
        if entry["status"] == "error":
            failures.append(f"{kernel.name}/{name}: {entry.get('reason')}")
    return failures


def add_ratios(kernel: Kernel, result: dict[str, Any]) -> None:
    entries = result["contenders"]
    primal = entries.get("numba_primal", {})
    primal_time = primal.get("time_s") if primal.get("status") == "ok" else None
    enzyme = entries.get(kernel.enzyme_reference, {})
    enzyme_time = enzyme.get("time_s") if enzyme.get("status") == "ok" else None
    result["primal_s"] = primal_time
    for entry in entries.values():
        t = entry.get("time_s") if entry["status"] == "ok" else None
        if t is None:
            continue
        entry["over_primal"] = t / primal_time if primal_time else None
        entry["enzyme_py_over_this"] = enzyme_time / t if enzyme_time else None
    for name, own in OWN_PRIMAL.items():  # the Cython row: gradient / its own primal
        t, p = (entries.get(n, {}) for n in (name, own))
        if t.get("status") == "ok" and p.get("status") == "ok":
            t["over_own_primal"] = t["time_s"] / p["time_s"]
