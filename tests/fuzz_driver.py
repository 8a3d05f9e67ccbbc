"""Random derivative calls, run by tests/test_fuzz.py in a child process.

``python tests/fuzz_driver.py SEED CALLS`` makes CALLS random calls (modes, activities,
widths, dtypes, layouts, overlapping shadows, bad values) of derivatives of C and
Numba functions. Every array lies between guard bytes. It prints one JSON line: counts,
and the failures: a write outside the guards, an error that is not typed
(TypeError, ValueError, EnzymeError) or does not name what is wrong, a success whose
numbers differ from central finite differences of a NumPy reference.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import enzyme_py as ez

N = 3
GUARD = 64
_buffers: list[np.ndarray] = []

C_SOURCE = """
double dot(const double *x, const double *y, int n) {
  double s = 0; for (int i = 0; i < n; ++i) s += x[i] * y[i]; return s;
}
void sq(double *out, const double *x, double a, int n) {
  for (int i = 0; i < n; ++i) out[i] = a * x[i] * x[i];
}
double poly(double a, double b) { double t = a * a; t = t * b; return t + 3.0 * b; }
"""

# name -> (parameters (name, kind), returns a value, NumPy reference: values ->
# (return value or None, {output array: its values})).
Ref = Callable[[dict[str, Any]], tuple[Any, dict[str, np.ndarray]]]
FUNCTIONS: dict[str, tuple[list[tuple[str, str]], bool, Ref]] = {
    "dot": (
        [("x", "in"), ("y", "in"), ("n", "int")],
        True,
        lambda v: (v["x"][:N] @ v["y"][:N], {}),
    ),
    "sq": (
        [("out", "out"), ("x", "in"), ("a", "float"), ("n", "int")],
        False,
        lambda v: (None, {"out": v["a"] * v["x"][:N] * v["x"][:N]}),
    ),
    "poly": (
        [("a", "float"), ("b", "float")],
        True,
        lambda v: (v["a"] ** 2 * v["b"] + 3 * v["b"], {}),
    ),
    "ndot": ([("x", "in"), ("y", "in")], True, lambda v: (v["x"] @ v["y"], {})),
}
NAMES = ("parameter", "shadow", "seed", "tangent", "width", "activit", "return value", "mode")
NAMES += ("True or False", "'x'", "'y'", "'a'", "'b'", "'out'", "'dot'", "'sq'", "'poly'", "'ndot'")


def pick(rng: np.random.Generator, options: list[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def guarded(values: np.ndarray) -> np.ndarray:
    """A copy of values between guard bytes (checked after each call)."""
    buf = np.full(values.nbytes + 2 * GUARD, 0x5A, np.uint8)
    _buffers.append(buf)
    out = buf[GUARD : GUARD + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def guards_intact() -> bool:
    return all((b[:GUARD] == 0x5A).all() and (b[-GUARD:] == 0x5A).all() for b in _buffers)


def lanes(rng: np.random.Generator, k: int, shape: tuple[int, ...]) -> np.ndarray:
    return rng.normal(size=(k, *shape)) if k > 1 else rng.normal(size=shape)


def fd_reverse(
    ref: Ref, v: dict[str, Any], seed: float, douts: dict[str, np.ndarray], p: str
) -> Any:
    """d/dp of seed * f + sum(dout * out), by central differences."""

    def loss(w: dict[str, Any]) -> float:
        r, outs = ref(w)
        total = seed * r if r is not None else 0.0
        return total + sum(float(np.sum(d * outs[o])) for o, d in douts.items())

    return _central(loss, v, p)


def _central(g: Callable[[dict[str, Any]], Any], v: dict[str, Any], p: str) -> Any:
    h = 1e-6
    base = np.asarray(v[p], dtype=np.float64)
    grad = np.zeros(base.shape)
    for idx in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[idx] += h
        minus[idx] -= h
        grad[idx] = (
            g({**v, p: plus if base.shape else float(plus)})
            - g({**v, p: minus if base.shape else float(minus)})
        ) / (2 * h)
    return grad if base.shape else float(grad)


def fd_forward(
    ref: Ref, v: dict[str, Any], tangents: dict[str, Any]
) -> tuple[Any, dict[str, np.ndarray]]:
    """The directional derivative of f's return and outputs along tangents."""
    h = 1e-6
    plus = {p: (v[p] + h * tangents[p] if p in tangents else v[p]) for p in v}
    minus = {p: (v[p] - h * tangents[p] if p in tangents else v[p]) for p in v}
    rp, op = ref(plus)
    rm, om = ref(minus)
    dr = None if rp is None else (rp - rm) / (2 * h)
    return dr, {o: (op[o] - om[o]) / (2 * h) for o in op}


