// The differentiation engine: one LLVM context, the Enzyme logic that lives
// in it, and the host JIT that runs what Enzyme makes.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <llvm-c/Core.h>

#include "enzyme_capi.h"
#include "jit.h"

namespace enzyme_py {

// An error Enzyme reported while building a derivative (CustomErrorHandler or
// an LLVM error diagnostic). Carries Enzyme's own words.
struct EnzymeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An LLVM IR module given by a frontend; derivatives are built on clones.
class SourceModule {
 public:
  SourceModule(LLVMContextRef ctx, const std::string &ir_text);
  ~SourceModule();
  SourceModule(const SourceModule &) = delete;
  SourceModule &operator=(const SourceModule &) = delete;

  LLVMModuleRef get() const { return mod_; }
  std::string ir() const;

 private:
  LLVMModuleRef mod_ = nullptr;
};

// Slot kinds of the uniform entry point `void entry(uint64_t *slots)`: each
// scalar value (or pointer) occupies one 8-byte slot, aggregates are flattened.
// Codes: 'd' double, 'f' float, 'q' i64, 'i' i32, 'h' i16, 'b' i8, '?' i1, 'p' pointer.
struct DerivativeRequest {
  std::string function;
  bool forward = false;                      // else combined reverse
  std::vector<capi::CDIFFE_TYPE> args;       // one per parameter
  capi::CDIFFE_TYPE ret = capi::DFT_CONSTANT;
  bool return_primal = true;
  unsigned width = 1;
  std::vector<capi::CConcreteType> pointee;  // per parameter; DT_Unknown if not a pointer
  bool runtime_activity = false;
  bool strong_zero = false;
  std::string passes = "default<O2>";
};

struct CompiledDerivative {
  uint64_t entry = 0;
  std::string in_slots;   // codes of the entry's input slots, in order
  std::string out_slots;  // codes of the slots the entry writes after them
  std::string enzyme_ir;  // the derivative as Enzyme made it, before optimization
  std::string optimized_ir;
};

class Engine {
 public:
  explicit Engine(const std::string &plugin_path);
  ~Engine();

  LLVMContextRef context() const { return ctx_; }
  const HostJit &jit() const { return *jit_; }
  CompiledDerivative differentiate(const SourceModule &source,
                                   const DerivativeRequest &request);

 private:
  LLVMContextRef ctx_ = nullptr;
  capi::EnzymeLogicRef logic_ = nullptr;
  std::unique_ptr<HostJit> jit_;
  uint64_t counter_ = 0;
};

}  // namespace enzyme_py
