// The fused loops of reverse stencils (scatter_fusion.h) on enzyme_py's CPU threads.
//
// A fused loop writes, at each iteration, one entry of one shadow that no other
// iteration touches, from memory the loop does not write (scatter_fusion.h: else the
// untouched loop runs), so its iterations can run in any order and on any thread,
// each entry computed from the same terms in the same order: the same bits on any
// number of threads. Serial Rosenbrock's gradient is that one loop over the gradient
// (10^6 doubles: 8 MB written, 8 MB read), which one core streams at what its share of
// the memory system gives; JAX's jit(grad) ran it on both cores of the 2-core machine.
//
// The pass copies each fused loop into a function of its own that runs the iterations
// [first, last] it is given (the carried loads of the first one computed again
// there); where the loop's count reaches two shares of kFusedGrain (parfor_runner.h), a
// call of
// __enzyme_py_fused_run(chunk, slots, count, workers) runs them instead: contiguous
// shares on up to `workers` threads of the pool; shorter loops (heat's 1000 cells,
// once per time step) run in place as before. `workers` is what set_fused_workers put
// in the module, else 0 (one per core); where that is 1 (the derivative was asked for
// one thread) the pass leaves the loops alone.
//
// A function pass, named in the derivative pipeline (_pipeline.py) as
// kThreadFusedLoops, right after kSinkShadowZeroing (which finds the fused loop as
// scatter_fusion.h wrote it) and before loop-load elimination and load PRE; the new
// function gets the function passes that follow, the vectorisers among them.
#pragma once

#include <cstdint>

#include <llvm-c/Core.h>
#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct ThreadFusedLoops : llvm::PassInfoMixin<ThreadFusedLoops> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kThreadFusedLoops = "enzyme-py-thread-fused-loops";
// The metadata kind scatter_fusion.h puts on a fused loop's latch branch.
inline constexpr const char *kFusedLoopMark = "enzyme_py.fused";
// ... and on the stores of zeros it makes in that loop (the rest of the loop it
// fused, scatter_fusion.h): each zeroes what other iterations read, so the loop on
// threads leaves them out and they run after it, in a loop of their own.
inline constexpr const char *kFusedZeroMark = "enzyme_py.fused.zero";
// The module's named metadata that set_fused_workers writes.
inline constexpr const char *kFusedWorkers = "enzyme_py.fused_workers";

// The most threads the fused loops of `mod` may run on, for the pass to find.
void set_fused_workers(LLVMModuleRef mod, int64_t workers);
// The runtime function a threaded fused loop calls (parfor_runner.h).
inline constexpr const char *kFusedRun = "__enzyme_py_fused_run";

}  // namespace enzyme_py