class Case:
    """One random call: its derivative's request, arguments, and what they should give."""

    def __init__(self, rng: np.random.Generator, mods: dict[str, Any]):
        self.rng = rng
        self.name = str(rng.choice(list(FUNCTIONS)))
        self.params, self.returns, self.ref = FUNCTIONS[self.name]
        self.f = mods["numba"] if self.name == "ndot" else getattr(mods["c"], self.name)
        self.mode = ez.Forward if (self.name != "ndot" and rng.random() < 0.4) else ez.Reverse
        self.k = int(rng.choice([1, 1, 2, 3]))
        self.width: Any = self.k
        fwd = self.mode is ez.Forward
        self.acts: list[Any] = []
        self.values: dict[str, Any] = {}
        self.args: list[Any] = []
        self.shadows: dict[str, np.ndarray] = {}
        self.initial: dict[str, np.ndarray] = {}
        self.shadow_args: list[int] = []  # where the array shadows are in args
        for p, kind in self.params:
            if kind == "int":
                self.acts.append(ez.Const)
                self.values[p] = N
                self.args.append(N)
                continue
            on = rng.random() < 0.7
            if kind == "float":
                act = (ez.Dual if fwd else ez.Active) if on else ez.Const
                value = float(rng.normal())
                self.args.append(value)
                self.values[p] = value
            else:
                act = (ez.Dual if fwd else ez.Duplicated) if (on or kind == "out") else ez.Const
                value = guarded(np.zeros(N) if kind == "out" else rng.normal(size=N))
                self.args.append(value)
                self.values[p] = value.copy()
            self.acts.append(act)
            if act in (ez.Dual, ez.Duplicated):
                if kind == "float":
                    t = lanes(rng, self.k, ())
                    self.args.append(t if self.k == 1 else list(t))
                    self.shadows[p] = np.asarray(t)
                else:
                    s = guarded(lanes(rng, self.k, (N,)))
                    self.shadow_args.append(len(self.args))
                    self.args.append(s)
                    self.shadows[p] = s
                    self.initial[p] = s.copy()
        self.ret: Any = None
        if self.returns:
            self.ret = pick(
                rng, [ez.Dual, ez.DualOnly, ez.Const] if fwd else [ez.Active, ez.ActiveOnly]
            )
            self.acts.append(self.ret)
            if not fwd:
                seed = lanes(rng, self.k, ())
                self.seed = np.asarray(seed)
                self.args.append(float(seed) if self.k == 1 else list(seed))
        self.flags: dict[str, Any] = {}
        self.perturbation = self._perturb() if rng.random() < 0.35 else ""

    def _perturb(self) -> str:
        rng = self.rng
        choice = str(
            rng.choice(
                [
                    "dtype",
                    "strided",
                    "shadow_shape",
                    "shadow_is_array",
                    "shadow_overlap",
                    "readonly",
                    "activity",
                    "width",
                    "seed",
                    "scalar",
                    "bigendian",
                    "option",
                ]
            )
        )
        arrays = [i for i, a in enumerate(self.args) if isinstance(a, np.ndarray)]
        if choice == "activity":
            i = int(rng.integers(len(self.acts)))
            self.acts[i] = pick(
                rng, ["Duplicated", ez.Dual, ez.Active, ez.DualOnly, ez.Duplicated, None]
            )
        elif choice == "width":
            self.width = pick(rng, [0, ez.MAX_WIDTH + 1, 2.5, 2**31])
        elif choice == "option":
            self.flags = {str(rng.choice(["runtime_activity", "strong_zero"])): "yes"}
        elif choice == "seed" and self.mode is ez.Reverse and self.returns:
            self.args[-1] = pick(rng, [None, "1", np.array(1.0), [1.0] * (self.k + 1), 1j])
        elif choice == "scalar":
            floats = [i for i, a in enumerate(self.args) if isinstance(a, float)]
            if floats:
                self.args[pick(rng, floats)] = pick(rng, [None, "1.5", 10**400, np.ones(2), 2j])
        elif arrays:
            i = int(rng.choice(arrays))
            a = self.args[i]
            if choice == "dtype":
                self.args[i] = guarded(a.astype(pick(rng, [np.float32, np.int64])))
            elif choice == "strided":
                big = guarded(np.repeat(a, 2, axis=-1))
                self.args[i] = big[..., ::2]
            elif choice == "shadow_shape" and self.shadow_args:
                # (A primal of the wrong size is the caller's error, as in C and Numba.)
                self.args[pick(rng, self.shadow_args)] = guarded(np.zeros(a.size + 1))
            elif choice == "readonly":
                a.flags.writeable = False
            elif choice == "bigendian":
                self.args[i] = guarded(a.astype(">f8"))
            elif choice == "shadow_is_array" and i > 0 and isinstance(self.args[i - 1], np.ndarray):
                self.args[i] = self.args[i - 1]
            elif choice == "shadow_overlap":
                self.args[i] = arrays and self.args[arrays[0]]
        return choice

    def run(self) -> tuple[str, str]:
        """('ok' | 'refused' | 'failed', detail)."""
        try:
            df = ez.autodiff(self.f, self.mode, *self.acts, width=self.width, **self.flags)
            result = df(*self.args)
        except (TypeError, ValueError, ez.EnzymeError) as exc:
            text = str(exc)
            if not any(name in text for name in NAMES):
                return "failed", f"{type(exc).__name__} naming nothing: {text[:200]}"
            return "refused", type(exc).__name__
        except Exception as exc:
            return "failed", f"untyped {type(exc).__name__}: {str(exc)[:200]}"
        if self.perturbation:
            try:
                self._refresh()
            except (TypeError, ValueError) as exc:
                return "failed", f"accepted arguments it should refuse ({exc}): {self.args!r}"
        return self.check(result)

    def _refresh(self) -> None:
        """Accepted despite the perturbation: the numbers must still be right for the
        values given (a Numba specialisation for float32, an integer tangent)."""
        for p, kind in self.params:
            i = self._arg_index(p)
            if kind == "in" and isinstance(self.args[i], np.ndarray):
                self.values[p] = np.asarray(self.args[i], np.float64)
            elif kind == "float":
                self.values[p] = float(self.args[i])
                if p in self.shadows:  # its tangent, as given
                    self.shadows[p] = np.asarray(self.args[i + 1], np.float64)
        if self.returns:
            self.ret = self.acts[len(self.params)]
        if self.mode is ez.Reverse and self.returns and self.ret in (ez.Active, ez.ActiveOnly):
            self.seed = np.asarray(self.args[-1], np.float64)

    def _arg_index(self, p: str) -> int:
        i = 0
        for (q, _), act in zip(self.params, self.acts, strict=False):
            if q == p:
                return i
            i += 2 if getattr(act, "shadow", False) else 1
        return i

    def check(self, result: Any) -> tuple[str, str]:
        v = {p: self.values[p] for p, _ in self.params}
        r, outs = self.ref(v)
        tol = {"rtol": 1e-5, "atol": 1e-6}
        problems = []

        def near(label: str, got: Any, want: Any) -> None:
            if got is None or want is None:
                if got is not want and not (got is None and want is None):
                    problems.append(f"{label}: {got!r} != {want!r}")
                return
            try:
                same = np.allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), **tol)
            except (TypeError, ValueError):
                same = False
            if not same:
                problems.append(f"{label}: {got!r} != {want!r}")

        act_of = {p: a for (p, _), a in zip(self.params, self.acts, strict=False)}
        for o, want in outs.items():
            if getattr(act_of[o], "primal_needed", True):  # *Only may leave it unwritten
                near(f"{o} (primal)", self.args[self._arg_index(o)], want)
        if self.mode is ez.Reverse:
            primal = r if self.ret is ez.Active else None
            near("primal", result[0], primal)
            adjoints = iter(result[1:])
            for lane in range(self.k):
                seed = float(self.seed if self.k == 1 else self.seed[lane]) if self.returns else 0.0
                douts = {
                    o: (self.initial[o] if self.k == 1 else self.initial[o][lane])
                    for o in outs
                    if o in self.initial
                }
                for p, kind in self.params:
                    if kind == "in" and p in self.shadows:
                        got = self.shadows[p] if self.k == 1 else self.shadows[p][lane]
                        start = self.initial[p] if self.k == 1 else self.initial[p][lane]
                        near(f"d{p}[{lane}]", got - start, fd_reverse(self.ref, v, seed, douts, p))
            for (p, kind), act in zip(self.params, self.acts, strict=False):
                if act is ez.Active and kind == "float":
                    got = next(adjoints)
                    want = []
                    for lane in range(self.k):
                        seed = (
                            float(self.seed if self.k == 1 else self.seed[lane])
                            if self.returns
                            else 0.0
                        )
                        douts = {
                            o: (self.initial[o] if self.k == 1 else self.initial[o][lane])
                            for o in outs
                            if o in self.initial
                        }
                        want.append(fd_reverse(self.ref, v, seed, douts, p))
                    near(f"adjoint of {p}", got, want[0] if self.k == 1 else want)
            for o in outs:
                if o in self.shadows:
                    near(f"d{o} (consumed)", self.shadows[o], np.zeros_like(self.shadows[o]))
        else:
            dys = []
            for lane in range(self.k):
                t = {
                    p: (s if self.k == 1 else s[lane])
                    for p, s in self.shadows.items()
                    if p not in outs
                }
                t = {p: s for p, s in t.items() if dict(self.params)[p] != "out"}
                dr, douts = fd_forward(self.ref, v, t)
                dys.append(dr)
                for o, want in douts.items():
                    if o in self.shadows:
                        near(
                            f"tangent of {o}[{lane}]",
                            self.shadows[o] if self.k == 1 else self.shadows[o][lane],
                            want,
                        )
            dy = dys[0] if self.k == 1 else dys
            if self.ret is ez.Dual:
                near("primal", result[0], r)
                near("tangent", result[1], dy)
            elif self.ret is ez.DualOnly:
                near("tangent", result, dy)
            elif self.ret is ez.Const:
                near("primal", result, r)
        if problems:
            return "failed", "; ".join(problems)[:400]
        return "ok", ""

    def describe(self) -> str:
        acts = [getattr(a, "name", repr(a)) for a in self.acts]
        return f"{self.name} {self.mode.name} {acts} width={self.width!r} {self.perturbation}"


def main(seed: int, calls: int) -> None:
    import numba

    @numba.njit
    def ndot(x: Any, y: Any) -> Any:
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] * y[i]
        return s

    mods = {"c": ez.c(C_SOURCE), "numba": ndot}
    rng = np.random.default_rng(seed)
    counts = {"ok": 0, "refused": 0, "failed": 0}
    failures = []
    for _ in range(calls):
        case = Case(rng, mods)
        status, detail = case.run()
        if not guards_intact():
            status, detail = "failed", "a write outside the guard bytes"
        counts[status] += 1
        if status == "failed":
            failures.append(f"{case.describe()}: {detail}")
            _buffers.clear()  # report a damaged guard once
        if len(_buffers) > 2000:
            _buffers[:] = [b for b in _buffers[-64:]]
    print(json.dumps({"counts": counts, "failures": failures[:20]}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
