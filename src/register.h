// enzyme_py._native is registered by concern, one function each, called in this
// order by module.cpp (the fast caller's register_caller is in caller.h, the helpers'
// register_reverse_call in reverse_call.h, kernels' and devices' register_device_code
// in register_device_code.h). The Python interface they make is typed in
// python/enzyme_py/_native.pyi.
#pragma once

#include <pybind11/pybind11.h>

#include "engine.h"

namespace enzyme_py {

// The process's engine (created by `load`); throws if `load` was not called.
Engine &the_engine();

// The engine: versions, exceptions, `load`, the plugin, the host, symbols, Enzyme's
// own pass, type trees (register_engine.cpp).
void register_engine(pybind11::module_ &m);
// `Module`: LLVM IR modules given by frontends, their rules and rewrites
// (register_module.cpp).
void register_module(pybind11::module_ &m);
// `BuildRequest`, `build`, `BuildArtifact`, loading object code into the JIT
// (register_build.cpp).
void register_build(pybind11::module_ &m);
// Calling entry points: the arena and Enzyme's tape, `invoke`, split mode's
// `SplitTape` (register_calls.cpp).
void register_calls(pybind11::module_ &m);

}  // namespace enzyme_py
