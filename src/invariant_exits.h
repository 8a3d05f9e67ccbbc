// Loop exits on loop-invariant conditions, taken before the loop instead.
//
// Numba checks the size of each np.empty where it runs: `d * 8` overflowing raises
// "array is too big". Inside a loop (a temporary per iteration: GMM's prange body
// over samples), the check is a second exit of the loop. LLVM's unswitching moves
// such a check before the loop only where nothing with side effects comes before
// it in the iteration, and an earlier temporary's allocation does. Enzyme cannot
// count the iterations of a loop with two exits: it grows every cache of that loop
// by realloc, copying them as they grow (GMM prange on one thread: 13% of its
// gradient's time in memmove).
//
// The pass takes, in each loop, the first conditional branch of an iteration (in
// the header, or in a block after it that only the block before it enters), where
// its condition is computed outside the loop, one successor leaves the loop, and
// everything the iteration does before it is free of side effects but for
// allocating temporaries (Numba's allocators; nothing else reads them then). Those
// blocks run first in every iteration, the first included: the loop leaves there in
// its first iteration if the condition holds, and never there if it does not. So the
// branch moves to the end of the preheader, with the exit's phis given the values
// they had from the first iteration, and the iteration goes on unconditionally. What
// is skipped on the way out is only the allocation of the first iteration's
// temporaries. Repeated while some loop so starts (several temporaries).
#pragma once

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct HoistInvariantExits : llvm::PassInfoMixin<HoistInvariantExits> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kHoistInvariantExits = "enzyme-py-hoist-invariant-exits";

}  // namespace enzyme_py
