// The threads a derivative's prange loops run on.
//
// In a derivative of a Numba function compiled with parallel=True, each prange
// loop is a call of the loop's outlined body (Numba's gufunc body, which loops over
// a [first, last] schedule) through functions generated per loop
// (python/enzyme_py/frontends/_numba_parfor.py). Those functions call the ones
// below, from generated code: the loop's range is cut into contiguous chunks (one or
// two per thread), chunk c runs with __enzyme_py_parfor_thread() returning c, which
// is what the body reads as Numba's thread id to pick its entry of the per-thread
// reduction arrays (Numba's thread count is the chunk count there).
//
// The values a chunk function takes are packed into an array of int64 "slots"
// (pointers and integers alike), one per LLVM parameter of the launch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace enzyme_py {

// Names generated code uses -> addresses of the functions below.
std::map<std::string, uint64_t> parfor_symbols();

// Zeroes each (address, bytes) span on up to `threads` of the pool's threads, thread
// w (the caller is 0) its w-th contiguous share of every span: the share a prange
// derivative's reverse chunks on thread w then update, in that thread's cache (memory
// zeroed by one core and updated by another crossed between them: Rosenbrock's
// fresh gradient on two threads 127 -> 360 us where one thread zeroed it).
void zero_in_shares(const std::vector<std::pair<uint64_t, uint64_t>> &spans, int64_t threads);

// The most indices per chunk a launch may ask for (its `grain`; tests set 1 to run
// short ranges on several threads); returns the previous limit.
int64_t set_parfor_grain_limit(int64_t limit);

// The fewest iterations of a fused loop (fused_threads.h) a thread takes: Rosenbrock's
// reverse over 32768 doubles takes about 6 us on one core, several times what handing
// a share to a spinning worker costs.
inline constexpr int64_t kFusedGrain = int64_t{1} << 15;

}  // namespace enzyme_py

extern "C" {

// int32 chunk(slots, first, last, exception): Numba's status (0: fine), and where the
// body's exception info is stored when it is not.
typedef int32_t (*ParforChunk)(int64_t *slots, int64_t first, int64_t last, void **exception);
// int32 chunk(slots, shadow_slots, first, last, exception): the reverse pass of the
// body, with the body's status and exception info as ParforChunk's.
typedef int32_t (*ParforReverseChunk)(int64_t *slots, int64_t *shadows, int64_t first,
                                      int64_t last, void **exception);

// The index of the chunk this thread runs (0 outside a launch).
int64_t enzyme_py_parfor_thread();

// A prange body run on the calling thread (a derivative on one thread that takes a
// parallel compile's module) failed with Numba's `status` and `exception` (its excinfo
// pointer): the derivative call ends with them, as where a chunk fails
// (fail_from_loop in arena.h); outside a derivative call, returns.
void enzyme_py_parfor_fail(int64_t status, int64_t exception);

// chunk over [first, last] (inclusive, as Numba's schedule) cut into `parts` chunks
// (fewer where the range is shorter, or where chunks would have fewer than `grain`
// indices), run on up to `workers` threads (one where first < 0: negative indices
// wrap around), each thread a contiguous run of chunks; chunk c sees c as its thread
// index. Where one fails, after all ended, the derivative call ends with that chunk's
// status and exception (fail_from_loop in arena.h): the caller raises the body's own
// exception.
void enzyme_py_parfor_run(ParforChunk chunk, int64_t *slots, int64_t first, int64_t last,
                          int64_t parts, int64_t workers, int64_t grain);

// A fused loop's iterations [0, count) (chunk over [first, last] as ParforChunk, its
// status ignored: the loop cannot fail) in contiguous shares on up to `workers`
// threads (0: one per core), at least kFusedGrain each; on the calling thread alone
// where that makes one share, or where the caller is itself a task of a launch.
void enzyme_py_fused_run(ParforChunk chunk, int64_t *slots, int64_t count, int64_t workers);

// How the threads of a reverse pass use a shadow (the `kind` of a `privates` entry;
// python/enzyme_py/frontends/_numba_parfor_ir.py writes the same numbers).
enum ParforShadow : int64_t {
  kParforSumFloat64 = 0,  // every thread but the first a zeroed copy, added in after
  kParforSumFloat32 = 1,  // the same, float32
  kParforDrop = 2,        // every thread a zeroed copy, dropped (a Const array's shadow)
  kParforShared = 3,      // all threads the shadow itself
};

// The reverse pass of a launch: chunk over the same chunks as enzyme_py_parfor_run,
// each with its own thread index. `privates` lists `count` quadruples (slot, bytes,
// kind, reach) of shadow slots and how the threads use them (ParforShadow). A
// kParforSum shadow with a reach r >= 0 (two indices more than r apart never touch
// the same entry of it: the loop's indices own its entries) is used in place, without
// copies, when every chunk is at least as long as r: the chunks then run in two waves,
// the even ones, then the odd ones, so that no two chunks running together touch the
// same entry. Shadows whose memory overlaps another's make the whole pass run on the
// calling thread, every shadow in place. A chunk whose body failed ends the
// derivative call as in enzyme_py_parfor_run, before any copy is added.
void enzyme_py_parfor_reverse(ParforReverseChunk chunk, int64_t *slots, int64_t *shadows,
                              int64_t slot_count, const int64_t *privates, int64_t count,
                              int64_t first, int64_t last, int64_t parts, int64_t workers,
                              int64_t grain);

// The status a derivative call ends with when a prange loop writes an array that
// shares memory with another of its arrays (python/enzyme_py/frontends/_numba_parfor_ir.py
// and the Numba frontend's error handler use the same number).
constexpr int64_t kParforOverlap = 8001;

// `count` triples (slot, bytes, written) of a launch's arrays: where an array the body
// writes shares memory with another one, the derivative call ends with
// kParforOverlap (fail_from_loop in arena.h). Its snapshot would copy them apart, and
// the reverse pass would then read values the loop did not.
void enzyme_py_parfor_check(const int64_t *slots, const int64_t *arrays, int64_t count);

// A copy of `slot_count` slots whose `count` pairs (slot, bytes) name memory copied
// to a block of its own, the slot then pointing at the copy (a negative slot: none):
// what the reverse pass reads instead of memory later code may overwrite. On the
// thread's tape (tape_block in arena.h): reset after the derivative call.
int64_t *enzyme_py_parfor_snapshot(const int64_t *slots, int64_t slot_count,
                                   const int64_t *copies, int64_t count);
}
