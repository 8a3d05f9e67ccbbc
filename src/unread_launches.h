// Prange launches whose work nothing reads (a derivative that needs no value).
#pragma once

#include <llvm-c/Core.h>

namespace enzyme_py {

// In a derivative of a parallel Numba function, a prange loop's primal launch (a
// function that calls __enzyme_py_parfor_run: python/enzyme_py/frontends/
// _numba_parfor_ir.py) runs before its reverse; where nothing reads what it wrote
// (ez.grad of a sum: the sum is not returned, and the reverse reads a snapshot
// taken before the launch, or nothing), the launch is dead work, which LLVM cannot
// see through the runner. Its calls are erased from the optimized module where:
// - the caller also runs the launch's reverse pass (`<launch>.reverse`'s chunks),
//   which recomputes the body and raises what the launch would have raised, and
// - every pointer it may write (a parameter not readonly) is memory allocated in
//   the caller (Numba's per-thread reduction arrays) that is only ever written,
//   compared, released, or has its address stored on the stack, and is passed to
//   no other call.
// Returns how many calls were erased.
int drop_unread_launches(LLVMModuleRef mod);

}  // namespace enzyme_py
