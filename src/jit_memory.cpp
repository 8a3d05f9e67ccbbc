// Compiled without RTTI, as LLVM is (this file subclasses LLVM's classes).
#include "jit_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <llvm/ExecutionEngine/JITEventListener.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/SectionMemoryManager.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Object/SymbolSize.h>
#include <llvm/Support/Memory.h>
#include <llvm/Support/MemoryBuffer.h>

namespace enzyme_py {
namespace {

// 1 GiB of address space (reserved, not committed: pages cost memory only once
// code is written into them). Any two addresses in it are closer than 2 GiB.
// ENZYME_PY_JIT_RESERVATION_MIB (read once, when the first object is loaded)
// makes it smaller (1 to 1024 MiB; anything else is the default), for tests of
// what a full reservation does.
constexpr size_t kMaxReservationMiB = 1024;

size_t reservation_bytes() {
  size_t mib = kMaxReservationMiB;
  if (const char *text = std::getenv("ENZYME_PY_JIT_RESERVATION_MIB")) {
    char *end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (end != text && *end == '\0' && value >= 1 && value <= kMaxReservationMiB) {
      mib = static_cast<size_t>(value);
    }
  }
  return mib << 20;
}

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

int protection(unsigned flags) {
  int prot = PROT_NONE;
  if (flags & llvm::sys::Memory::MF_READ) prot |= PROT_READ;
  if (flags & llvm::sys::Memory::MF_WRITE) prot |= PROT_WRITE;
  if (flags & llvm::sys::Memory::MF_EXEC) prot |= PROT_EXEC;
  return prot;
}

// The reservation and its free ranges (offset -> length, page multiples),
// shared by all objects; first fit, ranges merged when released.
class Reservation {
 public:
  void *allocate(size_t bytes, std::error_code &ec) {
    std::lock_guard<std::mutex> hold(lock_);
    if (!base_ && !reserve()) {
      ec = std::error_code(ENOMEM, std::generic_category());
      return nullptr;
    }
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const size_t offset = it->first, left = it->second - bytes;
      free_.erase(it);
      if (left) free_[offset + bytes] = left;
      return base_ + offset;
    }
    // Full: the load fails with LLVM's "Unable to allocate section memory"
    // (a Python error), never code placed out of reach of its data.
    ec = std::error_code(ENOMEM, std::generic_category());
    return nullptr;
  }

  size_t largest_free() {
    std::lock_guard<std::mutex> hold(lock_);
    if (!base_) return reservation_bytes();
    size_t largest = 0;
    for (const auto &range : free_) largest = range.second > largest ? range.second : largest;
    return largest;
  }

  size_t size() {
    std::lock_guard<std::mutex> hold(lock_);
    return base_ ? size_ : reservation_bytes();
  }

  // Without the lock: base_ and size_ are set once, before any code runs.
  void bounds(uintptr_t *base, size_t *size) const {
    *base = reinterpret_cast<uintptr_t>(base_);
    *size = base_ ? size_ : 0;
  }

  // size, bytes allocated, bytes resident (committed), free ranges, largest free range.
  void stats(uint64_t out[5]) {
    std::lock_guard<std::mutex> hold(lock_);
    for (int i = 0; i < 5; ++i) out[i] = 0;
    if (!base_) return;
    size_t free_bytes = 0, largest = 0;
    for (const auto &range : free_) {
      free_bytes += range.second;
      if (range.second > largest) largest = range.second;
    }
    const size_t page = page_size();
    std::vector<unsigned char> resident(size_ / page);
    uint64_t committed = 0;
    if (mincore(base_, size_, resident.data()) == 0) {
      for (unsigned char r : resident) committed += (r & 1) ? page : 0;
    }
    out[0] = size_;
    out[1] = size_ - free_bytes;
    out[2] = committed;
    out[3] = free_.size();
    out[4] = largest;
  }

  void release(void *address, size_t bytes) {
    auto *p = static_cast<char *>(address);
    // Its pages dropped, the range inaccessible again.
    mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    std::lock_guard<std::mutex> hold(lock_);
    size_t offset = static_cast<size_t>(p - base_);
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + bytes == next->first) {
      bytes += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto before = std::prev(next);
      if (before->first + before->second == offset) {
        before->second += bytes;
        return;
      }
    }
    free_[offset] = bytes;
  }

