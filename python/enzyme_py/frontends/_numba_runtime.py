"""Numba's runtime helpers as Enzyme should see them, in the IR of a function to
differentiate.

Many of the helpers Numba calls only compute shapes and strides or talk to Python;
no derivative flows through them, but Enzyme, which cannot see into them, refuses
them ("No augmented forward pass found for numba_attempt_nocopy_reshape") or aborts
on their variadic calls (print). Here:

- ``numba_attempt_nocopy_reshape`` (behind ``x.reshape``, ``x.ravel()``, ``np.max``
  and ``np.min`` of arrays) writes only the new strides: marked ``enzyme_inactive``;
- the arguments of exceptions raised with run-time values are boxed as Python objects
  (``PyLong_FromLongLong``, ``PyTuple_Pack``, ...) by a function Numba's runtime calls
  when it raises: those calls are marked inactive, but only where every Python C-API
  function the code calls is one that consumes values and never hands one back (an
  ``objmode`` block, which calls Python and unboxes its results, keeps today's
  refusal: a derivative through it would silently be zero), and variadic ones go
  through non-variadic thunks (Enzyme asserts on variadic calls);
- ``print()`` stays refused: it needs Numba's environment object, which the copy of
  the code enzyme_py compiles does not have;
- ``NRT_Allocate`` / ``NRT_Free`` (the buffer of such an exception's arguments)
  become ``malloc`` / ``free``, which Enzyme knows;
- an array structure's meminfo and parent pointers, zeroed by a memset (0-d views in
  ``np.max``) or copied from the parameters (which enzyme_py passes as null), are
  stored as null: Enzyme cannot type a memset of a structure, nor store an inactive
  pointer into an active structure;
- an array allocated inside the function whose elements are integers or booleans
  (``np.arange(n)``, ``np.argsort(x)``, ``np.empty(n, np.int64)``: Numba's
  ``NRT_MemInfo_alloc*`` whose data pointer is only ever read as an integer
  pointer) is allocated through an inactive thunk: its values cannot carry a
  derivative, and Enzyme, which gives every allocation a shadow, otherwise refuses
  the integer stores into it ("Mismatched activity");
- a list of fixed size (the partition stack of ``np.sort`` / ``np.argsort``, the
  rows of ``np.array([[a, b], [c, d]])``, ``np.cross([0, 0, 1], h)``): when the
  module never grows a list (no ``NRT_MemInfo_varsize_realloc``), its
  ``NRT_MemInfo_new_varsize_dtor`` is an arena allocation like an array's (Enzyme
  gives it a shadow), inactive when its items are integers (its destructor's name
  says: ``.dtor.list.int64``); reference counting is off, so the destructor is never
  needed;
- draws of ``np.random`` and ``random`` are constants (the generator's helpers go
  through inactive thunks, ``_random_state_inactive``), as Monte Carlo samples are;
- ``math.lgamma`` and ``math.gamma`` (float64 and float32) are libm's (Numba's)
  values with derivatives of every order from code Enzyme differentiates
  (``_gamma_rules``): Enzyme v0.0.289 aborts on lgamma and knows no derivative of
  Numba's gamma.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from enzyme_py.frontends._gamma_rules import mark_inactive, with_gamma_rules
from enzyme_py.frontends._ir_lines import declares
from enzyme_py.frontends._numba_results import type_mark_declaration

# Part of the keys of cached derivatives of Numba code: bumped when what prepare()
# (or _numba_substitutes) makes of the same code changes.
REVISION = 6
# Helpers that compute shapes and strides only.
SHAPE_ONLY = ("numba_attempt_nocopy_reshape",)
# Numba's random number generators (np.random, random): the address of a thread's
# state, its seeding and its refill. The draws are computed from the state's integers
# in the function's own code.
RANDOM_STATE = (
    "numba_get_np_random_state",
    "numba_get_py_random_state",
    "numba_rnd_init",
    "numba_rnd_shuffle",
)
# Python C-API functions and Numba helpers that consume values (boxing them, printing
# them, setting an error) and return nothing a result could be computed from.
SINKS = (
    "numba_gil_ensure",
    "numba_gil_release",
    "numba_unpickle",
    "PyObject_Str",
    "PyObject_Repr",
    "PyUnicode_AsUTF8",
    "PyUnicode_FromString",
    "PySys_FormatStdout",
    "PySys_WriteStdout",
    "Py_DecRef",
    "Py_IncRef",
    "PyFloat_FromDouble",
    "PyLong_FromLongLong",
    "PyLong_FromUnsignedLongLong",
    "PyLong_FromLong",
    "PyLong_FromSsize_t",
    "PyBool_FromLong",
    "PyComplex_FromDoubles",
    "PyTuple_Pack",
    "PyErr_SetString",
    "PyErr_SetNone",
    "PyErr_SetObject",
    "PyErr_Clear",
    "PyErr_WriteUnraisable",
    "NRT_adapt_ndarray_to_python_acqref",
)

_DEFINE = re.compile(r"^define [^\n]*@([\w.$\"-]+)\(.*?^\}$", re.MULTILINE | re.DOTALL)
_CALLEE = re.compile(r"@((?:Py|_Py|numba_|NRT_)\w+)\(")


def _called_runtime(ir: str) -> set[str]:
    """Python C-API and Numba runtime functions called by the functions that run
    inside a derivative (not Numba's Python wrappers, cpython.* and cfunc.*)."""
    called: set[str] = set()
    for match in _DEFINE.finditer(ir):
        name = match.group(1).strip('"')
        if name.startswith(("cpython.", "cfunc.", "_ZN7cpython")):
            continue
        called.update(_CALLEE.findall(match.group(0)))
    return called


def _type_of(argument: str) -> str:
    """The type of a call argument ("i8* nonnull %x", "[3 x i8]* @s"): up to the first
    space outside brackets."""
    depth = 0
    for i, ch in enumerate(argument):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == " " and depth == 0:
            return argument[:i]
    return argument


def _split_arguments(text: str) -> list[str]:
    """A call's arguments, split at the commas outside brackets and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


_VARIADIC_CALL = re.compile(
    r"call (?P<ret>[^\n(]*?) \((?P<fixed>[^\n)]*?),? ?\.\.\.\) @(?P<name>\w+)\((?P<args>[^\n]*)\)"
    r"(?P<tail>[^\n)]*)$",
    re.MULTILINE,
)


def _without_variadic_calls(ir: str, names: set[str]) -> str:
    """Calls of the variadic functions ``names`` (PySys_FormatStdout, PyTuple_Pack)
    through non-variadic thunks marked inactive: Enzyme v0.0.289 asserts on a
    variadic call even when it is inactive ("number of arg operands != function
    parameters")."""
    thunks: dict[tuple[str, str, tuple[str, ...]], str] = {}

    def replace(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in names:
            return m.group(0)
        ret = m.group("ret").strip()
        args = _split_arguments(m.group("args"))
        types = tuple(_type_of(a) for a in args)
        key = (name, ret, types)
        thunk = thunks.setdefault(key, f"enzyme_py.{name}.{len(thunks)}")
        return f"call {ret} @{thunk}({m.group('args')})"

    out = _VARIADIC_CALL.sub(replace, ir)
    for (name, ret, types), thunk in thunks.items():
        params = ", ".join(f"{t} %p{i}" for i, t in enumerate(types))
        declare = re.search(rf"^declare [^\n]*@{name}\(([^\n]*)\.\.\.\)", ir, re.MULTILINE)
        fixed_types = _split_arguments(declare.group(1).rstrip(", ")) if declare else []
        fnty = f"{ret} ({', '.join([*fixed_types, '...'])})"
        call = f"call {fnty} @{name}({', '.join(f'{t} %p{i}' for i, t in enumerate(types))})"
        out += _inactive_definition(thunk, ret, params, call)
    return out


def without_array_owners(ir: str, function: str, arrays: list[str]) -> str:
    """``function`` (Numba's compile of the function differentiated) with its array
    parameters' meminfo and parent pointers replaced by null, which is what
    enzyme_py's wrapper passes: a view or reshape copies them into a new array
    structure, and Enzyme refuses to store those inactive pointers into the active
    structure ("Mismatched activity")."""
    start = ir.index(f"define i32 @{function}(")
    end = ir.index("\n}\n", start)
    head_end = ir.index("\n", start)
    body = ir[head_end:end]
    for name in arrays:
        body = re.sub(rf"%arg\.{re.escape(name)}\.[01](?![\w.])", "null", body)
    return ir[:head_end] + body + ir[end:]


_ARRAY_HEADER_BITCAST = re.compile(
    r"^  (%[\w.]+) = bitcast \{ i8\*, i8\*, i64, i64, [^\n]*\* %[\w.]+ to i8\*$", re.MULTILINE
)


def _typed_header_zeroing(ir: str) -> str:
    """A memset of an array structure's first 16 bytes (its meminfo and parent
    pointers, zeroed by Numba's code for 0-d views such as np.max's) as two stores of
    null: Enzyme's type analysis cannot tell what a memset of a structure writes
    ("Cannot deduce type of memset"). Per function: value names are a function's own
    (``%1`` a bitcast of an array structure in one function, of np.outer's shape
    tuple in another: its 16 bytes of integers were given null pointers, and Enzyme's
    type analysis gave up on the forward derivative of ``np.outer(x, x[::-1])``)."""
    if not _ARRAY_HEADER_BITCAST.search(ir):
        return ir
    count = 0

    def in_function(fn: re.Match[str]) -> str:
        body = fn.group(0)
        headers = set(_ARRAY_HEADER_BITCAST.findall(body))
        if not headers:
            return body

        def replace(m: re.Match[str]) -> str:
            nonlocal count
            ptr = m.group(1)
            if ptr not in headers:
                return m.group(0)
            count += 1
            v = f"%enzyme_py.header{count}"
            return (
                f"  {v} = bitcast i8* {ptr} to i8**\n"
                f"  store i8* null, i8** {v}, align 8\n"
                f"  {v}.parent = getelementptr i8*, i8** {v}, i64 1\n"
                f"  store i8* null, i8** {v}.parent, align 8"
            )

        return _HEADER_MEMSET.sub(replace, body)

    return _DEFINE.sub(in_function, ir)


_HEADER_MEMSET = re.compile(
    r"^  call void @llvm\.memset\.p0i8\.i64\(i8\*[^,\n]* (%[\w.]+), i8 0, i64 16, i1 false\)"
    r"[^\n]*$",
    re.MULTILINE,
)


def _allocations_as_malloc(ir: str) -> str:
    """NRT_Allocate (a plain allocation: the buffer of an exception's run-time
    arguments) as malloc, whose derivative Enzyme knows."""
    if "@NRT_Allocate(" not in ir:
        return ir
    has_malloc = declares(ir, "malloc")
    declare = re.compile(r"^declare [^\n]*@NRT_Allocate\([^\n]*$", re.MULTILINE)
    ir = declare.sub("" if has_malloc else "declare noalias i8* @malloc(i64)", ir)
    ir = ir.replace("@NRT_Allocate(", "@malloc(")
    if "@NRT_Free(" in ir:
        has_free = declares(ir, "free")
        declare = re.compile(r"^declare [^\n]*@NRT_Free\([^\n]*$", re.MULTILINE)
        ir = declare.sub("" if has_free else "declare void @free(i8*)", ir)
        ir = ir.replace("@NRT_Free(", "@free(")
    return ir


_ALLOCATION = re.compile(
    r"^  (%[\w.$-]+) = (?:tail )?call (?:noalias )?i8\* @(NRT_MemInfo_alloc(?:_safe)?(?:_aligned)?)"
    r"\(([^\n)]*)\)",
    re.MULTILINE,
)
_INTEGER_POINTER = re.compile(r"^i(?:16|32|64)\*$")  # i8* is any memory (memcpy)


# The lines _data_pointer_types follows, each found once per function (not a pattern
# made and compiled per allocation: GMM prange's preparation spent ~10 ms so).
_BYTE_24 = re.compile(
    r"^  (%[\w.$-]+) = getelementptr (?:inbounds )?i8, i8\* (%[\w.$-]+), i64 24$", re.M
)
_BITCAST_I8 = re.compile(r"^  (%[\w.$-]+) = bitcast i8\* (%[\w.$-]+) to [^\n]*$", re.M)
_LOAD_FROM = re.compile(r"= load ([^,\n]+), [^,\n]+\* (%[\w.$-]+)(?:,|$)", re.M)
_LOCAL_NAME = re.compile(r"%[\w.$-]+")


class _PointerUses:
    """In one function's text: per pointer, the values made from it at byte 24, the
    bitcasts of it, the types loaded through it; how often each local name occurs."""

    def __init__(self, body: str) -> None:
        self.at_24 = _by_source(_BYTE_24.findall(body))
        self.casts = _by_source(_BITCAST_I8.findall(body))
        self.loaded = _by_source(_LOAD_FROM.findall(body))
        self.occurrences: dict[str, int] = {}
        for name in _LOCAL_NAME.findall(body):
            self.occurrences[name] = self.occurrences.get(name, 0) + 1


def _by_source(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(made, source) pairs as source -> what was made from it, in order."""
    found: dict[str, list[str]] = {}
    for made, source in pairs:
        found.setdefault(source, []).append(made)
    return found


def _data_pointer_types(uses: _PointerUses, meminfo: str) -> list[str]:
    """The types the data pointer of the MemInfo ``meminfo`` is loaded as in the
    function of ``uses`` (its field at byte 24, read through a getelementptr and a
    bitcast); "?" where that field's address is used otherwise and never so loaded."""
    types: list[str] = []
    for gep in uses.at_24.get(meminfo, []):
        for cast in uses.casts.get(gep, []):
            types += uses.loaded.get(cast, [])
        # Used beyond its own definition.
        if uses.occurrences.get(gep, 0) > 1 and not types:
            types.append("?")
    return types


def _integer_allocations_inactive(ir: str) -> str:
    """Allocations of arrays whose elements are integers (their data pointer is only
    loaded as an integer pointer) through ``enzyme_py.inactive.<allocator>``, which
    Enzyme treats as inactive: no shadow, and integer stores into them allowed."""
    thunks: dict[str, str] = {}
    out = []
    pos = 0
    for fn in _DEFINE.finditer(ir):
        body = fn.group(0)
        changed = body
        uses: _PointerUses | None = None
        for m in _ALLOCATION.finditer(body):
            uses = uses or _PointerUses(body)
            types = _data_pointer_types(uses, m.group(1))
            if not types or not all(_INTEGER_POINTER.match(t.strip()) for t in types):
                continue
            name = m.group(2)
            declare = re.search(rf"^declare [^\n]*@{name}\(([^\n)]*)\)", ir, re.M)
            if declare is None:
                continue
            thunks[name] = declare.group(1)
            old = m.group(0)
            changed = changed.replace(
                old, old.replace(f"@{name}(", f"@enzyme_py.inactive.{name}("), 1
            )
        out.append(ir[pos : fn.start()] + changed)
        pos = fn.end()
    if not thunks:
        return ir
    out.append(ir[pos:])
    text = "".join(out)
    for name, params in thunks.items():
        if f"@enzyme_py.inactive.{name}(i64 %p0" not in text:
            text += _inactive_thunk(name, [t.strip() for t in params.split(",") if t.strip()])
    return text


_LIST_ALLOCATION = re.compile(
    r"call i8\* @NRT_MemInfo_new_varsize_dtor\(i64 ([^,\n]+), i8\* bitcast \(void \(i8\*\)\* "
    r"@(\"?)\.dtor\.list\.([^\n]*?)\2 to i8\*\)\)"
)
# What the type names of integer items are made of (int64, UniTuple(int64 x 2),
# Partition(int64 x 2), bool).
_INTEGER_ITEMS = re.compile(r"^(?:u?int\d+|bool|Partition|UniTuple|Tuple|x|\d+|[(), ])+$")
_GROWS_LIST = re.compile(r"call [^\n]*@NRT_MemInfo_varsize_(?:alloc|realloc|free)\(")


def _fixed_lists_as_arena_allocations(ir: str) -> str:
    """Lists that never grow allocated like arrays (see the module's docstring)."""
    if "@NRT_MemInfo_new_varsize_dtor(" not in ir or _GROWS_LIST.search(ir):
        return ir
    inactive = False

    def replace(m: re.Match[str]) -> str:
        nonlocal inactive
        if _INTEGER_ITEMS.match(m.group(3)):
            inactive = True
            return (
                f"call i8* @enzyme_py.inactive.NRT_MemInfo_alloc_aligned(i64 {m.group(1)}, i32 16)"
            )
        return f"call i8* @NRT_MemInfo_alloc_aligned(i64 {m.group(1)}, i32 16)"

    out = _LIST_ALLOCATION.sub(replace, ir)
    if (
        "@NRT_MemInfo_new_varsize_dtor("
        in out.split("declare i8* @NRT_MemInfo_new_varsize_dtor")[0]
    ):
        return ir  # a call of another form: left as it was (Enzyme's error names it)
    if not declares(out, "NRT_MemInfo_alloc_aligned"):
        out += "\ndeclare noalias i8* @NRT_MemInfo_alloc_aligned(i64, i32)\n"
    if inactive and "@enzyme_py.inactive.NRT_MemInfo_alloc_aligned(i64 %p0" not in out:
        out += _inactive_thunk("NRT_MemInfo_alloc_aligned", ["i64", "i32"])
    return out


# Numba's variable-size allocations (its lists' storage): made, grown, freed.
_LIST_STORAGE = (
    "NRT_MemInfo_new_varsize_dtor",
    "NRT_MemInfo_varsize_alloc",
    "NRT_MemInfo_varsize_realloc",
    "NRT_MemInfo_varsize_free",
)


def _growing_integer_lists_inactive(ir: str) -> str:
    """Lists that grow, where every list the module makes holds integers (the shape
    that ``a.sum(axis=0)`` and ``np.sum(a, axis=1)`` build with ``list.append``): their
    storage made, grown and freed through inactive thunks.
    Integers carry no derivative; Enzyme, which knows no derivative of the runtime's
    reallocation, refused every axis reduction ("No augmented forward pass found for
    NRT_MemInfo_new_varsize_dtor"). Left as they are where some list holds other items
    or some other variable-size allocation is made."""
    if "@NRT_MemInfo_new_varsize_dtor(" not in ir or not _GROWS_LIST.search(ir):
        return ir
    made = re.findall(r"^[^\n;]*call [^\n]*@NRT_MemInfo_new_varsize_dtor\(", ir, re.M)
    lists = _LIST_ALLOCATION.findall(ir)
    if len(lists) != len(made) or not all(_INTEGER_ITEMS.match(items) for _, _, items in lists):
        return ir
    if re.search(r"@NRT_MemInfo_new_varsize\(", ir):
        return ir
    return _calls_through_inactive_thunks(ir, _LIST_STORAGE)


def _inactive_definition(thunk: str, ret: str, params: str, call: str) -> str:
    """An inactive function ``thunk`` (never inlined) of ``params`` returning what the
    instruction ``call`` over them returns (type ``ret``)."""
    body = f"  {call}\n  ret void" if ret == "void" else f"  %r = {call}\n  ret {ret} %r"
    return (
        f"\ndefine internal {ret} @{thunk}({params}) noinline nofree "
        f'"enzyme_inactive" {{\n{body}\n}}\n'
    )


def _inactive_thunk(name: str, types: list[str], ret: str = "i8*") -> str:
    """enzyme_py.inactive.<name>: an inactive thunk of ``name`` (parameter ``types``,
    result ``ret``)."""
    formal = ", ".join(f"{t} %p{i}" for i, t in enumerate(types))
    return _inactive_definition(
        f"enzyme_py.inactive.{name}", ret, formal, f"call {ret} @{name}({formal})"
    )


def _random_state_inactive(ir: str) -> str:
    """Calls of Numba's random number generators (RANDOM_STATE) through inactive
    thunks of their types: the draws are constants to the derivative, as the samples
    of a Monte Carlo estimate are (marking the declarations inactive is not enough:
    Enzyme still asks a rule of the state pointer they return). A derivative call
    draws as one call of the function does, and its reverse pass uses the draws of
    its own forward pass (Enzyme caches them: the generator's state changes)."""
    return _calls_through_inactive_thunks(ir, RANDOM_STATE)


def _calls_through_inactive_thunks(ir: str, names: Iterable[str]) -> str:
    """Every call of each of ``names`` that ``ir`` declares made through an inactive
    thunk of its type (``enzyme_py.inactive.<name>``)."""
    for name in names:
        if f"@{name}(" not in ir:  # no whole-module scan for it (see _ir_lines)
            continue
        declared = re.search(rf"^declare (.*?)@{name}\((.*)\)[^\n()]*$", ir, re.MULTILINE)
        if declared is None:
            continue
        ret = declared.group(1).replace("noalias ", "").strip()
        types = [_type_of(a.strip()) for a in _split_arguments(declared.group(2)) if a.strip()]
        ir = re.sub(rf"(call [^\n]*?)@{name}\(", rf"\1@enzyme_py.inactive.{name}(", ir)
        ir += _inactive_thunk(name, types, ret)
    return ir


def reinterprets_memory(func: object, depth: int = 4) -> bool:
    """Whether ``func`` or an @njit function it names may reinterpret an array's
    memory (``a.view(np.float64)``): floats stored through such a view into an
    integer array's memory must keep a derivative, so integer allocations then stay
    as they are (and Enzyme's "Mismatched activity" refusal)."""
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    names = set(code.co_names)
    if names & {"view", "frombuffer", "ndarray", "carray", "farray"}:
        return True
    if depth == 0:
        return False
    glob = getattr(func, "__globals__", {})
    for name in names:
        inner = getattr(glob.get(name), "py_func", None)
        if inner is not None and inner is not func and reinterprets_memory(inner, depth - 1):
            return True
    return False


_FLOAT_TO_BYTES = re.compile(r"^  (%[\w.$-]+) = bitcast (double|float)\* %[\w.$-]+ to i8\*$", re.M)
_MEMORY_INTRINSIC = re.compile(
    r"^  (?:tail )?call void @llvm\.mem(?:set|cpy|move)\.p0i8(?:\.p0i8)?\.i64\(([^\n]*)\)[^\n]*$",
    re.M,
)
# Enzyme's type mark of each element type, and the bytes of one element.
_TYPE_MARKS = {"double": ("__enzyme_double", 8), "float": ("__enzyme_float", 4)}


def _typed_memory_intrinsics(ir: str) -> str:
    """Each memset, memcpy and memmove of memory Numba's code addresses as doubles
    (floats), its pointer a bitcast of a ``double*`` (``float*``), preceded by Enzyme's
    type mark for that pointer's first element (``__enzyme_double(p, 8)``: the mark
    takes a constant size, and one element is enough for the call's type; the engine
    erases the marks after Enzyme). Its type analysis could not tell what such a call
    moves where the function making the array reads it nowhere itself:
    ``np.zeros_like(x)``'s helper, its result only scattered into (``out[idx[i]] +=
    ...``) and summed through an array expression ("Cannot deduce type of memset");
    a graph Laplacian's smoothing steps (``nv = v.copy()``, scatters along edges)."""
    used: set[str] = set()

    def in_function(fn: re.Match[str]) -> str:
        body = fn.group(0)
        floats = dict(_FLOAT_TO_BYTES.findall(body))
        if not floats:
            return body

        def marked(m: re.Match[str]) -> str:
            pointers = [p for p in re.findall(r"(%[\w.$-]+)", m.group(1)) if p in floats]
            if not pointers:
                return m.group(0)
            marks = []
            for pointer in dict.fromkeys(pointers):
                mark, size = _TYPE_MARKS[floats[pointer]]
                used.add(mark)
                marks.append(f"  call void @{mark}(i8* {pointer}, i64 {size})\n")
            return "".join(marks) + m.group(0)

        return _MEMORY_INTRINSIC.sub(marked, body)

    ir = _DEFINE.sub(in_function, ir)
    for mark in sorted(used):
        if not declares(ir, mark):
            ir += f"\n{type_mark_declaration(mark)}\n"
    return ir


def prepare(ir: str, integer_arrays_inactive: bool = True) -> str:
    """Numba's IR with its runtime helpers made differentiable where they carry no
    derivative (see the module's docstring)."""
    ir = _typed_memory_intrinsics(_typed_header_zeroing(ir))
    ir = with_gamma_rules(_allocations_as_malloc(ir))
    ir = _random_state_inactive(ir)
    if integer_arrays_inactive:
        ir = _fixed_lists_as_arena_allocations(ir)
        ir = _integer_allocations_inactive(_growing_integer_lists_inactive(ir))
    called = _called_runtime(ir)
    for name in SHAPE_ONLY:
        if name in called:
            ir = mark_inactive(ir, name)
    python = {n for n in called if n.startswith(("Py", "_Py")) or n in SINKS}
    # print() needs Numba's environment object, which enzyme_py's copy of the code
    # lacks (its error path would keep the GIL): still refused (_build_errors.py says so).
    prints = any(n.startswith("PySys_") for n in python)
    if python and python <= set(SINKS) and not prints:
        ir = _without_variadic_calls(ir, python)
        for name in sorted(python):
            ir = mark_inactive(ir, name)
    return ir
