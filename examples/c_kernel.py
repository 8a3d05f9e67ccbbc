"""A C simulation kernel: reverse-mode gradient and forward-mode directional derivative.

python examples/c_kernel.py

The kernel runs `steps` explicit Euler steps of the 1-D heat equation
u_t = kappa(x) u_xx (unit grid spacing, fixed end values), in place on u, and returns
the misfit 0.5 * sum((u_final - target)**2). enzyme_py differentiates it:

- Reverse mode, one call: the gradient with respect to the initial state u, the
  conductivities kappa (Duplicated arrays: adjoints land in their shadows) and the
  time step dt (an Active scalar: its adjoint is returned).
- Forward mode, one call: the derivative along a direction (tu, tkappa, tdt) of all
  three at once (Dual).

Both are checked against central finite differences of the kernel itself, in float64.
"""

import numpy as np

import enzyme_py as ez

kernel = ez.c(
    r"""
    double heat_misfit(double *u, const double *kappa, const double *target,
                       double *work, int n, int steps, double dt)
    {
        for (int s = 0; s < steps; ++s) {
            for (int i = 1; i < n - 1; ++i)
                work[i] = u[i] + dt * kappa[i] * (u[i - 1] - 2.0 * u[i] + u[i + 1]);
            for (int i = 1; i < n - 1; ++i)
                u[i] = work[i];
        }
        double e = 0.0;
        for (int i = 0; i < n; ++i) {
            double d = u[i] - target[i];
            e += d * d;
        }
        return 0.5 * e;
    }
    """
)
f = kernel.heat_misfit
C, A, Dup, Dual = ez.Const, ez.Active, ez.Duplicated, ez.Dual

# Parameters: u, kappa, target, work, n, steps, dt; then the return value.
# `work` is scratch memory that carries derivative information from one loop to the
# next, so it is Duplicated/Dual too (with a zero shadow), never Const.
grad = ez.autodiff(f, ez.Reverse, Dup, Dup, C, Dup, C, C, A, A)
tangent = ez.autodiff(f, ez.Forward, Dual, Dual, C, Dual, C, C, Dual, Dual)
# All Const in forward mode: the kernel's own value (what finite differences need).
value = ez.autodiff(f, ez.Forward, C, C, C, C, C, C, C, C)

N, STEPS = 16, 25
rng = np.random.default_rng(42)
u0 = np.sin(np.linspace(0.0, np.pi, N)) + 0.1 * rng.normal(size=N)
kappa0 = rng.uniform(0.1, 0.4, size=N)
target = 0.5 * np.sin(np.linspace(0.0, np.pi, N))
dt0 = 0.5  # dt * kappa <= 0.2 < 0.5: the explicit scheme is stable


def misfit(u: np.ndarray, kappa: np.ndarray, dt: float) -> float:
    """The kernel's value; u is copied, since the kernel overwrites it."""
    return value(u.copy(), kappa.copy(), target, np.zeros(N), N, STEPS, dt)


def misfit_numpy(u: np.ndarray, kappa: np.ndarray, dt: float) -> float:
    """The same computation in NumPy, to check the C kernel's value."""
    u = u.copy()
    for _ in range(STEPS):
        u[1:-1] = u[1:-1] + dt * kappa[1:-1] * (u[:-2] - 2.0 * u[1:-1] + u[2:])
    return 0.5 * float(np.sum((u - target) ** 2))


def check(name: str, got: np.ndarray | float, want: np.ndarray | float, rtol: float) -> None:
    got_a, want_a = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    error = float(np.max(np.abs(got_a - want_a)))
    scale = float(np.max(np.abs(want_a)))
    if not np.allclose(got_a, want_a, rtol=rtol, atol=rtol * max(scale, 1e-300)):
        raise SystemExit(
            f"c_kernel: {name} does NOT match (max |error| {error:.3e}, scale {scale:.3e})\n"
            f"  got:  {got_a}\n  want: {want_a}"
        )
    print(f"OK  {name:<52} max |error| {error:.2e}")


# --- the value --------------------------------------------------------------------
e0 = misfit(u0, kappa0, dt0)
check("value: C kernel vs NumPy", e0, misfit_numpy(u0, kappa0, dt0), 1e-13)

# --- reverse mode: the whole gradient in one call ---------------------------------
u, du = u0.copy(), np.zeros(N)  # du holds the seed of the final u (none) ...
kappa, dkappa = kappa0.copy(), np.zeros(N)
work, dwork = np.zeros(N), np.zeros(N)
e_rev, ddt = grad(u, du, kappa, dkappa, target, work, dwork, N, STEPS, dt0, 1.0)
# ... and afterwards the adjoint of the initial u: u was updated in place.
check("value returned by the reverse derivative", e_rev, e0, 1e-13)

# Central finite differences, one coordinate at a time.
H = 1e-6
fd_du = np.empty(N)
fd_dkappa = np.empty(N)
for i in range(N):
    e_i = np.zeros(N)
    e_i[i] = H
    fd_du[i] = (misfit(u0 + e_i, kappa0, dt0) - misfit(u0 - e_i, kappa0, dt0)) / (2 * H)
    fd_dkappa[i] = (misfit(u0, kappa0 + e_i, dt0) - misfit(u0, kappa0 - e_i, dt0)) / (2 * H)
fd_ddt = (misfit(u0, kappa0, dt0 + H) - misfit(u0, kappa0, dt0 - H)) / (2 * H)

check("reverse: d misfit / d u0 vs finite differences", du, fd_du, 1e-6)
check("reverse: d misfit / d kappa vs finite differences", dkappa, fd_dkappa, 1e-6)
check("reverse: d misfit / d dt vs finite differences", ddt, fd_ddt, 1e-6)

# --- forward mode: one directional derivative -------------------------------------
tu = rng.normal(size=N)
tkappa = rng.normal(size=N)
tdt = 0.3
# Arguments: u, tu, kappa, tkappa, target, work, twork, n, steps, dt, tdt.
e_fwd, de = tangent(
    u0.copy(),
    tu.copy(),
    kappa0.copy(),
    tkappa,
    target,
    np.zeros(N),
    np.zeros(N),
    N,
    STEPS,
    dt0,
    tdt,
)
fd_dir = (
    misfit(u0 + H * tu, kappa0 + H * tkappa, dt0 + H * tdt)
    - misfit(u0 - H * tu, kappa0 - H * tkappa, dt0 - H * tdt)
) / (2 * H)
check("value returned by the forward derivative", e_fwd, e0, 1e-13)
check("forward: directional derivative vs finite diff.", de, fd_dir, 1e-6)
# Forward and reverse agree with each other to rounding (no truncation error here).
check(
    "forward vs reverse: tangent == gradient . direction",
    de,
    du @ tu + dkappa @ tkappa + ddt * tdt,
    1e-12,
)
print("c_kernel: OK, reverse and forward derivatives match finite differences")
