#include "arena.h"

#include "tape_prefault.h"

#include <setjmp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace enzyme_py {
namespace {

// Numba's NRT MemInfo header (numba/core/runtime/nrt.cpp), field for field.
struct MemInfo {
  size_t refct;
  void (*dtor)(void *, size_t, void *);
  void *dtor_info;
  void *data;
  size_t size;
  void *external_allocator;
};

static_assert(offsetof(MemInfo, data) == kMemInfoDataField, "Numba's MemInfo layout");

thread_local std::vector<void *> blocks;
// Split mode: where temporaries go now (null: `blocks`); see SplitTape.
thread_local std::vector<void *> *active_blocks = nullptr;

// Where a failed allocation returns to: set by call_entry around a derivative
// call on this thread (null outside one), with the bytes asked for.
thread_local sigjmp_buf *out_of_memory_exit = nullptr;
thread_local size_t out_of_memory_bytes = 0;

// A failed allocation of `bytes`: inside call_entry it ends the call (the
// frames skipped are generated code and these allocators, nothing to unwind);
// elsewhere the caller gets null.
void *allocation_failed(size_t bytes) {
  if (out_of_memory_exit) {
    out_of_memory_bytes = bytes ? bytes : 1;
    siglongjmp(*out_of_memory_exit, 1);
  }
  return nullptr;
}

// entry(slots), with a failed allocation returning here (the exit of an outer
// call, a derivative called from one, restored after): 0, or the bytes the
// allocation that failed asked for.
size_t run_to_out_of_memory(void (*entry)(void *), void *slots) {
  sigjmp_buf here;
  sigjmp_buf *const outer = out_of_memory_exit;
  size_t failed = 0;
  if (sigsetjmp(here, /*savemask=*/0) == 0) {
    out_of_memory_exit = &here;
    entry(slots);
  } else {
    failed = out_of_memory_bytes;
  }
  out_of_memory_exit = outer;
  return failed;
}

bool power_of_two(size_t n) { return n && !(n & (n - 1)); }

// Small temporaries come from chunks this thread keeps between derivative calls, a
// pointer bumped through them and set back when the arena is released, instead of
// one posix_memalign and one free each: Numba code allocating arrays in a loop (GMM's
// prange body, three per sample, each with a shadow) spent a tenth of its gradient's
// time in malloc and free. Larger ones, and those of split mode (kept with their
// SplitTape), are allocated one by one as before.
constexpr size_t kSmallTemporary = size_t{64} << 10;
constexpr size_t kTemporaryChunk = size_t{1} << 20;
constexpr size_t kTemporaryChunksKept = 16;  // per thread, between calls
constexpr size_t kTemporaryAlign = 64;  // of every chunk, so of the blocks that need it

class TemporaryChunks {
 public:
  ~TemporaryChunks() { trim(0); }

  // `bytes` aligned to `align` (at most kTemporaryAlign), or null.
  char *take(size_t bytes, size_t align) {
    for (;;) {
      if (current_ < chunks_.size()) {
        const size_t at = (top_ + align - 1) / align * align;
        if (at + bytes <= kTemporaryChunk) {
          top_ = at + bytes;
          return chunks_[current_] + at;
        }
        ++current_;
        top_ = 0;
        continue;
      }
      void *chunk = nullptr;
      if (posix_memalign(&chunk, kTemporaryAlign, kTemporaryChunk) != 0) return nullptr;
      try {
        chunks_.push_back(static_cast<char *>(chunk));
      } catch (const std::bad_alloc &) {
        std::free(chunk);
        return nullptr;
      }
    }
  }

  // Every block free again; at most `keep` chunks stay.
  void reset(size_t keep) {
    trim(keep);
    current_ = 0;
    top_ = 0;
  }

 private:
  void trim(size_t keep) {
    while (chunks_.size() > keep) {
      std::free(chunks_.back());
      chunks_.pop_back();
    }
  }

