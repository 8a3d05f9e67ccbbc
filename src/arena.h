// Memory for temporaries of differentiated Numba code.
//
// Numba allocates arrays through its runtime (NRT_MemInfo_alloc*), returning a
// MemInfo header whose `data` field points at the array. In derivatives those
// calls resolve to the functions below instead: the same header layout, the
// data zeroed (Enzyme's shadows of temporaries must start at zero), and every
// block owned by a per-thread arena released after each derivative call, since
// Numba's reference counting is switched off inside derivatives. Small blocks are
// carved from chunks the thread keeps between calls.
//
// Enzyme's tape (the values the reverse pass reads back) is allocated with
// malloc, often one small block per iteration of an inner loop, and freed in
// about the reverse order. In derivatives those calls go to a per-thread stack
// instead (kTape*): allocation bumps a pointer, a free of the top block pops
// it, and the memory is kept for the next call.
#pragma once

#include <cstdint>
#include <cstddef>
#include <map>
#include <string>

namespace enzyme_py {

// Frees everything allocated by this thread's derivative calls so far (the chunks
// small temporaries were carved from are kept for the next call, up to 16 MiB).
void arena_release();

// Calls a derivative's entry point on its slots, then releases the arena. An
// allocation inside it that fails (a temporary, the shadow of one, Enzyme's tape)
// ends the call there instead of handing null to code that does not check it
// (Enzyme drops Numba's null checks of allocations): the result is then the
// number of bytes that could not be allocated (at least 1), else 0.
size_t call_entry(void (*entry)(void *), void *slots);

// entry(slots) with a failed allocation returning here, as inside call_entry, but
// nothing released: 0, or the bytes the allocation that failed asked for. For work
// a derivative hands to other threads (parfor_runner.h).
size_t run_guarded(void (*entry)(void *), void *slots);

// What a failed allocation of `bytes` does on this thread: inside call_entry it ends
// the call (which returns `bytes`); elsewhere it returns null.
void *fail_allocation(size_t bytes);

// What call_entry returns for a derivative call ended by fail_from_loop.
constexpr size_t kLoopFailed = ~size_t{0};

// Ends the derivative call running on this thread, as a failed allocation does, for
// code it ran on other threads that failed with Numba's `status` and exception info
// address `detail` (parfor_runner.h); take_loop_failure then returns them (once).
void fail_from_loop(int64_t status, int64_t detail);
bool take_loop_failure(int64_t &status, int64_t &detail);

// `bytes` (64-aligned, not zeroed) freed with this thread's temporaries: after the
// derivative call (call_entry), or with the split tape allocated into now.
void *arena_block(size_t bytes);

// `bytes` (aligned as Enzyme's tape blocks, not zeroed) on this thread's tape: memory
// kept between calls (no fresh pages each call), reset after the derivative call as
// the tape is; in split mode, the split tape's, kept until it dies.
void *tape_block(size_t bytes);

// Split reverse mode: the memory of one augmented forward pass (Enzyme's tape,
// the temporaries and their shadows it allocated), kept until this object dies
// so that its reverse pass can run any number of times in between.
class SplitTape {
 public:
  SplitTape();
  ~SplitTape();
  SplitTape(const SplitTape &) = delete;
  SplitTape &operator=(const SplitTape &) = delete;
  // Bytes its tape holds.
  size_t bytes() const;

 private:
  struct State;
  State *state_;
  friend size_t call_entry_split(void (*)(void *), void *, SplitTape &, bool);
};

// call_entry for split mode. forward: the augmented forward pass, allocating
// into `split`; else its reverse pass, reading `split` (whose blocks it does not
// free) and allocating on the thread's arena, released after the call.
size_t call_entry_split(void (*entry)(void *), void *slots, SplitTape &split, bool forward);

// Where the data of a block from NRT_MemInfo_alloc_aligned(size, align) starts,
// in bytes from its MemInfo header: a constant for each power-of-two alignment
// (0 for other alignments). Code may then compute the data pointer from the
// header instead of loading it, which tells LLVM that temporaries never alias.
size_t nrt_data_offset(size_t align);
// Byte offset of the `data` field in Numba's MemInfo header.
constexpr size_t kMemInfoDataField = 24;

// `void(i8*)` that leaves a block to the arena: what Enzyme's release of the
// shadow of a temporary calls.
extern const char *const kArenaKeep;

// Replacements for the malloc, free and realloc calls Enzyme makes for its
// tape. The free also takes blocks from malloc (it checks), so any free in a
// derivative may be routed to it.
extern const char *const kTapeAlloc;
extern const char *const kTapeFree;
extern const char *const kTapeRealloc;

// Bytes this thread's tape holds now, keeps faulted in between calls (what its
// chunks were written up to), and held at most during the last derivative call.
size_t tape_bytes_in_use();
size_t tape_bytes_reserved();
size_t tape_bytes_last_call();
// Between calls: this thread's tape chunks, and its chunks of temporaries, back to
// the system (the next call faults its tape in anew).
void tape_give_back();

// Names Numba's IR uses (and kArenaKeep) -> addresses of the arena's functions.
std::map<std::string, uint64_t> arena_symbols();

}  // namespace enzyme_py
