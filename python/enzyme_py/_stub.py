"""The stand-in used when AD is unavailable: every public name, each AD call an
``EnzymeUnavailableError`` that says why and how to enable AD.

It shares the vocabulary (modes, activities, exceptions) with the real package
through ``enzyme_py.core``, so user code imports and type-checks the same.
"""

from __future__ import annotations

from typing import Any, NoReturn

from enzyme_py import _state
from enzyme_py.core import EnzymeUnavailableError

__all__ = [
    "autodiff",
    "c",
    "check_grad",
    "clear_rules",
    "cpp",
    "cython",
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jvp",
    "llvm_ir",
    "register_derivative",
    "register_gradient",
    "value_and_grad",
    "vjp",
]


def _unavailable(what: str) -> NoReturn:
    raise EnzymeUnavailableError(_state.unavailable_message(what))


def autodiff(f: Any, mode: Any, *activities: Any, **options: Any) -> NoReturn:
    _unavailable("ez.autodiff")


def grad(f: Any, argnums: Any = 0, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.grad")


def value_and_grad(f: Any, argnums: Any = 0, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.value_and_grad")


def jvp(f: Any, primals: Any, tangents: Any, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.jvp")


def vjp(f: Any, *primals: Any, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.vjp")


def jacobian(f: Any, argnums: Any = 0, output: Any = None, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.jacobian")


def jacfwd(f: Any, argnums: Any = 0, output: Any = None, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.jacfwd")


def jacrev(f: Any, argnums: Any = 0, output: Any = None, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.jacrev")


def hessian(f: Any, argnums: Any = 0, has_aux: bool = False) -> NoReturn:
    _unavailable("ez.hessian")


def hvp(f: Any, primals: Any, tangents: Any) -> NoReturn:
    _unavailable("ez.hvp")


def llvm_ir(text: str, name: str) -> NoReturn:
    _unavailable("ez.llvm_ir")


def check_grad(f: Any, *args: Any, **options: Any) -> NoReturn:
    _unavailable("ez.check_grad")


def c(source: str, flags: Any = None) -> NoReturn:
    _unavailable("ez.c")


def cpp(source: str, flags: Any = None) -> NoReturn:
    _unavailable("ez.cpp")


def cython(
    source: Any = None, directives: Any = None, flags: Any = None, *, path: Any = None
) -> NoReturn:
    _unavailable("ez.cython")


def register_gradient(target: str, augment: Any, gradient: Any) -> NoReturn:
    _unavailable("ez.register_gradient")


def register_derivative(target: str, forward: Any) -> NoReturn:
    _unavailable("ez.register_derivative")


def clear_rules(target: Any = None) -> NoReturn:
    _unavailable("ez.clear_rules")