  std::vector<char *> chunks_;
  size_t current_ = 0;
  size_t top_ = 0;
};

thread_local TemporaryChunks temporaries;

void *allocate(size_t size, size_t align) {
  if (align < alignof(MemInfo)) align = alignof(MemInfo);
  char *block = nullptr;
  size_t offset = nrt_data_offset(align);
  // The data at a fixed offset from the header (see nrt_data_offset), else wherever
  // an over-allocated block lets it be aligned.
  const bool fixed_offset = offset != 0;
  const bool carved =
      fixed_offset && !active_blocks && align <= kTemporaryAlign && size <= kSmallTemporary;
  if (carved) {
    block = temporaries.take(offset + size, align);
    if (!block) return allocation_failed(size);
  } else if (fixed_offset) {
    void *p = nullptr;
    if (size > SIZE_MAX - offset || posix_memalign(&p, align, offset + size) != 0) {
      return allocation_failed(size);
    }
    block = static_cast<char *>(p);
  } else {
    if (size > SIZE_MAX - sizeof(MemInfo) - align) return allocation_failed(size);
    block = static_cast<char *>(std::calloc(1, sizeof(MemInfo) + size + align));
    if (!block) return allocation_failed(size);
    uintptr_t data = reinterpret_cast<uintptr_t>(block + sizeof(MemInfo));
    offset = (data + align - 1) / align * align - reinterpret_cast<uintptr_t>(block);
  }
  if (fixed_offset) std::memset(block, 0, offset + size);  // shadows start at zero
  if (!carved) {
    try {
      (active_blocks ? *active_blocks : blocks).push_back(block);
    } catch (const std::bad_alloc &) {
      std::free(block);
      return allocation_failed(size);
    }
  }
  auto *info = reinterpret_cast<MemInfo *>(block);
  info->refct = 1;
  info->data = block + offset;
  info->size = size;
  return info;
}

extern "C" void *enzyme_py_meminfo_alloc(size_t size) { return allocate(size, 16); }
extern "C" void *enzyme_py_meminfo_alloc_aligned(size_t size, unsigned align) {
  return allocate(size, align);
}

// Enzyme releases shadows of temporaries through this; the arena does it later.
extern "C" void enzyme_py_arena_keep(void *) {}

// Enzyme's tape: a stack of blocks in large chunks. Each block has a header
// with its size (the low bit: freed) and the offset of the block below it, so
// that freeing the top block also pops the freed blocks under it.
constexpr size_t kNone = ~size_t{0};
constexpr size_t kTapeAlign = 16;  // what malloc guarantees; payload sizes are multiples
// Blocks are aligned to their size, up to this: the code stores vector values in its
// tape with their own alignment (a <4 x double> with `vmovapd`, 32 bytes), and a
// block only 16-aligned made it fault (SIGSEGV) in the full test suite, depending on
// where malloc had put the chunk. 64 covers the widest register (AVX-512).
constexpr size_t kMaxTapeAlign = 64;
constexpr size_t kFirstChunk = size_t{1} << 20;
// What a thread keeps between calls (a larger tape goes back to the system): 1 GiB,
// or a sixteenth of the machine's memory where that is less. A tape dropped after
// each call is mapped and faulted in again by the next: the GMM benchmark written
// with prange (a 271 MiB tape) took 175 ms a call with 256 MiB kept, 106 ms with it.
size_t keep_bytes() {
  static const size_t keep = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const size_t most = size_t{1} << 30;
    if (pages <= 0 || page <= 0) return size_t{256} << 20;
    return std::min(most, static_cast<size_t>(pages) / 16 * static_cast<size_t>(page));
  }();
  return keep;
}
// Larger requests fail at once (and sizes near SIZE_MAX would wrap when rounded).
constexpr size_t kLargestBlock = SIZE_MAX / 4;

struct TapeBlock {
  size_t size;  // payload bytes, a multiple of kTapeAlign; bit 0: freed
  size_t below;  // offset of the block below in the chunk, or kNone
};
static_assert(sizeof(TapeBlock) == kTapeAlign, "a header is one minimal alignment");

