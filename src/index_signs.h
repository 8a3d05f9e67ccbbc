// Sign tests of array indices that can never be negative, folded.
//
// Numba follows Python's indexing: `a[i]` with a signed i reads a[i + n] where i < 0
// (a compare and a select per access), unless it knows i >= 0, which it rarely
// does. In a nest such as GMM's `for r in range(j + 1, d): qxc[r] += icf[c, idx] *
// xc[j]; idx += 1`, LLVM cannot prove r or idx non-negative either, and Enzyme copies
// each test into the forward and reverse passes: the GMM gradient spent 18% of its
// time on them.
//
// The pass proves a value non-negative by rules that hold at every step of every run,
// and folds the sign tests (`icmp slt X, 0` -> false, and its other spellings):
// - constants >= 0; arguments asserted `>= 0` by an llvm.assume in the entry block
//   that every run meets (the Numba wrapper asserts every array shape it passes, as
//   every NumPy shape is, and the Numba function it calls the same of those
//   parameters); instructions ValueTracking knows to be;
// - operations that keep non-negative operands non-negative: add/mul nsw (an overflow
//   is poison, which the fold may refine), select, zext, udiv, urem, srem, sdiv, and,
//   or, lshr, ashr, smin/smax/umin/umax;
// - a phi whose incoming values all are, the phi itself assumed while proving them
//   (induction over the run: a cycle of such operations started from non-negative
//   values stays non-negative), computed as a greatest fixed point;
// - a loop counter P = phi [S, P + 1] whose loop leaves where P + 1 == E (its only
//   latch, E invariant in the loop) and is entered only where S < E (a dominating
//   branch on `S < E` or `E - S >= 1`, the form LLVM gives Numba's `range(S, E)`),
//   with S and E non-negative: P runs over S .. E - 1.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>

namespace enzyme_py {

// Where a function's entry block assumes `x >= 0` of a value x it passes, after that
// assume, to a function defined in `mod` and called from there only, that function's
// entry assumes it of its parameter too (Numba's wrapper asserts the shapes it passes
// to Numba's code).
void assume_signs_in_callees(llvm::Module &mod);

// For each (a, p) of `pairs`: where every call of `callee` passes, as its argument a, a
// value the rules above prove non-negative in the caller, `function`'s entry assumes
// its parameter p >= 0. For a function that receives, at each of its runs, what one
// call of `callee` passed (a prange launch's body, given the launch's arguments
// through int64 slots). `stand_ins`: functions that stand for a call of `callee`
// (Enzyme's rules for it, run in its place with its arguments); their calls of
// `callee` count where they pass on, as argument a, the parameter that received the
// argument a of the call they stand for: their a-th, or their 2a-th where each
// argument is followed by its shadow (twice as many parameters as `callee`). Nothing
// where `callee` is used other than by direct calls. Returns how many assumes it added.
int assume_signs_of_calls(llvm::Module &mod, const std::string &callee,
                          const std::string &function,
                          const std::vector<std::pair<unsigned, unsigned>> &pairs,
                          const std::vector<std::string> &stand_ins);

struct FoldIndexSigns : llvm::PassInfoMixin<FoldIndexSigns> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kFoldIndexSigns = "enzyme-py-fold-index-signs";

}  // namespace enzyme_py
