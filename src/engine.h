// The differentiation engine: one LLVM context, the Enzyme logic that lives
// in it, and the host JIT that runs what Enzyme makes. What it is given and what
// it makes: SourceModule (source_module.h), DerivativeRequest, Artifact; how:
// error capture (enzyme_hooks.h), type trees (type_trees.h), the entry point
// (entry_abi.h), isolated builds (isolation.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "enzyme_capi.h"
#include "shadow_zeroing.h"
#include "jit.h"
#include "llvm_util.h"
#include "source_module.h"

namespace enzyme_py {

// An error Enzyme reported while building a derivative (CustomErrorHandler or
// an LLVM error diagnostic). Carries Enzyme's own words.
struct EnzymeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The isolated build child died of an assertion or a crash (SIGABRT, SIGSEGV,
// SIGBUS, SIGILL, SIGFPE): worth one retry with min-cut caching off. Deaths
// from memory (SIGKILL, std::bad_alloc) are plain EnzymeFailures, never retried.
struct BuildCrashed : EnzymeFailure {
  using EnzymeFailure::EnzymeFailure;
};

// The caller was interrupted (a signal whose Python handler raised) while
// the isolated build ran: the child is killed and reaped.
struct BuildInterrupted : std::runtime_error {
  BuildInterrupted() : std::runtime_error("build interrupted") {}
};

// One derivative asked of Enzyme (Python: _native.BuildRequest, made by _build.py).
// Its entry point follows the calling convention of entry_abi.h.
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
  // Reverse mode: accumulate into shadows with atomic adds (kernels run the
  // derivative of one index on many threads at once).
  bool atomic_add = false;
  // The most threads a fused reverse stencil loop runs on (fused_threads.h); 0: one
  // per core.
  int64_t fused_workers = 0;
  // No differentiation: compile the function itself (kernel launchers).
  bool primal_only = false;
  // Enzyme's min-cut caching (smaller tapes). Only honoured by build_isolated:
  // it can abort, so it is never turned on in the caller's process.
  bool mincut = false;
  // Split reverse mode (not forward): 1 the augmented forward pass, returning
  // {tape (i8*), primal if return_primal}; 2 its reverse pass, taking the
  // combined derivative's parameters then the tape, returning the adjoints of
  // Active parameters. Both halves are built from the same augmentation (Enzyme
  // makes it alike each time), so one's tape fits the other.
  int split = 0;
  // Combined reverse mode, width 1: shadows the derivative zeroes itself, the caller
  // passing them uninitialised (src/shadow_zeroing.h). Positions are the function's
  // parameters: each names a Duplicated pointer and the parameters sizing it.
  std::vector<ZeroedShadow> zeroed;
};

// What building one derivative produces: object code whose entry point is the
// one symbol callers use (a bundle's parts, split_codegen.h, also export their
// internal functions under names made unique with it; split_build.h's parts, the
// functions they share), plus what the Python side needs to call it.
// Changes whenever what the engine generates for the same request does (IR
// rewrites, pipelines): part of the derivative caches' keys.
constexpr int kCodegenRevision = 11;

struct Artifact {
  std::string object;      // host object code: one object, or a bundle
  std::string entry_name;  // its entry point's symbol
  std::string in_slots;    // codes of the entry's input slots, in order
  std::string out_slots;   // codes of the slots the entry writes after them
  std::string enzyme_ir;   // the derivative function as Enzyme made it
  std::string derivative_module;  // the whole module after Enzyme, before the
                                  // entry point: input for higher-order AD
  std::string optimized_ir;       // the final module
  // build_isolated: the build had finished when an interrupt arrived; the
  // caller keeps the result, then reports the interrupt.
  bool interrupted = false;
};

class Engine {
 public:
  explicit Engine(const std::string &plugin_path);
  ~Engine();

  LLVMContextRef context() const { return ctx_; }
  const HostJit &jit() const { return *jit_; }
  HostJit &jit() { return *jit_; }

  // Ask Enzyme for the derivative and compile it, in this process (from a copy of
  // the source module).
  Artifact build(const SourceModule &source, const DerivativeRequest &request,
                 const std::string &entry_name);
  // The same in a forked child, so that an abort inside Enzyme (its
  // assertions are enabled) becomes an EnzymeFailure instead of killing
  // the caller. Nothing the child does changes this process.
  // While it waits, `interrupted` is polled (every ~10 ms); when it returns
  // true, the child is killed and BuildInterrupted thrown (unless the child
  // had finished: then the result comes back marked `interrupted`). What
  // `while_waiting` returns is held during each pause between polls (the
  // binding releases the GIL so, letting a progress timer and other threads
  // run; `interrupted` is called with it held again).
  Artifact build_isolated(const SourceModule &source, const DerivativeRequest &request,
                          const std::string &entry_name,
                          const std::function<bool()> &interrupted = {},
                          const std::function<std::shared_ptr<void>()> &while_waiting = {});
  // Load an artifact's object code into the JIT; the entry's address.
  uint64_t load(const std::string &object, const std::string &entry_name);
  void set_mincut(bool on);

 private:
  // build's work on `work`'s module, which it changes (and replaces: it owns what
  // `work` holds afterwards).
  Artifact build_from(ModuleOwner &work, const DerivativeRequest &request,
                      const std::string &entry_name);

  LLVMContextRef ctx_ = nullptr;
  std::unique_ptr<HostJit> jit_;
};

}  // namespace enzyme_py
