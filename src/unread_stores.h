// Stores into fresh memory that nothing reads, dropped.
//
// A combined reverse derivative of a parallel=True function run on one thread (the
// serial twin, _numba_parfor_serial.py) keeps the forward pass of a prange reduction
// whose value the call does not want (ez.grad: ActiveOnly): Numba's reduction stores
// the loop's sum into an array it allocates (NRT_MemInfo_alloc_aligned), and once the
// loads that returned it are gone, that store is all that uses the sum. LLVM's DSE
// drops stores into such memory at the end of a function only within its scan limits,
// which a derivative's loops exceed: Rosenbrock prange's gradient kept a whole pass
// over x for that sum (1.55-1.63 ms against 0.48 ms in split form in alternated
// processes, n = 10^6, 2-core AMD EPYC; 210-247 us with the pass).
//
// The pass: for each call whose result is `noalias` (an allocator: no other pointer
// reaches that memory), where every use of the pointer, through GEPs (as their base)
// and casts, is a non-volatile store into it (never a load, a call, a phi or select,
// nor the pointer stored as a value), the stores are erased: nothing can read what
// they wrote. The loop that computed the value is then dead code (ADCE, loop deletion).
#pragma once

#include <llvm/IR/PassManager.h>

namespace enzyme_py {

struct DropUnreadStores : llvm::PassInfoMixin<DropUnreadStores> {
  llvm::PreservedAnalyses run(llvm::Function &fn, llvm::FunctionAnalysisManager &analyses);
};

inline constexpr const char *kDropUnreadStores = "enzyme-py-drop-unread-stores";

}  // namespace enzyme_py
