// Device code for NVIDIA GPUs: a module's kernel compiled to PTX with LLVM 15's
// NVPTX backend, math calls routed to libdevice.
#pragma once

#include <string>
#include <vector>

#include <llvm-c/Core.h>

namespace enzyme_py {

// PTX for `kernel` of the module in `ir_text` (host IR is retargeted: triple,
// data layout, host CPU attributes removed). `kernel` is marked as a kernel
// entry; everything else is internalised. Math functions and intrinsics LLVM
// cannot lower for NVPTX become calls to libdevice's __nv_* functions, linked
// from `libdevice_path` (empty: none linked). Throws std::runtime_error.
std::string emit_ptx(LLVMContextRef ctx, const std::string &ir_text, const std::string &kernel,
                     const std::string &libdevice_path, const std::string &cpu);

// For each parameter of `function` in the module `ir_text`: whether the function
// provably does not write through it (LLVM's readonly/readnone, inferred by
// function-attrs). A launch need not copy such an array back from the device.
// Unknown callees make a parameter writable. Throws std::runtime_error.
std::vector<bool> read_only_params(LLVMContextRef ctx, const std::string &ir_text,
                                   const std::string &function);

}  // namespace enzyme_py
