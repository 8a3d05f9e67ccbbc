// The tape's fresh pages, faulted in on a helper thread while a derivative fills them.
//
// A derivative's first call in a process writes a tape of fresh pages: GMM's gradient
// (d = 10, k = 25, n = 10^4) 40 MiB, 10,300 page faults that cost 14.5 ms of its 45 ms
// first call in a new process (21.5 ms once warm) on the 2-core benchmark VM, as much
// as calling it again after handing the tape back. Enzyme sizes most caches before
// the loop that fills them, so the tape knows each range before it is written: a
// helper thread faults it in (madvise MADV_POPULATE_WRITE, 256 KiB at a time from its
// start, taking the ranges waiting in turn) on another core while the call computes and
// writes behind it. Nothing is written: a page already written is left as it is.
//
// Only blocks allocated whole (not grown by realloc), for ranges of at least
// kPrefaultLeast bytes past what their chunk has reached (later calls of the same size
// fault nothing, and ask for nothing), up to kPrefaultPerCall bytes a call on a thread
// (a block allocated and never written is made resident). A kernel without
// MADV_POPULATE_WRITE (before Linux 5.14) refuses it: the helper then stops asking.
// In a child made by fork, a helper of its own, started when first needed.
#pragma once

#include <cstddef>

namespace enzyme_py {

inline constexpr size_t kPrefaultLeast = size_t{1} << 20;
inline constexpr size_t kPrefaultPerCall = size_t{128} << 20;

// Fault in [begin, begin + bytes) on the helper thread, soon.
void prefault_tape(char *begin, size_t bytes);

// [begin, begin + bytes) goes back to the system: what is waiting there is dropped,
// and a piece being faulted in there is waited for.
void forget_prefault(char *begin, size_t bytes);

// Bytes asked for (whole pages) and bytes the helper has faulted in, in this process.
struct PrefaultCounts {
  size_t asked = 0;
  size_t done = 0;
  bool refused = false;  // the kernel has no MADV_POPULATE_WRITE
};
PrefaultCounts prefault_counts();

}  // namespace enzyme_py
