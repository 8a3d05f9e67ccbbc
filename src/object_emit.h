// Object code from an optimised module: LLVM's code generation, as
// LLVMTargetMachineEmitToMemoryBuffer runs it, with one choice of enzyme_py's.
//
// Loop strength reduction (LSR, the IR pass at the start of LLVM's code generation)
// is left out for a module with a function of more than kLargeFunction
// instructions. On such functions (a GMM derivative's loop nests, each loop
// vectorised with its remainder) it took a third of code generation, and what it
// left took the register allocator longer still: without it, code generation of
// GMM's derivative (2200 instructions in one function) 193 -> 95 ms, of GMM prange's
// reverse chunk (2850) 240 -> 133 ms (2-core AMD EPYC; llc -time-passes: LSR 35% of
// the whole), with gradients bit-identical and their speed within noise (serial
// GMM n = 10^4, 200 calls alternated in one process: at best 26.2-27.6 ms without
// it, 28.0-28.6 ms with it). On small hot loops it pays: Rosenbrock's reverse loop was ~5% slower
// without it, heat's 1-7% (functions of 325 and 661 instructions), and their code
// generation is short (heat: 33 -> 20 ms): they keep it.
#pragma once

#include <cstddef>
#include <string>

#include <llvm-c/TargetMachine.h>
#include <llvm-c/Types.h>

namespace enzyme_py {

inline constexpr size_t kLargeFunction = 1500;

// The object file of `mod` for `machine` (several threads may call it at once, each
// with a machine and a module of its own). Throws std::runtime_error on failure.
std::string emit_object_code(LLVMModuleRef mod, LLVMTargetMachineRef machine);

}  // namespace enzyme_py
