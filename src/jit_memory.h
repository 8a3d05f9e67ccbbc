// Where the JIT puts loaded code: one contiguous reservation of address space.
//
// LLVM's default for the ORC JIT on x86-64 Linux (RuntimeDyld with a
// SectionMemoryManager per object) maps each object's code, read-only data and
// data separately, wherever mmap finds room. Code reaches its constants (and
// its GOT) through 32-bit PC-relative relocations, which RuntimeDyld truncates
// without a word when the two land more than 2 GiB apart, as they do once the
// process's address space has holes (a long test session, PyTorch's libraries,
// unloaded code): the code then reads or jumps to a wrong address and the
// process dies (SIGSEGV) in its first call. Here every section of every object
// comes out of one reservation smaller than 2 GiB, so no such distance exists.
#pragma once

#include <llvm-c/LLJIT.h>

namespace enzyme_py {

// An LLJIT object linking layer (RuntimeDyld) whose memory comes from the
// reservation: for LLVMOrcLLJITBuilderSetObjectLinkingLayerCreator.
LLVMOrcObjectLayerRef create_object_layer(void *ctx, LLVMOrcExecutionSessionRef session,
                                          const char *triple);

}  // namespace enzyme_py
