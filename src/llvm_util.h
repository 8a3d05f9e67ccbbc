// Small LLVM C API utilities shared by the engine, the module bindings, kernels and
// PTX: the one owner of a module, and LLVM objects printed to text.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <llvm-c/Core.h>

namespace enzyme_py {

// Owns a module (disposed with it) until `release` hands it on.
struct ModuleOwner {
  LLVMModuleRef mod = nullptr;
  ModuleOwner() = default;
  explicit ModuleOwner(LLVMModuleRef m) : mod(m) {}
  ModuleOwner(const ModuleOwner &) = delete;
  ModuleOwner &operator=(const ModuleOwner &) = delete;
  ~ModuleOwner() {
    if (mod) LLVMDisposeModule(mod);
  }
  // The module, no longer owned here (a linker or a SourceModule takes it).
  LLVMModuleRef release() {
    LLVMModuleRef m = mod;
    mod = nullptr;
    return m;
  }
};

// Text of a value, a whole module, a type (as LLVM prints them).
std::string print_value(LLVMValueRef value);
std::string print_module(LLVMModuleRef mod);
// What print_value prints of the function `name` of a module, cut from the module's
// text (`module_text`, print_module's) instead of printed again; "" if it is not there.
std::string function_text(const std::string &module_text, const std::string &name);
std::string print_type(LLVMTypeRef type);

// While it lives, the functions `names` of `mod` (those it defines) are optnone and
// noinline: the pass pipelines leave them as they are (their instrumentation skips
// optnone functions). What it added is taken away again, nothing else. For work that
// only some functions need (the prange launches' glue is not differentiated).
class FunctionsLeftAlone {
 public:
  FunctionsLeftAlone(LLVMModuleRef mod, const std::vector<std::string> &names);
  FunctionsLeftAlone(const FunctionsLeftAlone &) = delete;
  FunctionsLeftAlone &operator=(const FunctionsLeftAlone &) = delete;
  ~FunctionsLeftAlone();

 private:
  LLVMModuleRef mod_;
  std::vector<std::pair<std::string, unsigned>> added_;  // function, attribute kind
};

}  // namespace enzyme_py
