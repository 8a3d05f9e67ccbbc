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

}  // namespace enzyme_py