struct TapeChunk {
  char *base;  // kMaxTapeAlign-aligned, so offsets align as addresses do
  size_t capacity;
  size_t top = 0;  // first free byte: the end of the top block's payload (0: none)
  size_t reached = 0;  // the most `top` has been: bytes written, so faulted in
  size_t last = kNone;  // offset of the top block
  bool holds(const void *p) const {
    auto *c = static_cast<const char *>(p);
    return c >= base && c < base + capacity;
  }
  TapeBlock *block(size_t offset) const { return reinterpret_cast<TapeBlock *>(base + offset); }
  // The end of the payload of the top block (the top once blocks above it are popped).
  size_t end_of_last() const {
    return last == kNone ? 0 : last + sizeof(TapeBlock) + (block(last)->size & ~size_t{1});
  }
};

size_t round_up(size_t n) { return (n + kTapeAlign - 1) / kTapeAlign * kTapeAlign; }

// A payload's alignment: the largest power of two not above its size, from
// kTapeAlign to kMaxTapeAlign (a type's alignment never exceeds its size).
size_t alignment_for(size_t payload) {
  size_t align = kTapeAlign;
  while (align < kMaxTapeAlign && 2 * align <= payload) align *= 2;
  return align;
}

// Offset of the header of a block of `align` placed at or after `top`.
size_t header_at(size_t top, size_t align) {
  return (top + sizeof(TapeBlock) + align - 1) / align * align - sizeof(TapeBlock);
}

// Chunks are plain 4 KiB pages, faulted in as the tape first reaches them. Advised
// for transparent huge pages (as they were), a first call's fresh 2 MiB pages came
// from the large blocks the kernel had freed, which a VM with free page reporting
// (virtio balloon: the benchmark VM's, many clouds') hands back to its host, so that
// touching them again faults on the host too. The GMM gradient (24 ms a call once
// warm), first call in new processes 3 s apart on the 2-core AMD EPYC VM: 47-228 ms
// with huge pages, 58-66 ms without; later calls the same either way.
// posix_memalign may hand back part of a heap region that other code advised for huge
// pages (NumPy advises its arrays of 4 MiB and more, and glibc serves large blocks from
// the heap once freed ones have raised its mmap threshold): the chunk's pages are
// advised against them (a test suite's order once gave a chunk "hg"). The advice
// changes no data, so the pages it shares at either end with other blocks may take it.
char *allocate_chunk(size_t capacity) {
  void *p = nullptr;
  if (posix_memalign(&p, kMaxTapeAlign, capacity) != 0) return nullptr;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(p) + capacity + page - 1) / page * page;
  madvise(reinterpret_cast<void *>(begin), end - begin, MADV_NOHUGEPAGE);
  return static_cast<char *>(p);
}

class Tape {
 public:
  ~Tape() { drop_chunks(); }

  void *allocate(size_t bytes) {
    if (bytes > kLargestBlock) return nullptr;
    const size_t payload = round_up(bytes ? bytes : 1);
    const size_t align = alignment_for(payload);
    const size_t need = align + payload;  // header and padding included, in any chunk
    if (chunks_.empty() && !add_chunk(need)) return nullptr;
    while (header_at(chunks_[current_].top, align) + sizeof(TapeBlock) + payload >
           chunks_[current_].capacity) {
      TapeChunk &c = chunks_[current_];
      if (c.top == 0 && current_ + 1 == chunks_.size()) {  // the last, empty, too small
        size_t grown = std::max(need, 2 * c.capacity);
        char *base = allocate_chunk(grown);
        if (!base) return nullptr;
        free_chunk(c);
        c.base = base;
        c.capacity = grown;
        c.reached = 0;
        break;
      }
      if (current_ + 1 == chunks_.size() && !add_chunk(std::max(need, 2 * c.capacity))) {
        return nullptr;
      }
      ++current_;  // chunks above the current one are empty
    }
    TapeChunk &c = chunks_[current_];
    const size_t at = header_at(c.top, align);
    TapeBlock *block = c.block(at);
    block->size = payload;
    block->below = c.last;
    c.last = at;
    const size_t top = at + sizeof(TapeBlock) + payload;
    grew(top - c.top);
    c.top = top;
    prefault_fresh(c, top);
    c.reached = std::max(c.reached, top);
    return block + 1;
  }

