// enzyme_py._native's functions for kernels and devices: what a kernel body reads
// and writes (kernel_ir.h), PTX for GPUs (ptx.h) and liboffload's devices, memory and
// launches (offload.h). module.cpp registers them next to the engine's own.
#pragma once

#include <pybind11/pybind11.h>

#include <llvm-c/Core.h>

#include <functional>

namespace enzyme_py {

// `context` gives the engine's LLVM context (it exists only after `load`).
void register_device_code(pybind11::module_ &m, std::function<LLVMContextRef()> context);

}  // namespace enzyme_py
