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
// Made 512-bit everywhere (the whole function tuned for 512-bit vectors), the C++
// ADBench GMM gradient was 5-10% slower and the HAND Jacobian 20%: short loops over
// d = 10 or 3 entries, reductions and the SLP vectoriser's straight-line vectors
// gained nothing from wider ones. So only loops that stream are widened: innermost
// loops not known to run fewer than kFewestIterations times, of at most
// kMostInstructions instructions, with no reduction (a first-order recurrence, such
// as a stencil's carried neighbour, is not one), no calls but to a few arithmetic
// intrinsics and at least one floating-point store. Each gets the loop vectoriser's
// width hint (512 bits of the widest floating-point type it computes: 8 lanes for
// Numba's float32 stencils, whose arithmetic is in float64), and its function the `min-legal-vector-width` that lets code generation keep
// 512-bit vectors whole. The vectoriser still checks that vectorising is legal
// (dependences, run-time alias checks); only its width changes.
//
// Measured so (three alternated pairs of processes, 2-core icelake-client VM, a
// quiet phase): heat's gradient (1000 cells x 1000 steps) 448-451 -> 316-382 us, its
// primal 141-145 us; the Numba GMM gradient 24.6-26.0 -> 25.0-25.9 ms; GMM prange
// 12.1-12.3 -> 12.7-13.5 ms (its loops over d run the short copies: what remains is
// the checks before them, or code size).
//
// Before the first vectoriser, a loop whose count is known only at run time is
// versioned: the widened loop runs where it has at least kFewestIterations
// iterations, an untouched copy where it has fewer (GMM's loops over d = 10 entries
// run 256-bit code as before: GMM prange's gradient had been 4-10% slower, its
// loops widened as they were). Before the second, the loops the scatter pass made
// (a reverse stencil's fused gather and the loop zeroing what it consumed) are
// widened as they are: versioned too, heat's gradient lost most of its gain (372
// against 317 us).
//
// A function pass, named in the derivative pipeline (_pipeline.py) before each loop
// vectoriser; it changes nothing where the host does not qualify (`wide_vectors_pay`).
#pragma once

#include <string>

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct WidenStreamingLoops : llvm::PassInfoMixin<WidenStreamingLoops> {
  WidenStreamingLoops(bool enabled, bool before_scatter)
      : enabled(enabled), before_scatter(before_scatter) {}
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
  bool enabled;
  // Before the first loop vectoriser, which comes before the scatter pass
  // (scatter_adds.h): loops that add into memory they read are left to that pass (a
  // copy of one would be split and fused twice); its loops meet the second vectoriser,
  // and the instance before it.
  bool before_scatter;
};

inline constexpr const char *kWidenStreamingLoops = "enzyme-py-widen-streaming-loops";
inline constexpr const char *kWidenStreamingLoopsBeforeScatter =
    "enzyme-py-widen-streaming-loops-before-scatter";

// Whether the host (LLVM's name for its CPU, its feature string) has AVX-512 and
// keeps its clock with it: Ice Lake and later Intel cores. ENZYME_PY_WIDE_VECTORS=0
// says no anywhere, =1 yes on any x86 host (code generation splits 512-bit vectors
// where the CPU lacks AVX-512: slower, never wrong).
bool wide_vectors_pay(const std::string &cpu, const std::string &features);

}  // namespace enzyme_py