  bool owns(const void *p) const {
    for (const TapeChunk &c : chunks_) {
      if (c.holds(p)) return true;
    }
    return false;
  }

  // `p` must be a live block of this tape.
  void release(void *p) {
    TapeBlock *block = static_cast<TapeBlock *>(p) - 1;
    TapeChunk &c = chunks_[current_];
    if (!c.holds(p) || reinterpret_cast<char *>(block) != c.base + c.last) {
      block->size |= 1;  // not on top: popped later
      return;
    }
    pop_freed(block);
  }

  void *reallocate(void *p, size_t bytes) {
    if (!p || bytes > kLargestBlock) return allocate(bytes);
    TapeBlock *block = static_cast<TapeBlock *>(p) - 1;
    size_t old = block->size & ~size_t{1};
    TapeChunk &c = chunks_[current_];
    size_t payload = round_up(bytes ? bytes : 1);
    const bool on_top = c.holds(p) && reinterpret_cast<char *>(block) == c.base + c.last;
    // Grown in place, the block keeps its alignment: enough for what it holds, whose
    // alignment its first size already bounded (Enzyme grows arrays of one type).
    if (on_top && c.last + sizeof(TapeBlock) + payload <= c.capacity) {
      block->size = payload;  // the top block grows (or shrinks) in place
      size_t top = c.last + sizeof(TapeBlock) + payload;
      if (top >= c.top) {
        grew(top - c.top);
      } else {
        used_ -= c.top - top;
      }
      c.top = top;
      c.reached = std::max(c.reached, top);
      return p;
    }
    void *moved = allocate(bytes);
    if (!moved) return nullptr;
    std::memcpy(moved, p, std::min(old, payload));
    release(p);
    return moved;
  }

  // After a call: everything is free again. The chunks stay, pages faulted in
  // included, so that the next call of the same size neither grows nor faults (made
  // one chunk as large as the call's peak, they were faulted in again by the second
  // call: the GMM gradient's 79 MiB, 20,000 faults), up to keep_bytes(): chunks
  // beyond it, the last first, go back to the system.
  void reset() {
    while (!chunks_.empty() && reserved() > keep_bytes()) {
      free_chunk(chunks_.back());
      chunks_.pop_back();
    }
    last_high_ = high_;
    used_ = high_ = prefaulted_ = 0;
    for (TapeChunk &c : chunks_) {
      c.top = 0;
      c.last = kNone;
    }
    current_ = 0;
  }

  // Between calls: every chunk back to the system.
  void give_back() { drop_chunks(); }

  size_t in_use() const { return used_; }

  // Bytes of the chunks that calls have reached: what the tape keeps faulted in.
  // (The rest of a chunk is address space only.)
  size_t reserved() const {
    size_t n = 0;
    for (const TapeChunk &c : chunks_) n += c.reached;
    return n;
  }

 private:
  bool add_chunk(size_t need) {
    size_t capacity = std::max(need, kFirstChunk);
    char *base = allocate_chunk(capacity);
    if (!base) return false;
    try {
      chunks_.push_back(TapeChunk{base, capacity});
    } catch (const std::bad_alloc &) {
      std::free(base);
      return false;
    }
    return true;
  }

  void grew(size_t bytes) {
    used_ += bytes;
    if (used_ > high_) high_ = used_;
  }

  // A new block's pages past what calls reached are fresh: the helper of
  // tape_prefault.h faults in a long stretch of them while the call fills it. Only
  // blocks allocated whole (Enzyme sizes a cache by its loop's count before the loop),
  // not those grown by realloc (a loop of unknown count: the last doubling is half
  // written at most), and up to kPrefaultPerCall bytes a call: a block allocated and
  // not written would otherwise be made resident.
  void prefault_fresh(const TapeChunk &c, size_t top) {
    if (top < c.reached + kPrefaultLeast) return;
    const size_t fresh = std::min(top - c.reached, kPrefaultPerCall - prefaulted_);
    if (fresh < kPrefaultLeast) return;
    prefault_tape(c.base + c.reached, fresh);
    prefaulted_ += fresh;
  }

