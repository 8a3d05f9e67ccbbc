// enzyme_py._native: the Python face of the C++ core, registered by concern
// (register.h): the engine, IR modules, builds, calls of entry points, the fast
// caller (caller.h), kernels and devices (register_device_code.h). Its Python
// interface is typed in python/enzyme_py/_native.pyi.
//
// Ownership: one Engine per process (created by `load`), Module objects owned by
// Python, compiled derivatives owned by the JIT for the process.
#include <pybind11/pybind11.h>

#include "caller.h"
#include "register.h"
#include "register_device_code.h"
#include "reverse_call.h"

namespace py = pybind11;
using namespace enzyme_py;

PYBIND11_MODULE(_native, m) {
  m.doc() = "enzyme_py's C++ core: Enzyme in-process, LLVM 15, ORC JIT, liboffload";
  register_engine(m);
  register_module(m);
  register_build(m);
  register_calls(m);
  register_caller(m);
  register_reverse_call(m);
  register_device_code(m, [] { return the_engine().context(); });
}
