// Numba's addresses in arrays that are not C-contiguous, as pointers Enzyme and LLVM
// can follow.
#pragma once

#include <llvm-c/Core.h>

namespace enzyme_py {

// Numba indexes an array of layout 'A' through integers: `inttoptr(ptrtoint(data) +
// i * stride)`. To Enzyme such an address comes from nowhere: it cached every value
// read through it (x[i] of a strided Rosenbrock: two tapes of n doubles). Each
// `inttoptr` of a sum whose terms include one `ptrtoint(P)`, the others made of no
// pointer, becomes `getelementptr i8, P, <the other terms>` cast to the same type: the
// same address, derived from P (Numba's strided indexing stays inside the array P
// points into). Returns how many.
int addresses_from_pointers(LLVMModuleRef mod);

}  // namespace enzyme_py