  static void free_chunk(const TapeChunk &c) {
    forget_prefault(c.base, c.capacity);
    std::free(c.base);
  }

  void drop_chunks() {
    for (TapeChunk &c : chunks_) free_chunk(c);
    chunks_.clear();
    current_ = 0;
  }

  // `block` is the top of the current chunk: pop it and every freed block
  // under it, moving down to earlier chunks as they empty.
  void pop_freed(TapeBlock *block) {
    TapeChunk *c = &chunks_[current_];
    c->last = block->below;
    settle(*c);
    for (;;) {
      if (c->last == kNone) {
        if (current_ == 0) return;
        c = &chunks_[--current_];
        if (c->last == kNone) continue;
      }
      const TapeBlock *below = c->block(c->last);
      if (!(below->size & 1)) return;
      c->last = below->below;
      settle(*c);
    }
  }

  // The chunk's top back to the end of its (new) top block: the padding before the
  // popped block's header goes with it.
  void settle(TapeChunk &c) {
    const size_t top = c.end_of_last();
    used_ -= c.top - top;
    c.top = top;
  }

  std::vector<TapeChunk> chunks_;
  size_t current_ = 0;
  size_t used_ = 0;  // bytes of blocks (headers included) not popped
  size_t high_ = 0;  // the most used_ has been since the last reset
  size_t last_high_ = 0;  // high_ at the last reset
  size_t prefaulted_ = 0;  // bytes handed to the prefault helper since the last reset

 public:
  size_t last_call_peak() const { return last_high_; }
};

thread_local Tape tape;

// Split mode (arena.h, SplitTape): where this thread's allocations go now. The
// augmented forward pass of a split tape allocates into the split tape's own
// tape and blocks; its reverse pass reads them (`frozen`: frees of its blocks
// are ignored, so that the reverse pass can run again) and allocates into the
// thread's own, released after the call as usual.
thread_local Tape *active_tape = nullptr;  // null: `tape`
thread_local const Tape *frozen = nullptr;

Tape &current_tape() { return active_tape ? *active_tape : tape; }

// Enzyme sizes the tape of a loop before the loop's guard: for a loop that will
// not run, such as the main body of a loop unrolled by 8 that has 3 iterations,
// the size is a wrapped negative number (about 2^63 bytes) and the tape is never
// written. Failing those would fail good calls; sizes no machine has stay null.
constexpr size_t kNeverUsedTape = size_t{1} << 56;

void *tape_allocation_failed(size_t bytes) {
  return bytes < kNeverUsedTape ? allocation_failed(bytes) : nullptr;
}

extern "C" void *enzyme_py_tape_alloc(size_t bytes) {
  void *p = current_tape().allocate(bytes);
  return p ? p : tape_allocation_failed(bytes);
}

extern "C" void enzyme_py_tape_free(void *p) {
  if (!p) return;
  if (frozen && frozen->owns(p)) return;  // a split tape's: kept until it dies
  Tape &t = current_tape();
  if (t.owns(p)) {
    t.release(p);
  } else {
    std::free(p);
  }
}

extern "C" void *enzyme_py_tape_realloc(void *p, size_t bytes) {
  Tape &t = current_tape();
  if (p && frozen && frozen->owns(p)) {  // grown in the reverse pass: a copy
    void *moved = t.allocate(bytes);
    if (!moved) return bytes == 0 ? nullptr : tape_allocation_failed(bytes);
    size_t old = (static_cast<TapeBlock *>(p) - 1)->size & ~size_t{1};
    std::memcpy(moved, p, std::min(old, bytes));
    return moved;
  }
  void *moved = p && !t.owns(p) ? std::realloc(p, bytes) : t.reallocate(p, bytes);
  return moved || bytes == 0 ? moved : tape_allocation_failed(bytes);
}

}  // namespace

size_t nrt_data_offset(size_t align) {
  if (align < alignof(MemInfo)) align = alignof(MemInfo);
  if (!power_of_two(align)) return 0;
  return (sizeof(MemInfo) + align - 1) / align * align;
}