 private:
  bool reserve() {
    const size_t bytes = reservation_bytes();
    void *p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    base_ = static_cast<char *>(p);
    size_ = bytes;
    free_[0] = bytes;
    return true;
  }

  std::mutex lock_;
  char *base_ = nullptr;
  size_t size_ = 0;
  std::map<size_t, size_t> free_;
};

Reservation &reservation() {
  static Reservation *r = new Reservation;  // never destroyed: code may run at exit
  return *r;
}

class ReservationMapper final : public llvm::SectionMemoryManager::MemoryMapper {
 public:
  llvm::sys::MemoryBlock allocateMappedMemory(llvm::SectionMemoryManager::AllocationPurpose,
                                              size_t bytes, const llvm::sys::MemoryBlock *,
                                              unsigned flags, std::error_code &ec) override {
    ec = std::error_code();
    if (bytes == 0) return llvm::sys::MemoryBlock();
    const size_t page = page_size();
    bytes = (bytes + page - 1) / page * page;
    void *p = reservation().allocate(bytes, ec);
    if (!p) return llvm::sys::MemoryBlock();
    if (mprotect(p, bytes, protection(flags)) != 0) {
      ec = std::error_code(errno, std::generic_category());
      reservation().release(p, bytes);
      return llvm::sys::MemoryBlock();
    }
    return llvm::sys::MemoryBlock(p, bytes);
  }

  std::error_code protectMappedMemory(const llvm::sys::MemoryBlock &block,
                                      unsigned flags) override {
    if (!block.base() || block.allocatedSize() == 0) return std::error_code();
    const size_t page = page_size();
    const auto start = reinterpret_cast<uintptr_t>(block.base()) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(block.base()) + block.allocatedSize() +
                      page - 1) / page * page;
    if (mprotect(reinterpret_cast<void *>(start), end - start, protection(flags)) != 0) {
      return std::error_code(errno, std::generic_category());
    }
    if (flags & llvm::sys::Memory::MF_EXEC) {
      llvm::sys::Memory::InvalidateInstructionCache(block.base(), block.allocatedSize());
    }
    return std::error_code();
  }

  std::error_code releaseMappedMemory(llvm::sys::MemoryBlock &block) override {
    if (block.base() && block.allocatedSize()) {
      reservation().release(block.base(), block.allocatedSize());
    }
    block = llvm::sys::MemoryBlock();
    return std::error_code();
  }
};

// A SectionMemoryManager (one per loaded object, as LLJIT's default) drawing
// from the reservation. The mapper is a base before it: built first, destroyed
// after the manager has released its blocks through it.
struct MapperHolder {
  ReservationMapper mapper;
};

class ReservationMemoryManager final : private MapperHolder, public llvm::SectionMemoryManager {
 public:
  ReservationMemoryManager() : MapperHolder(), llvm::SectionMemoryManager(&mapper) {}
};

}  // namespace

void reservation_bounds(uintptr_t *base, size_t *size) { reservation().bounds(base, size); }

std::string room_problem(const std::vector<std::string_view> &objects) {
  // An upper bound of what RuntimeDyld asks the memory manager for: each loaded
  // section, with alignment padding twice (SectionMemoryManager adds one
  // alignment) and a page of rounding, stubs and GOT entries (at most 24 bytes
  // per relocation on x86-64), and a page per kind of memory; summed over a
  // bundle's objects (each gets blocks of its own).
  const size_t page = page_size();
  uint64_t bound = 0;
  for (const std::string_view object : objects) {
    auto parsed = llvm::object::ObjectFile::createObjectFile(
        llvm::MemoryBufferRef(llvm::StringRef(object.data(), object.size()), "derivative"));
    if (!parsed) {
      llvm::consumeError(parsed.takeError());
      return "";  // the load reports it
    }
    bound += 3 * page;
    const bool elf = llvm::isa<llvm::object::ELFObjectFileBase>(parsed->get());
    for (const llvm::object::SectionRef &section : (*parsed)->sections()) {
      uint64_t relocations = 0;
      for (auto it = section.relocation_begin(); it != section.relocation_end(); ++it) {
        ++relocations;
      }
      bound += 24 * relocations;
      // What RuntimeDyld loads: allocatable sections (not debug info, relocations).
      if (elf && !(llvm::object::ELFSectionRef(section).getFlags() & llvm::ELF::SHF_ALLOC)) {
        continue;
      }
      bound += section.getSize() + 2 * section.getAlignment() + page;
    }
  }
  const size_t largest = reservation().largest_free();
  if (bound <= largest) return "";
  return "the JIT's code reservation is full: this derivative's code needs up to " +
         std::to_string(bound / 1024) + " KiB, and its largest free range holds " +
         std::to_string(largest / 1024) + " KiB of " +
         std::to_string(reservation().size() >> 20) +
         " MiB (ENZYME_PY_JIT_RESERVATION_MIB). Derivatives no longer referenced give "
         "their code back at the next request: drop those you do not use, or run such "
         "work in a worker process";
}

