#include "tape_prefault.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14's value, where the C library lacks it
#endif

namespace enzyme_py {
namespace {

constexpr size_t kPiece = size_t{256} << 10;

struct Range {
  char *next;
  char *end;
};

class Prefaulter {
 public:
  void add(char *begin, size_t bytes) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    // Whole pages inside the range: the call itself touches the partial ones.
    char *first = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(begin) + page - 1) /
                                           page * page);
    char *end = reinterpret_cast<char *>(reinterpret_cast<uintptr_t>(begin + bytes) / page *
                                         page);
    if (end <= first) return;
    std::lock_guard<std::mutex> hold(lock_);
    if (counts_.refused) return;
    ranges_.push_back({first, end});
    counts_.asked += static_cast<size_t>(end - first);
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();
    }
    work_.notify_one();
  }

  void forget(char *begin, size_t bytes) {
    char *end = begin + bytes;
    std::unique_lock<std::mutex> hold(lock_);
    // A range lies in one chunk, and chunks go back whole.
    for (Range &r : ranges_) {
      if (r.next < end && begin < r.end) r.next = r.end;
    }
    idle_.wait(hold, [&] { return !(busy_begin_ < end && begin < busy_end_); });
  }

  PrefaultCounts counts() {
    std::lock_guard<std::mutex> hold(lock_);
    return counts_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> hold(lock_);
    for (;;) {
      work_.wait(hold, [&] { return !ranges_.empty(); });
      Range r = ranges_.front();
      ranges_.pop_front();
      if (r.next >= r.end) continue;
      char *piece_end = r.end - r.next > static_cast<ptrdiff_t>(kPiece) ? r.next + kPiece : r.end;
      if (piece_end < r.end) ranges_.push_back({piece_end, r.end});  // the others' turn
      busy_begin_ = r.next;
      busy_end_ = piece_end;
      hold.unlock();
      const bool refused =
          madvise(r.next, static_cast<size_t>(piece_end - r.next), MADV_POPULATE_WRITE) != 0 &&
          errno == EINVAL;
      hold.lock();
      busy_begin_ = busy_end_ = nullptr;
      if (refused) {
        counts_.refused = true;
        ranges_.clear();
      } else {
        counts_.done += static_cast<size_t>(piece_end - r.next);
      }
      idle_.notify_all();
    }
  }

  std::mutex lock_;
  std::condition_variable work_, idle_;
  std::deque<Range> ranges_;
  char *busy_begin_ = nullptr, *busy_end_ = nullptr;
  bool started_ = false;
  PrefaultCounts counts_;
};

Prefaulter *&instance() {
  // Never destroyed: tapes are thread-local and may give chunks back at any exit.
  static Prefaulter *prefaulter = [] {
    // A child made by fork has the parent's object but not its thread (nor, maybe, a
    // usable lock): a new one, whose helper starts when first needed.
    pthread_atfork(nullptr, nullptr, [] { instance() = new Prefaulter; });
    return new Prefaulter;
  }();
  return prefaulter;
}

}  // namespace

void prefault_tape(char *begin, size_t bytes) { instance()->add(begin, bytes); }

void forget_prefault(char *begin, size_t bytes) { instance()->forget(begin, bytes); }

PrefaultCounts prefault_counts() { return instance()->counts(); }

}  // namespace enzyme_py
