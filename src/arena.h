// Memory for temporaries of differentiated Numba code.
//
// Numba allocates arrays through its runtime (NRT_MemInfo_alloc*), returning a
// MemInfo header whose `data` field points at the array. In derivatives those
// calls resolve to the functions below instead: the same header layout, the
// data zeroed (Enzyme's shadows of temporaries must start at zero), and every
// block owned by a per-thread arena released after each derivative call, since
// Numba's reference counting is switched off inside derivatives.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace enzyme_py {

// Frees everything allocated by this thread's derivative calls so far.
void arena_release();

// `void(i8*)` that leaves a block to the arena: what Enzyme's release of the
// shadow of a temporary calls.
extern const char *const kArenaKeep;

// Names Numba's IR uses (and kArenaKeep) -> addresses of the arena's functions.
std::map<std::string, uint64_t> arena_symbols();

}  // namespace enzyme_py