namespace {

// ENZYME_PY_PERF=1: each loaded function is named in /tmp/perf-PID.map, which
// `perf report` reads, and its code is copied to /tmp/perf-PID-ADDRESS.bin (for
// `objdump -D -b binary -mi386:x86-64 --adjust-vma=ADDRESS`): profiles of
// derivatives name and show their code. A tool for measuring, off by default.
class PerfMapListener : public llvm::JITEventListener {
 public:
  void notifyObjectLoaded(ObjectKey, const llvm::object::ObjectFile &object,
                          const llvm::RuntimeDyld::LoadedObjectInfo &info) override {
    const std::lock_guard<std::mutex> hold(lock_);
    const std::string base = "/tmp/perf-" + std::to_string(getpid());
    std::FILE *map = std::fopen((base + ".map").c_str(), "a");
    if (!map) return;
    for (const auto &[symbol, size] : llvm::object::computeSymbolSizes(object)) {
      auto type = symbol.getType();
      auto name = symbol.getName();
      auto section = symbol.getSection();
      auto address = symbol.getAddress();
      if (!type || !name || !section || !address || size == 0) {
        llvm::consumeError(type.takeError());
        llvm::consumeError(name.takeError());
        llvm::consumeError(section.takeError());
        llvm::consumeError(address.takeError());
        continue;
      }
      if (*type != llvm::object::SymbolRef::ST_Function) continue;
      const uint64_t load = info.getSectionLoadAddress(**section);
      if (load == 0) continue;
      const uint64_t start = load + (*address - (*section)->getAddress());
      std::fprintf(map, "%llx %llx %s\n", static_cast<unsigned long long>(start),
                   static_cast<unsigned long long>(size), name->str().c_str());
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, "-%llx.bin", static_cast<unsigned long long>(start));
      if (std::FILE *code = std::fopen((base + suffix).c_str(), "wb")) {
        std::fwrite(reinterpret_cast<const void *>(start), 1, size, code);
        std::fclose(code);
      }
    }
    std::fclose(map);
  }

 private:
  std::mutex lock_;
};

llvm::JITEventListener &perf_map_listener() {
  static PerfMapListener listener;
  return listener;
}

}  // namespace

LLVMOrcObjectLayerRef create_object_layer(void *, LLVMOrcExecutionSessionRef session,
                                          const char *) {
  // LLJIT's own default for ELF on x86-64 (a RuntimeDyld layer), with this memory.
  auto &es = *reinterpret_cast<llvm::orc::ExecutionSession *>(session);
  auto *layer = new llvm::orc::RTDyldObjectLinkingLayer(
      es, [] { return std::make_unique<ReservationMemoryManager>(); });
  if (const char *perf = std::getenv("ENZYME_PY_PERF")) {
    if (std::string(perf) == "1") layer->registerJITEventListener(perf_map_listener());
  }
  return reinterpret_cast<LLVMOrcObjectLayerRef>(static_cast<llvm::orc::ObjectLayer *>(layer));
}

}  // namespace enzyme_py

// For measurements (scripts/memory_run.py, tests/test_jit_memory.py, through ctypes):
// the reservation's size, the bytes allocated in it, the bytes committed (resident
// pages), its number of free ranges and the largest; all 0 before the first load.
extern "C" __attribute__((visibility("default"))) void enzyme_py_jit_reservation(uint64_t *out) {
  enzyme_py::reservation().stats(out);
}