const char *const kArenaKeep = "__enzyme_py_arena_keep";
const char *const kTapeAlloc = "__enzyme_py_tape_alloc";
const char *const kTapeFree = "__enzyme_py_tape_free";
const char *const kTapeRealloc = "__enzyme_py_tape_realloc";

size_t tape_bytes_in_use() { return tape.in_use(); }
size_t tape_bytes_reserved() { return tape.reserved(); }
size_t tape_bytes_last_call() { return tape.last_call_peak(); }

void tape_give_back() {
  tape.reset();
  tape.give_back();
  temporaries.reset(0);
}

void arena_release() {
  for (void *block : blocks) std::free(block);
  blocks.clear();
  temporaries.reset(kTemporaryChunksKept);
  tape.reset();
}

size_t run_guarded(void (*entry)(void *), void *slots) {
  return run_to_out_of_memory(entry, slots);
}

void *fail_allocation(size_t bytes) { return allocation_failed(bytes); }

namespace {
thread_local int64_t loop_status = 0;
thread_local int64_t loop_detail = 0;
}  // namespace

void fail_from_loop(int64_t status, int64_t detail) {
  if (!out_of_memory_exit) return;  // not inside a derivative call
  loop_status = status;
  loop_detail = detail;
  allocation_failed(kLoopFailed);
}

bool take_loop_failure(int64_t &status, int64_t &detail) {
  if (loop_status == 0) return false;
  status = loop_status;
  detail = loop_detail;
  loop_status = loop_detail = 0;
  return true;
}

void *arena_block(size_t bytes) {
  void *p = nullptr;
  if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) return allocation_failed(bytes);
  try {
    (active_blocks ? *active_blocks : blocks).push_back(p);
  } catch (const std::bad_alloc &) {
    std::free(p);
    return allocation_failed(bytes);
  }
  return p;
}

void *tape_block(size_t bytes) { return enzyme_py_tape_alloc(bytes); }

size_t call_entry(void (*entry)(void *), void *slots) {
  const size_t failed = run_to_out_of_memory(entry, slots);
  arena_release();
  return failed;
}

struct SplitTape::State {
  Tape tape;
  std::vector<void *> blocks;
};

SplitTape::SplitTape() : state_(new State) {}

SplitTape::~SplitTape() {
  for (void *block : state_->blocks) std::free(block);
  delete state_;
}

size_t SplitTape::bytes() const { return state_->tape.in_use(); }

size_t call_entry_split(void (*entry)(void *), void *slots, SplitTape &split, bool forward) {
  Tape *const outer_tape = active_tape;
  std::vector<void *> *const outer_blocks = active_blocks;
  const Tape *const outer_frozen = frozen;
  if (forward) {
    active_tape = &split.state_->tape;
    active_blocks = &split.state_->blocks;
    frozen = nullptr;
  } else {
    active_tape = nullptr;
    active_blocks = nullptr;
    frozen = &split.state_->tape;
  }
  const size_t failed = run_to_out_of_memory(entry, slots);
  active_tape = outer_tape;
  active_blocks = outer_blocks;
  frozen = outer_frozen;
  // What the reverse pass (or a failed forward pass) allocated on the thread's own.
  arena_release();
  return failed;
}

std::map<std::string, uint64_t> arena_symbols() {
  auto plain = reinterpret_cast<uint64_t>(&enzyme_py_meminfo_alloc);
  auto aligned = reinterpret_cast<uint64_t>(&enzyme_py_meminfo_alloc_aligned);
  return {
      {"NRT_MemInfo_alloc", plain},
      {"NRT_MemInfo_alloc_safe", plain},
      {"NRT_MemInfo_alloc_aligned", aligned},
      {"NRT_MemInfo_alloc_safe_aligned", aligned},
      {kArenaKeep, reinterpret_cast<uint64_t>(&enzyme_py_arena_keep)},
      {kTapeAlloc, reinterpret_cast<uint64_t>(&enzyme_py_tape_alloc)},
      {kTapeFree, reinterpret_cast<uint64_t>(&enzyme_py_tape_free)},
      {kTapeRealloc, reinterpret_cast<uint64_t>(&enzyme_py_tape_realloc)},
  };
}

}  // namespace enzyme_py
