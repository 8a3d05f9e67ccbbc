"""The stub takes over without AD and answers every AD call with a clear error.

These run in every build: each case is a fresh interpreter with
ENZYME_PY_DISABLE=1, or with a plugin path that does not exist.
"""

import json

import pytest

from conftest import run_python

AD_CALLS = {
    "autodiff": "ez.autodiff(None, ez.Reverse, ez.Active, ez.Active)",
    "grad": "ez.grad(None)",
    "value_and_grad": "ez.value_and_grad(None)",
    "jvp": "ez.jvp(None, (1.0,), (1.0,))",
    "vjp": "ez.vjp(None, 1.0)",
    "jacobian": "ez.jacobian(None)",
    "hessian": "ez.hessian(None)",
    "jacfwd": "ez.jacfwd(None)",
    "jacrev": "ez.jacrev(None)",
    "hvp": "ez.hvp(None, (1.0,), (1.0,))",
    "llvm_ir": "ez.llvm_ir('', 'f')",
    "c": "ez.c('double f(double x) { return x; }')",
    "cpp": "ez.cpp('double f(double x) { return x; }')",
    "cython": "ez.cython('cdef double f(double x) noexcept: return x')",
    "check_grad": "ez.check_grad(None, 1.0)",
    "register_gradient": "ez.register_gradient('f', None, None)",
    "register_derivative": "ez.register_derivative('f', None)",
    "clear_rules": "ez.clear_rules()",
    "offload.devices": "ez.offload.devices()",
}


@pytest.mark.parametrize("name", sorted(AD_CALLS))
def test_disabled_ad_call_raises_unavailable(name):
    code = f"""
import enzyme_py as ez
assert not ez.has_autodiff()
try:
    {AD_CALLS[name]}
except ez.EnzymeUnavailableError as exc:
    assert isinstance(exc, ImportError)
    print(exc)
else:
    raise SystemExit("no EnzymeUnavailableError")
"""
    proc = run_python(code, env={"ENZYME_PY_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr
    message = proc.stdout
    assert "ENZYME_PY_DISABLE" in message  # why
    assert "ENZYME_PY_AD" in message and "ENZYME_PY_PLUGIN" in message  # how to enable
    assert f"ez.{name}" in message


def test_disabled_info_says_why():
    proc = run_python(
        "import json, enzyme_py as ez; print(json.dumps(ez.info()))",
        env={"ENZYME_PY_DISABLE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    details = json.loads(proc.stdout)
    assert details["autodiff"] is False
    assert details["enzyme_plugin"] is None
    assert "ENZYME_PY_DISABLE" in details["reason"]


def test_missing_plugin_falls_back_to_stub():
    proc = run_python(
        "import enzyme_py as ez; print(ez.has_autodiff()); print(ez.info()['reason'])",
        env={"ENZYME_PY_PLUGIN": "/nonexistent/LLVMEnzyme-15.so", "ENZYME_PY_DISABLE": ""},
    )
    assert proc.returncode == 0, proc.stderr
    has_ad, reason = proc.stdout.splitlines()[:2]
    assert has_ad == "False"
    # In the AD build the plugin is what is missing; a stub build has no core at all.
    assert "/nonexistent/LLVMEnzyme-15.so" in reason or "built without AD" in reason


def test_cli_info_in_stub_mode():
    proc = run_python(
        "import sys; from enzyme_py.__main__ import main; sys.exit(main(['info']))",
        env={"ENZYME_PY_DISABLE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "autodiff: False" in proc.stdout
    assert "reason:" in proc.stdout
