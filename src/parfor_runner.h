// The threads a derivative's prange loops run on.
//
// In a derivative of a Numba function compiled with parallel=True, each prange
// loop is a call of the loop's outlined body (Numba's gufunc body, which loops over
// a [first, last] schedule) through functions generated per loop
// (python/enzyme_py/frontends/_numba_parfor.py). Those functions call the ones
// below, from generated code: the loop's range is cut into one contiguous chunk per
// thread, chunk t runs on thread t (thread 0: the caller), and
// __enzyme_py_parfor_thread() returns t inside it, which is what the body reads as
// Numba's thread id to pick its entry of the per-thread reduction arrays.
//
// The values a chunk function takes are packed into an array of int64 "slots"
// (pointers and integers alike), one per LLVM parameter of the launch.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace enzyme_py {

// Names generated code uses -> addresses of the functions below.
std::map<std::string, uint64_t> parfor_symbols();

}  // namespace enzyme_py

extern "C" {

// int32 chunk(slots, first, last, exception): Numba's status (0: fine), and where the
// body's exception info is stored when it is not.
typedef int32_t (*ParforChunk)(int64_t *slots, int64_t first, int64_t last, void **exception);
// void chunk(slots, shadow_slots, first, last): the reverse pass of the body.
typedef void (*ParforReverseChunk)(int64_t *slots, int64_t *shadows, int64_t first,
                                   int64_t last);

// The index of the chunk this thread runs (0 outside a launch).
int64_t enzyme_py_parfor_thread();

// chunk over [first, last] (inclusive, as Numba's schedule) cut into `threads`
// chunks. Where one fails, after all ended, the derivative call ends with that
// chunk's status and exception (fail_from_loop in arena.h): the caller raises the
// body's own exception.
void enzyme_py_parfor_run(ParforChunk chunk, int64_t *slots, int64_t first, int64_t last,
                          int64_t threads);

// How the threads of a reverse pass use a shadow (the `kind` of a `privates` triple;
// python/enzyme_py/frontends/_numba_parfor_ir.py writes the same numbers).
enum ParforShadow : int64_t {
  kParforSumFloat64 = 0,  // every thread but the first a zeroed copy, added in after
  kParforSumFloat32 = 1,  // the same, float32
  kParforDrop = 2,        // every thread a zeroed copy, dropped (a Const array's shadow)
  kParforShared = 3,      // all threads the shadow itself
};

// The reverse pass of a launch: chunk over the same chunks as enzyme_py_parfor_run.
// `privates` lists `count` triples (slot, bytes, kind) of shadow slots and how the
// threads use them (ParforShadow).
void enzyme_py_parfor_reverse(ParforReverseChunk chunk, int64_t *slots, int64_t *shadows,
                              int64_t slot_count, const int64_t *privates, int64_t count,
                              int64_t first, int64_t last, int64_t threads);

// A copy of `slot_count` slots whose `count` pairs (slot, bytes) name memory copied
// to a block of its own, the slot then pointing at the copy (a negative slot: none): what the reverse pass
// reads instead of memory later code may overwrite. Freed with the derivative
// call's temporaries.
int64_t *enzyme_py_parfor_snapshot(const int64_t *slots, int64_t slot_count,
                                   const int64_t *copies, int64_t count);
}
