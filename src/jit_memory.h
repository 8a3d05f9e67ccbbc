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

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace enzyme_py {

// The reservation has no room for an object's code: a MemoryError in Python
// (pybind11 maps std::bad_alloc, with this message), thrown before the load,
// so that the process lives on (RuntimeDyld would abort it: "Unable to allocate
// section memory!"). Thrown by jit.cpp only: jit_memory.cpp has no RTTI, and
// pybind11's translation dynamic_casts what it catches.
struct JitMemoryFull : std::bad_alloc {
  explicit JitMemoryFull(std::string text) : text_(std::move(text)) {}
  const char *what() const noexcept override { return text_.c_str(); }

 private:
  std::string text_;
};

// Empty if the reservation's largest free range holds an upper bound of what
// loading `objects` (ELF relocatable objects: one, or a bundle's) allocates; else
// why not (for JitMemoryFull).
std::string room_problem(const std::vector<std::string_view> &objects);

// Where the reservation starts and its size (0, 0 before the first load); safe in a
// signal handler (src/crash_report.cpp).
void reservation_bounds(uintptr_t *base, size_t *size);

// An LLJIT object linking layer (RuntimeDyld) whose memory comes from the
// reservation: for LLVMOrcLLJITBuilderSetObjectLinkingLayerCreator.
LLVMOrcObjectLayerRef create_object_layer(void *ctx, LLVMOrcExecutionSessionRef session,
                                          const char *triple);

}  // namespace enzyme_py
