// Whether a prange body's reductions are sums whose value nothing else reads.
#pragma once

#include <string>
#include <vector>

#include <llvm-c/Core.h>

namespace enzyme_py {

// Numba's outlined prange body starts each reduction variable from its thread's entry
// of a reduction array, updates it in its loop over the chunk and stores it back at
// the end. Its reverse derivative can then run a block of indices at a time (each call
// starting again from that entry: python/enzyme_py/frontends/_numba_parfor_ir.py)
// only where the derivative never depends on the variable's value: every reduction
// is a sum (or difference) into which values are added, and the partial sums go
// nowhere else (`y[i] = s` in the loop, a running sum Numba accepts, is refused).
//
// True when, in `function` of the module `ir_text` (SROA'd here), every value loaded
// through each pointer parameter of `params` flows only through phis, integer or
// float adds (either operand) and subtractions (the first operand), each adding a
// value not derived from it, into stores through that same parameter; and the
// parameter's memory is only loaded and stored at addresses made from it. Throws
// std::runtime_error where the IR does not parse or `function` is missing.
bool reductions_only_accumulated(LLVMContextRef ctx, const std::string &ir_text,
                                 const std::string &function,
                                 const std::vector<unsigned> &params);

}  // namespace enzyme_py
