"""Random derivative calls, run by tests/test_fuzz.py in a child process.

``python tests/fuzz_driver.py SEED CALLS [SPLIT]`` makes CALLS random calls (modes,
activities, widths, dtypes, layouts, overlapping shadows, bad values) of derivatives of
C and Numba functions. A fraction SPLIT of them (default 0) are split-mode calls instead:
``ez.ReverseSplit``'s two halves (the reverse half run twice from one tape), ``ez.vjp``
and its pullback (twice), and the PyTorch bridge's backward from the tape (when torch is
installed). Every array lies between guard bytes. It prints one JSON line: counts, the
failures by kind, and the first failures: a write outside the guards, an error that is
not typed (TypeError, ValueError, EnzymeError) or does not name what is wrong, a success
whose numbers differ from central finite differences of a NumPy reference. With
FUZZ_TRACE=path each case is written there before it runs (to find one that crashes).
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
NAMES += ("tape", "cotangent", "split mode")
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


def judged(exc: Exception) -> tuple[str, str]:
    """How a call that raised ``exc`` ends: refused (a typed error naming what is
    wrong) or failed (an untyped error, or one naming nothing)."""
    if isinstance(exc, (TypeError, ValueError, ez.EnzymeError)):
        text = str(exc)
        if not any(name in text for name in NAMES):
            return "failed", f"{type(exc).__name__} naming nothing: {text[:200]}"
        return "refused", type(exc).__name__
    return "failed", f"untyped {type(exc).__name__}: {str(exc)[:200]}"


class FuzzFailure(Exception):
    """What a case found wrong on its own (not an error of enzyme_py's)."""


class Case:
    """One random call: its derivative's request, arguments, and what they should give."""

    split = False  # SplitCase: the two halves of ez.ReverseSplit

    def __init__(self, rng: np.random.Generator, mods: dict[str, Any]):
        self.rng = rng
        self.name = str(rng.choice(list(FUNCTIONS)))
        self.params, self.returns, self.ref = FUNCTIONS[self.name]
        self.f = mods["numba"] if self.name == "ndot" else getattr(mods["c"], self.name)
        self.mode = ez.Forward if (self.name != "ndot" and rng.random() < 0.4) else ez.Reverse
        self.k = int(rng.choice([1, 1, 2, 3]))
        if self.split:
            self.mode, self.k = ez.Reverse, 1
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
                    "broadcast",
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
            elif choice == "broadcast" and a.ndim and a.size:
                # Every element along the last axis in one place (stride 0, read-only):
                # derivatives must still be per element (or the array refused).
                self.args[i] = np.broadcast_to(a[..., :1], a.shape)
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

    def call(self) -> Any:
        df = ez.autodiff(self.f, self.mode, *self.acts, width=self.width, **self.flags)
        return df(*self.args)

    def run(self) -> tuple[str, str]:
        """('ok' | 'refused' | 'failed', detail)."""
        try:
            result = self.call()
        except FuzzFailure as exc:
            return "failed", str(exc)
        except Exception as exc:
            return judged(exc)
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
            if kind in ("in", "out") and p in self.shadows:
                # A shadow replaced by a view of a copy (strided): the one passed.
                given = self.args[i + 1]
                if isinstance(given, np.ndarray) and given.shape == self.shadows[p].shape:
                    self.shadows[p] = given
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
        mode = "ReverseSplit" if self.split else self.mode.name
        return f"{self.name} {mode} {acts} width={self.width!r} {self.perturbation}"


class SplitCase(Case):
    """A Reverse case run as ez.ReverseSplit's halves: forward (the arguments without
    the seed), then reverse from the tape; the reverse half is run a second time from
    the same tape, with the shadows as they were before the first, and must give the
    same numbers. Sometimes the reverse half is given a tape that is not its own."""

    split = True

    def call(self) -> Any:
        df = ez.autodiff(self.f, ez.ReverseSplit, *self.acts, width=self.width, **self.flags)
        seeded = self.returns and self.ret in (ez.Active, ez.ActiveOnly)
        fargs = self.args[:-1] if seeded else self.args
        tail = self.args[-1:] if seeded else []
        primal, tape = df.forward(*fargs)
        if self.rng.random() < 0.05:  # a tape that is not its own: a TypeError naming it
            other = pick(self.rng, [None, object(), "tape", _other_tape()])
            try:
                df.reverse(other, *fargs, *tail)
            except TypeError as exc:
                if "tape" not in str(exc):
                    raise FuzzFailure(f"a wrong tape refused without naming it: {exc}") from exc
            else:
                raise FuzzFailure(f"accepted a tape not its own: {other!r}")
        arrays = [a for a in self.args if isinstance(a, np.ndarray)]
        before = [a.copy() for a in arrays]
        adjoints = df.reverse(tape, *fargs, *tail)
        after = [a.copy() for a in arrays]
        for a, b in zip(arrays, before, strict=True):
            if a.flags.writeable:
                a[...] = b
        again = df.reverse(tape, *fargs, *tail)
        same = len(again) == len(adjoints) and all(
            np.array_equal(np.asarray(x), np.asarray(y))
            for x, y in zip(again, adjoints, strict=True)
        )
        same = same and all(np.array_equal(a, b) for a, b in zip(arrays, after, strict=True))
        if not same:
            raise FuzzFailure(f"the reverse half gave other numbers the second time: {again}")
        return (primal, *adjoints)


_tapes: list[Any] = []


def _other_tape() -> Any:
    """A tape of another split derivative."""
    if not _tapes:
        g = ez.autodiff(
            ez.llvm_ir(
                "define double @sq1(double %x) {\n %y = fmul double %x, %x\n ret double %y\n}\n",
                "sq1",
            ),
            ez.ReverseSplit,
            ez.Active,
            ez.Active,
        )
        _tapes.append(g.forward(1.0)[1])
    return _tapes[0]


class VjpCase:
    """``ez.vjp(f, *primals)`` and its pullback (split mode for functions returning a
    float), called twice, against central differences; sometimes float32 arrays, a
    strided array or a bad cotangent (a TypeError naming it)."""

    split = True

    def __init__(self, rng: np.random.Generator, mods: dict[str, Any]):
        self.rng = rng
        self.name = str(rng.choice(list(FUNCTIONS)))
        self.params, self.returns, self.ref = FUNCTIONS[self.name]
        self.f = mods["numba"] if self.name == "ndot" else getattr(mods["c"], self.name)
        self.perturbation = ""
        if rng.random() < 0.3:
            self.perturbation = str(rng.choice(["float32", "strided", "cotangent"]))
        self.args: list[Any] = []
        for _, kind in self.params:
            if kind == "int":
                self.args.append(N)
            elif kind == "float":
                self.args.append(float(rng.normal()))
            else:
                a = guarded(np.zeros(N) if kind == "out" else rng.normal(size=N))
                if self.perturbation == "float32" and self.name == "ndot":
                    a = guarded(a.astype(np.float32))
                if self.perturbation == "strided" and kind == "in":
                    a = guarded(np.repeat(a, 2))[::2]
                self.args.append(a)

    def run(self) -> tuple[str, str]:
        v = {
            p: (np.asarray(a, np.float64).copy() if isinstance(a, np.ndarray) else a)
            for (p, _), a in zip(self.params, self.args, strict=True)
        }
        outs_of = [p for p, kind in self.params if kind == "out"]
        if self.returns:
            seed: Any = float(self.rng.normal())
        else:
            seed = tuple(self.rng.normal(size=N) if p in outs_of else None for p, _ in self.params)
        bad = self.perturbation == "cotangent"
        if bad:
            seed = pick(self.rng, [None, "1", np.ones(2), [1.0, 2.0]]) if self.returns else 1.0
        try:
            value, pull = ez.vjp(self.f, *self.args)
            first = pull(seed)
            second = pull(seed)
        except Exception as exc:
            return judged(exc)
        if bad:
            return "failed", f"accepted a bad cotangent {seed!r}"
        r, _ = self.ref(v)
        tol = (
            {"rtol": 1e-4, "atol": 1e-5}
            if self.perturbation == "float32"
            else {"rtol": 1e-5, "atol": 1e-6}
        )
        problems = []
        if self.returns and not np.isclose(value, r, **tol):
            problems.append(f"value {value!r} != {r!r}")
        douts = (
            {}
            if self.returns
            else {o: seed[i] for i, (o, _) in enumerate(self.params) if o in outs_of}
        )
        for i, (p, kind) in enumerate(self.params):
            got, got2 = first[i], second[i]
            if kind == "int":
                want = None
            elif kind == "out":
                want = np.zeros(N)  # f does not read what out held
            else:
                want = fd_reverse(self.ref, v, seed if self.returns else 0.0, douts, p)
            if want is None:
                if got is not None:
                    problems.append(f"pullback of {p}: {got!r} != None")
                continue
            if not np.allclose(np.asarray(got, np.float64), want, **tol):
                problems.append(f"pullback of {p}: {got!r} != {want!r}")
            if not np.array_equal(np.asarray(got), np.asarray(got2)):
                problems.append(f"pullback of {p} the second time: {got2!r} != {got!r}")
        if problems:
            return "failed", "; ".join(problems)[:400]
        return "ok", ""

    def describe(self) -> str:
        return f"{self.name} vjp {self.perturbation}"


class TorchCase:
    """``ez.torch.function(f)`` (Numba ndot, C poly): backward from the tape (twice, with
    retain_graph) against central differences."""

    split = True

    def __init__(self, rng: np.random.Generator, mods: dict[str, Any]):
        import torch

        self.torch = torch
        self.rng = rng
        self.name = str(rng.choice(["ndot", "poly"]))
        self.f = mods["numba"] if self.name == "ndot" else mods["c"].poly
        self.dtype = str(rng.choice(["float64", "float32"]))
        self.perturbation = self.dtype

    def run(self) -> tuple[str, str]:
        torch = self.torch
        dt = getattr(torch, self.dtype)
        if self.name == "ndot":
            x, y = self.rng.normal(size=N), self.rng.normal(size=N)
        else:
            x, y = np.array(self.rng.normal()), np.array(self.rng.normal())
        seed = float(self.rng.normal())
        tx = torch.tensor(x, dtype=dt, requires_grad=True)
        ty = torch.tensor(y, dtype=dt, requires_grad=True)
        try:
            g = ez.torch.function(self.f)
            loss = g(tx, ty) * seed
            loss.backward(retain_graph=True)
            gx, gy = tx.grad.clone(), ty.grad.clone()
            tx.grad = ty.grad = None
            loss.backward()
        except (TypeError, ValueError, ez.EnzymeError) as exc:
            return "failed", f"refused a valid call: {type(exc).__name__}: {str(exc)[:200]}"
        except Exception as exc:
            return "failed", f"untyped {type(exc).__name__}: {str(exc)[:200]}"
        xs = tx.detach().double().numpy()
        ys = ty.detach().double().numpy()
        if self.name == "ndot":
            want = (seed * ys, seed * xs)
        else:
            a, b = float(xs), float(ys)
            want = (seed * 2 * a * b, seed * (a * a + 3))
        tol = (
            {"rtol": 1e-4, "atol": 1e-4}
            if self.dtype == "float32"
            else {"rtol": 1e-10, "atol": 1e-12}
        )
        problems = []
        for label, got, again, w in (("x", gx, tx.grad, want[0]), ("y", gy, ty.grad, want[1])):
            if not np.allclose(got.double().numpy(), w, **tol):
                problems.append(f"grad of {label}: {got} != {w}")
            if not torch.equal(got, again):
                problems.append(f"grad of {label} from the tape again: {again} != {got}")
        if problems:
            return "failed", "; ".join(problems)[:400]
        return "ok", ""

    def describe(self) -> str:
        return f"{self.name} torch {self.dtype}"


def kind_of(detail: str) -> str:
    """A failure's kind, for the counts."""
    if detail.startswith("a write outside"):
        return "outside_guards"
    if detail.startswith("untyped"):
        return "untyped_error"
    if "naming nothing" in detail or "without naming" in detail:
        return "unnamed_refusal"
    if detail.startswith(("accepted", "refused a valid")):
        return "wrong_acceptance"
    return "wrong_numbers"


def main(seed: int, calls: int, split: float = 0.0) -> None:
    import os

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
    kinds: dict[str, int] = {}
    failures = []
    trace = None
    if "FUZZ_TRACE" in os.environ:
        trace = open(os.environ["FUZZ_TRACE"], "a", buffering=1)  # noqa: SIM115
    split_kinds: list[Any] = [SplitCase, VjpCase]
    try:
        import torch  # noqa: F401

        split_kinds.append(TorchCase)
    except ImportError:
        pass
    for i in range(calls):
        case: Any
        if split and rng.random() < split:
            case = pick(rng, split_kinds)(rng, mods)
        else:
            case = Case(rng, mods)
        if trace:
            trace.write(f"{seed} {i} {case.describe()}\n")
        status, detail = case.run()
        if not guards_intact():
            status, detail = "failed", "a write outside the guard bytes"
        counts[status] += 1
        label = type(case).__name__
        kinds[f"{label} {status}"] = kinds.get(f"{label} {status}", 0) + 1
        if status == "failed":
            kinds[kind_of(detail)] = kinds.get(kind_of(detail), 0) + 1
            failures.append(f"{case.describe()}: {detail}")
            _buffers.clear()  # report a damaged guard once
        if len(_buffers) > 2000:
            _buffers[:] = [b for b in _buffers[-64:]]
    print(json.dumps({"counts": counts, "kinds": kinds, "failures": failures[:20]}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
