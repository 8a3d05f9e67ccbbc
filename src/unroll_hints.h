// Vectorised loops, loops that make calls, and the loops around them, are not unrolled
// (again) by a run-time count.
//
// The derivative's second pipeline (_pipeline.py) unrolls loops by a run-time count
// after its loop vectoriser, as LLVM's default<O2> does. These loops meet it:
// - loops left scalar: above all sums the code does not let LLVM reorder, which the
//   vectoriser refuses (GMM's `sq += qxc[j] * qxc[j]` over d = 10, its log-sum-exp
//   over k = 25 components, per sample and component): unrolled, their loop
//   overhead shrinks, and GMM's gradient is 4-6% faster than without;
// - the vectoriser's own loops (a vector body, 4 or 8 lanes, often interleaved): the
//   vectoriser already sized them for the CPU, and unrolling them again made none of
//   the suite's derivatives faster (heat, Rosenbrock, GMM: A/B in one process) but
//   made heat's module 60% larger (1716 lines of IR, 1064 with this pass): about
//   20 ms of its first call's optimisation and code generation (117 -> 99 ms).
// - loops holding such a loop: LLVM unrolls an outer loop by a run-time count where
//   the CPU's scheduling model allows a large loop body (LLVM 15's znver3, as it names
//   a Zen 4 host), each copy with the inner vector loop's run-time checks and
//   remainders. The reverse of ADBench's C++ GMM (a triangular loop nest per sample)
//   unrolled its loop over rows by 4 there: some 30 induction pointers, spilled and
//   updated on the stack at every row; its gradient 50-56 -> 28 ms on a 2-core AMD
//   EPYC (21.7 ms on the icelake-client VM before, where that loop stayed rolled).
// - loops that call a function, a libm one behind an LLVM intrinsic included (exp,
//   log, pow, sin, cos: LLVM's unroller counts them as instructions): each copy is
//   the call again, whose latency the CPU overlaps across iterations either way. GMM
//   prange's serial code around the prange loop (exp over k x d entries, forward
//   and reverse) unrolled by 8, and its loop over components by 4 around that: 120
//   scalar calls of exp in its entry function. Kept rolled, that function is 2441
//   lines of IR instead of 3395, the reverse chunk's 3218 instead of 3575: its first
//   derivative's optimisation 320-351 -> 292-299 ms, code generation 256-278 ->
//   221-226 ms (2-core AMD EPYC, three alternated runs); its gradient, serial GMM's
//   and ADBench's unchanged.
// So loops the vectoriser made or visited (`llvm.loop.isvectorized`), loops that make
// calls, and loops around either get `llvm.loop.unroll.runtime.disable`; the others
// are unrolled as before. The vectoriser already marks most of its scalar remainders
// so (those without run-time checks). A function pass, kKeepVectorLoopsRolled, right
// before the second pipeline's loop-unroll.
#pragma once

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct KeepVectorLoopsRolled : llvm::PassInfoMixin<KeepVectorLoopsRolled> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kKeepVectorLoopsRolled = "enzyme-py-keep-vector-loops-rolled";

}  // namespace enzyme_py
