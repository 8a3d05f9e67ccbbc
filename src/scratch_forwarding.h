// Loads from a scratch array that an earlier loop filled, computed again from what
// that loop stored.
//
// Numba code keeps per-iteration temporaries in arrays made once: GMM's
// `for j in range(d): xc[j] = x[i, j] - means[c, j]`, then loops that read xc[j].
// Enzyme caches every such load (xc is written again for the next component), d
// values per component per sample: GMM's tape held xc twice, 38 of its 79 MiB at
// n = 10^4. Where the value read is the one the earlier loop stored at the same
// iteration, computed from memory nothing writes in between, the load is replaced by
// that computation (x[i, j] - means[c, j] again), which Enzyme recomputes from the
// inputs instead of caching.
//
// A load L at iteration t of loop B becomes the value V that the store S wrote at
// iteration t of loop A when all of these hold:
// - B lies in A's parent loop, at any depth (anywhere, where A has none), and not in
//   A; A and B have canonical induction variables (0 by 1) of one type, with known
//   backedge-taken counts, B's A's or provably not greater at every run of B (a
//   triangular `for r in range(d): for j in range(r + 1): ... xc[j]` reads within
//   the d values filled); A is in simplified form (a dedicated exit block: reaching
//   it means A ran) and leaves only at its latch; its exit block is in that parent,
//   and every path of
//   an iteration of the parent (of the function) to L passes it: A has run to its end
//   before L, in the same iteration. Along a path, branches on one condition that
//   keeps its value through the iteration go the same way (Numba's loops are guarded
//   by `count != 0` tests that LLVM leaves apart, the fill's and the read loop's);
// - S runs at every iteration of A (its block dominates A's latch, in A and not in a
//   loop inside it) and writes p0 + t * size, size being the stored type's: each
//   iteration its own element; L, in B and not in a loop inside it, reads
//   p0 + t * size, the same type from the same p0;
// - nothing in the parent loop (in the function, where there is none) but S may write
//   the object S writes into;
// - V is computed, in at most kMaxSlice instructions of A and of its preheader (which
//   ran before A, in the same iteration), from A's induction variable (B's replaces
//   it), values that dominate L, and arithmetic, casts, addresses, compares, selects,
//   calls that touch no memory and loads of memory that nothing in the parent loop
//   (in the function) may write, S included.
//
// A function pass, kForwardScratchStores, run on Numba's code before Enzyme
// (simplify_for_enzyme, numba_rewrites.h), after the releases of temporaries are
// dropped (until then each release is a call that may write the temporary) and after
// LLVM's loop-simplify (simplifycfg merges a loop's exit block into the next loop's
// header). Not jump threading, which would make the paths plain but left Enzyme's type
// analysis a conflict in Numba's LAPACK loops (mvn_logpdf of the corpus).
#pragma once

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct ForwardScratchStores : llvm::PassInfoMixin<ForwardScratchStores> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kForwardScratchStores = "enzyme-py-forward-scratch-stores";

}  // namespace enzyme_py
