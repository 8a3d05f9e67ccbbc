// 512-bit vectors for a derivative's streaming loops, on AVX-512 hosts that LLVM
// tunes for 256-bit ones.
//
// LLVM 15 tunes every Intel core with AVX-512 for 256-bit vectors ("prefer-256-bit"),
// because on Skylake-SP and its Xeon successors 512-bit instructions lower the clock.
// On later cores (Ice Lake and after) loads, stores and light arithmetic on 512-bit
// vectors keep the clock, and a loop that streams through arrays, bound by its loads
// and stores, does half as many of them. Derivatives are such loops more than their
// primals are (a stencil's reverse reads the adjoint it gathers into, then zeroes the
// adjoint it consumed).
//
// Where to widen was measured (alternated processes, 2-core icelake-client VM):
// - whole functions tuned for 512-bit vectors: the C++ ADBench GMM gradient 5-10%
//   slower, the HAND Jacobian 20% (short loops over d = 10 or 3 entries, reductions,
//   the SLP vectoriser's straight-line vectors);
// - every streaming loop before each vectoriser (Numba's loops too): heat's gradient
//   448-451 -> 316-382 us, but GMM prange's 4-10% slower and the C++ GMM's 6% (its
//   loops over d = 10 widened; versioned by their count, 32 iterations or more wide,
//   the checks before them still cost GMM prange 3-5%);
// - the loops the scatter pass makes only (scatter_adds.h: a reverse stencil's fused
//   gather and the loop zeroing what it consumed), as here: heat 449-451 -> 375-388 us
//   in 9 of 11 fresh processes (446-456 us in two: their buffers' alignment, or the
//   VM), GMM prange 12.0-12.2 -> 12.1-12.2 ms, the ADBench objectives (C++ and Numba)
//   unchanged.
// So the pass runs before the second loop vectoriser only, where those loops meet a
// vectoriser first. There, loops that stream are widened: innermost loops not known
// to run fewer than kFewestIterations times, of at most kMostInstructions
// instructions, with no reduction (a first-order recurrence is not one), no calls but
// to a few arithmetic intrinsics and at least one floating-point store. Each gets the
// loop vectoriser's width hint (512 bits of the widest floating-point type it
// computes) and interleave count 1, and its function the `min-legal-vector-width`
// that lets code generation keep 512-bit vectors whole. The vectoriser still checks
// that vectorising is legal (dependences, run-time alias checks); only its width
// changes. It changes nothing where the host does not qualify (`wide_vectors_pay`).
#pragma once

#include <string>

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct WidenStreamingLoops : llvm::PassInfoMixin<WidenStreamingLoops> {
  explicit WidenStreamingLoops(bool enabled) : enabled(enabled) {}
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
  bool enabled;
};

inline constexpr const char *kWidenStreamingLoops = "enzyme-py-widen-streaming-loops";

// Whether the host (LLVM's name for its CPU, its feature string) has AVX-512 and
// keeps its clock with it: Ice Lake and later Intel cores, and AMD's Zen 4 (which LLVM
// 15 calls "znver3", a core without AVX-512, and gives its AVX-512 features).
// ENZYME_PY_WIDE_VECTORS=0 says no anywhere, =1 yes on any x86 host (code generation
// splits 512-bit vectors where the CPU lacks AVX-512: slower, never wrong).
bool wide_vectors_pay(const std::string &cpu, const std::string &features);

// The host's feature string as the JIT compiles for it: on an AVX-512 host, tuned for
// 256-bit vectors ("+prefer-256-bit"), as LLVM 15 tunes every Intel core with AVX-512,
// so that only the loops this pass picks get 512-bit ones. LLVM 15 does not tune a Zen
// 4 ("znver3" with AVX-512) so, and vectorised every loop at 512 bits there: whole
// functions at 512 bits were 5-20% slower on Ice Lake (ADBench's GMM and HAND above),
// and the width enzyme_py chose per loop was not the one that ran.
std::string tuned_features(const std::string &features);

}  // namespace enzyme_py
