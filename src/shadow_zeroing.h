// Shadows a reverse derivative zeroes itself, zeroed only where nothing writes them.
//
// ez.grad and the other helpers give a reverse derivative fresh shadows. Zeroed by
// NumPy before the call, the 8 MB shadow of serial Rosenbrock (n = 10^6) took ~55 us of
// its 255 us gradient, and the reverse loop then read every zero back to add to it.
// For a derivative asked to (the shadow of a C-contiguous float array: its byte size
// from the shape parameters of a Numba or Cython array, or a parameter of its own for
// a C pointer) the derivative zeroes the shadow itself, first thing (`zero_shadows_on_entry`: a memset marked !enzyme_py.zeroed_shadow, the
// parameter noalias as the caller's fresh array is), and the helpers pass np.empty.
//
// The pass `enzyme-py-sink-shadow-zeroing` then moves each marked memset to where
// what it zeroes is either written or needed, keeping pieces [a, b) of the shadow
// (byte offsets, SCEVs) still to be zeroed while it walks on from the memset:
// - an instruction that cannot touch the shadow (alias analysis) is passed;
// - a load from the shadow at an offset SCEV knows, of bytes proven apart from every
//   store passed so far, reads the memset's zeros: it is replaced by zero;
// - a store at an offset SCEV knows writes its bytes: every piece loses them;
// - a top-level innermost loop, entered from the block the walk is in, with one exit
//   (from its latch), that stores into the shadow once per iteration at {s,+,size} or
//   {s,+,-size} (the store's block dominates the latch) and loads the shadow only
//   there, before the store in the same block: it writes each byte of its span once,
//   its loads read zeros (where the span is proven apart from the stores passed), and
//   the walk goes on at its exit;
// - at a conditional branch the pieces go on along each successor; a block with
//   several predecessors is walked on from where the walk reached every one of them
//   with the same pieces (a branch that wrote nothing of the shadow, such as Cython's
//   error checks), else the pieces are zeroed on each edge into it;
// - anywhere else (a loop that does not fit, an access it cannot place, a return) the
//   pieces are zeroed there: memset(dest + a, 0, max(b - a, 0)) each.
// A call that may not return (Cython's error checks call into Python) is passed like
// any instruction: a derivative that does not return normally gives no gradient, and
// the helpers drop its shadows with the error.
// Pieces start as [0, len); a written span [lo, hi) splits each into [a, min(b, lo))
// and [max(a, hi), b). Whatever the order of the bounds at run time, every byte of
// [0, len) that no passed store wrote is zeroed, before anything reads it, and no
// memset reaches outside [0, len).
#pragma once

#include <vector>

#include <llvm-c/Core.h>
#include <llvm/IR/PassManager.h>

namespace enzyme_py {

// One shadow the derivative zeroes: the position of the shadow parameter, the
// positions of the parameters whose product is its element count, the element size.
// No such parameters (a C pointer): its byte size comes in a parameter of its own.
struct ZeroedShadow {
  unsigned shadow = 0;
  std::vector<unsigned> dims;
  unsigned itemsize = 0;
};

// Zeroes each shadow at the entry of `derivative` (see above) and marks its parameter
// noalias. A shadow without dims takes its byte size from an i64 parameter added after
// the derivative's own (in the order of `shadows`): the derivative is then replaced by
// one with those parameters, which is returned (else `derivative` itself). Throws
// std::invalid_argument for a position out of range or of the wrong type.
LLVMValueRef zero_shadows_on_entry(LLVMValueRef derivative,
                                   const std::vector<ZeroedShadow> &shadows);

struct SinkShadowZeroing : llvm::PassInfoMixin<SinkShadowZeroing> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kSinkShadowZeroing = "enzyme-py-sink-shadow-zeroing";

}  // namespace enzyme_py
