#include "arena.h"

#include <cstdlib>
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

thread_local std::vector<void *> blocks;

void *allocate(size_t size, size_t align) {
  if (align < alignof(MemInfo)) align = alignof(MemInfo);
  // calloc: the data starts at zero, as the shadow of a temporary must.
  char *block = static_cast<char *>(std::calloc(1, sizeof(MemInfo) + size + align));
  if (!block) return nullptr;
  blocks.push_back(block);
  auto *info = reinterpret_cast<MemInfo *>(block);
  uintptr_t data = reinterpret_cast<uintptr_t>(block + sizeof(MemInfo));
  data = (data + align - 1) / align * align;
  info->refct = 1;
  info->data = reinterpret_cast<void *>(data);
  info->size = size;
  return info;
}

extern "C" void *enzyme_py_meminfo_alloc(size_t size) { return allocate(size, 16); }
extern "C" void *enzyme_py_meminfo_alloc_aligned(size_t size, unsigned align) {
  return allocate(size, align);
}

// Enzyme releases shadows of temporaries through this; the arena does it later.
extern "C" void enzyme_py_arena_keep(void *) {}

}  // namespace

const char *const kArenaKeep = "__enzyme_py_arena_keep";

void arena_release() {
  for (void *block : blocks) std::free(block);
  blocks.clear();
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
  };
}

}  // namespace enzyme_py
