// Compiled without RTTI, as LLVM is (this file subclasses LLVM's classes).
#include "jit_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/SectionMemoryManager.h>
#include <llvm/Support/Memory.h>

namespace enzyme_py {
namespace {

// 1 GiB of address space (reserved, not committed: pages cost memory only once
// code is written into them). Any two addresses in it are closer than 2 GiB.
constexpr size_t kReservation = size_t{1} << 30;

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
    void *p = mmap(nullptr, kReservation, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    base_ = static_cast<char *>(p);
    free_[0] = kReservation;
    return true;
  }

  std::mutex lock_;
  char *base_ = nullptr;
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

LLVMOrcObjectLayerRef create_object_layer(void *, LLVMOrcExecutionSessionRef session,
                                          const char *) {
  // LLJIT's own default for ELF on x86-64 (a RuntimeDyld layer), with this memory.
  auto &es = *reinterpret_cast<llvm::orc::ExecutionSession *>(session);
  auto *layer = new llvm::orc::RTDyldObjectLinkingLayer(
      es, [] { return std::make_unique<ReservationMemoryManager>(); });
  return reinterpret_cast<LLVMOrcObjectLayerRef>(static_cast<llvm::orc::ObjectLayer *>(layer));
}

}  // namespace enzyme_py
