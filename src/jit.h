// Code generation for the host and the in-process ORC JIT.
//
// Modules are optimized and compiled to object code here, and only object
// code enters the JIT: the same bytes can later be kept in a disk cache.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <llvm-c/LLJIT.h>
#include <llvm-c/TargetMachine.h>

#include "split_build.h"

namespace enzyme_py {

class HostJit {
 public:
  HostJit();
  ~HostJit();
  HostJit(const HostJit &) = delete;
  HostJit &operator=(const HostJit &) = delete;

  // Give `mod` the host triple and data layout (before optimizing it).
  void prepare(LLVMModuleRef mod) const;
  // Run the new pass manager pipeline `passes` (e.g. "default<O2>") on `mod`.
  // "FIRST|SECOND" runs two pipelines, the second with LLVM's store-to-load
  // forwarding heuristic off (llvm_options.h).
  void optimize(LLVMModuleRef mod, const std::string &passes) const;
  // Host object code for `mod`. Given `unique` (a name no other module's symbols
  // use: the entry's), a large module may be compiled in parts on several threads
  // and come back as a bundle of objects (split_codegen.h), which `load` takes;
  // `mod` then holds its first part only.
  std::string emit_object(LLVMModuleRef mod, const std::string &unique = "") const;
  // optimize, then `after` on the optimised module, then emit_object, for a module
  // whose entry is `entry` (a name no other module's symbols use). Where the module
  // falls apart into parts that never call each other (split_build.h), each part is
  // optimised and compiled on a thread of its own, `after` given the entry's part;
  // `mod` then holds that part only.
  BuiltParts optimize_and_emit(LLVMModuleRef mod, const std::string &passes,
                               const std::string &entry,
                               const std::function<void(LLVMModuleRef)> &after) const;
  // Make `name` resolve to `address` in code loaded later (e.g. Numba's
  // runtime functions, which live in extension modules loaded RTLD_LOCAL).
  // A name defined before keeps its first address.
  void define_symbol(const std::string &name, uint64_t address);
  // Load object code into the JIT and return the address of `symbol` in it. If
  // its symbols cannot all be resolved, it is unloaded again (so that a later
  // load of the same code fails the same way) and MissingSymbols is thrown.
  uint64_t load(const std::string &object, const std::string &symbol);
  // Remove the code `load` loaded for `symbol` from the JIT, releasing its memory
  // (nothing may call it afterwards); false if none is loaded under that name.
  bool unload(const std::string &symbol);
  // How many loaded objects the JIT holds.
  size_t loaded() const { return trackers_.size(); }

  const std::string &triple() const { return triple_; }
  const std::string &cpu() const { return cpu_; }
  const std::string &features() const { return features_; }
  // Whether loops may call glibc's vector math functions (libmvec).
  bool vector_math() const { return vector_math_; }
  // Whether streaming loops get 512-bit vectors (wide_vectors.h).
  bool wide_vectors() const { return wide_vectors_; }

 private:
  void run_pipeline(LLVMModuleRef mod, const std::string &passes,
                    LLVMTargetMachineRef machine) const;
  // The pipelines in order on `mod`, each with its LLVM options (`vector_calls`: the
  // module calls libm functions that have vector versions).
  void run_pipelines(LLVMModuleRef mod, const std::vector<std::string> &pipelines,
                     bool vector_calls) const;
  // Held while an LLVM option is changed for a pipeline (llvm_options.h).
  static std::mutex &options_mutex();
  LLVMOrcLLJITRef jit_ = nullptr;
  LLVMTargetRef target_ = nullptr;
  LLVMTargetMachineRef machine_ = nullptr;
  // A target machine as machine_, for a thread of its own (split_codegen.h).
  LLVMTargetMachineRef make_machine() const;
  std::string triple_, cpu_, features_, data_layout_;
  std::set<std::string> defined_;
  // The resource tracker of each loaded object, by its entry symbol (for unload).
  std::map<std::string, LLVMOrcResourceTrackerRef> trackers_;
  bool vector_math_ = false;
  bool wide_vectors_ = false;
  // What ORC reported while the last load ran (e.g. "Symbols not found: [ f ]"):
  // its lookup error alone names only the symbol that could not be materialized.
  std::mutex reported_lock_;
  std::string reported_;
  static void report(void *self, LLVMErrorRef err);
};

// The code loaded needs symbols nobody defines (`what` names them).
struct MissingSymbols : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws std::runtime_error with LLVM's message, consuming `err`.
void check(LLVMErrorRef err, const char *what);

}  // namespace enzyme_py
