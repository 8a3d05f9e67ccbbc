// Kernel IR helpers and the analyses launches use: what a kernel writes, and
// where each index reaches into an array.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "llvm_util.h"  // ModuleOwner

namespace enzyme_py {

// Parses `ir_text` into `owner`; throws std::runtime_error with LLVM's message.
void parse_kernel(LLVMContextRef ctx, const std::string &ir_text, ModuleOwner &owner);

// The function `name` of `mod`, which has a body; throws std::runtime_error otherwise.
LLVMValueRef defined_function(LLVMModuleRef mod, const std::string &name);

// `mod` with the bodies of the functions that none of `roots` reaches through direct
// calls deleted (declarations now, of external linkage; an aliased function keeps
// its body), the roots made external. What function passes make of the roots, and
// what LLVM infers of them, is the same without those bodies, at a fraction of the
// cost.
void keep_reached(LLVMModuleRef mod, const std::vector<LLVMValueRef> &roots);

// In place: readonly, readnone and writeonly dropped from the parameters of every
// definition, for LLVM to infer them again from the bodies (Enzyme's derivatives and
// augmented copies carry those of the functions they were made from).
void drop_param_memory_attributes(LLVMModuleRef mod);

// In place: each (name, value) of `flags`, an i1 variable of `mod`, made an internal
// constant of that value. Throws std::runtime_error where one is not such a variable.
void settle_flags(LLVMModuleRef mod, const std::vector<std::pair<std::string, bool>> &flags);

// Runs the pass pipeline `passes`; throws std::runtime_error saying `what` failed.
void run_passes(LLVMModuleRef mod, const char *passes, LLVMTargetMachineRef machine,
                const char *what);

// For each parameter of `function` in the module `ir_text`: whether the function
// provably does not write through it (LLVM's readonly/readnone, inferred by
// function-attrs). A launch need not copy such an array back from the device.
// Unknown callees make a parameter writable. Throws std::runtime_error.
std::vector<bool> read_only_params(LLVMContextRef ctx, const std::string &ir_text,
                                   const std::string &function);
// The same of `function` in `mod`, which it changes (the bodies of functions that
// `function` does not reach through direct calls deleted first: they cannot change
// the answer, and inferring them took most of the time on a prange derivative's
// module). `mod` is a copy of the caller's.
std::vector<bool> read_only_params(LLVMModuleRef mod, const std::string &function);

// How far apart two indices of `function` (its parameter `index`, never
// negative) may be and still touch the same byte of each parameter in `params`:
// r when index i touches only bytes stride * i + [low, high] of it, with one
// stride for all of its accesses (r = (high - low) / stride; 0 if untouched);
// nullopt when some access is not of that form (every index the same address,
// a computed address, a pointer passed on or stored). Indices further apart
// than r can run on different threads without atomics. `constants` holds
// integer parameters at the values a launch passes (array shapes: they make a
// row's address linear in the index). Throws std::runtime_error.
std::vector<std::optional<int64_t>> index_reach(
    LLVMContextRef ctx, const std::string &ir_text, const std::string &function, unsigned index,
    const std::vector<unsigned> &params,
    const std::vector<std::pair<unsigned, int64_t>> &constants);

// index_reach of several functions of one module, parsed and simplified once.
struct ReachQuery {
  std::string function;
  unsigned index = 0;
  std::vector<unsigned> params;
  std::vector<std::pair<unsigned, int64_t>> constants;
};
std::vector<std::vector<std::optional<int64_t>>> index_reaches(
    LLVMContextRef ctx, const std::string &ir_text, const std::vector<ReachQuery> &queries);

}  // namespace enzyme_py
