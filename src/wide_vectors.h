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
// Measured so, alternating processes on the 2-core icelake-client VM: heat's gradient
// (1000 cells x 1000 steps) 476-511 -> 318-349 us, its primal 143-162 us; the Numba
// GMM gradient 29.1 -> 30.1 ms (median of four pairs, each pair's spread larger), the
// C++ GMM 23.6-24.5 -> 24.0-25.4 ms and BA 13.9-14.4 -> 14.2-14.6 ms (three pairs
// each: GMM's loops over d = 10 entries, which the hint also widens, are too short to
// gain), HAND, LSTM and Rosenbrock unchanged.
//
// A function pass, named in the derivative pipeline (_pipeline.py) before each loop
// vectoriser; it changes nothing where the host does not qualify (`wide_vectors_pay`).
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
// keeps its clock with it: Ice Lake and later Intel cores. ENZYME_PY_WIDE_VECTORS=0
// says no anywhere, =1 yes on any x86 host (code generation splits 512-bit vectors
// where the CPU lacks AVX-512: slower, never wrong).
bool wide_vectors_pay(const std::string &cpu, const std::string &features);

}  // namespace enzyme_py
