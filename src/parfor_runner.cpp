#include "parfor_runner.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <pthread.h>
#include <thread>
#include <vector>

#include "arena.h"

namespace enzyme_py {
namespace {

thread_local int64_t chunk_index = 0;
std::atomic<int64_t> grain_limit{INT64_MAX};
// True on the pool's workers: what a chunk allocates there is theirs to free after
// it. On the caller's thread (task 0, and every task when the pool is busy) it belongs
// to the derivative call, freed with the call's other temporaries.
thread_local bool on_worker = false;
// True while this thread runs a task of a launch (the caller's task 0 included): a
// fused loop there runs on it alone (the launch holds the pool).
thread_local bool in_task = false;

// A task run with in_task set.
void as_task(const std::function<void(int64_t)> &task, int64_t t) {
  const bool outer = in_task;
  in_task = true;
  task(t);
  in_task = outer;
}

// Workers that run task 1..n-1 of a launch while the caller runs task 0. One launch
// at a time: a launch that finds the pool busy (another Python thread's derivative)
// runs all its tasks on its own thread. Launches come in bursts (a derivative's
// forward and reverse passes, a loop of steps), so a worker that finished, and the
// caller waiting for the workers, spin a little before they sleep: waking a sleeping
// thread cost about 0.4 ms on a 2-core machine. So the caller, its own task done,
// runs the tasks no worker has taken yet itself, and waits only for those a worker
// runs: gradients called 1 ms apart (workers asleep by then) took 135-220 us on the
// pool, 36 us on one thread (Rosenbrock, 2 x 10^5, each call a fused loop's launch).
class Pool {
 public:
  static Pool &get() { return *instance(); }

  // task(t) for t in [0, tasks), each once; task 0, and any no worker has taken when
  // it ends, on this thread.
  void run(int64_t tasks, const std::function<void(int64_t)> &task) {
    std::unique_lock<std::mutex> launch(launch_, std::try_to_lock);
    if (tasks <= 1 || tasks > kMostTasks || !launch.owns_lock()) {
      for (int64_t t = 0; t < tasks; ++t) as_task(task, t);
      return;
    }
    uint64_t generation = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (static_cast<int64_t>(workers_.size()) < tasks - 1) {
        const int64_t index = static_cast<int64_t>(workers_.size()) + 1;
        workers_.emplace_back([this, index] { work(index); });
        workers_.back().detach();
      }
      generation = generation_.load(std::memory_order_relaxed) + 1;
      for (int64_t t = 1; t < tasks; ++t) {
        open_[t].store(generation << 1, std::memory_order_relaxed);
      }
      task_ = &task;
      tasks_ = tasks;
      pending_.store(tasks - 1, std::memory_order_relaxed);
      generation_.store(generation, std::memory_order_release);
    }
    wake_.notify_all();
    as_task(task, 0);
    for (int64_t t = 1; t < tasks; ++t) {
      if (!take(t, generation)) continue;  // a worker runs it
      as_task(task, t);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    for (int spin = 0; spin < kSpins && pending_.load(std::memory_order_acquire) != 0; ++spin) {
      relax();
    }
    if (pending_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
  }

 private:
  static constexpr int kSpins = 4000;
  // More tasks than this run on the caller's thread (no launch asks for so many).
  static constexpr int64_t kMostTasks = 1024;

  // Task t of launch `generation`, for the thread that takes it first: the caller or
  // the worker of that index. open_[t] holds 2 * generation while the task is open,
  // one more once taken; a worker still on an older launch takes nothing.
  bool take(int64_t t, uint64_t generation) {
    uint64_t open = generation << 1;
    return open_[t].compare_exchange_strong(open, open | 1, std::memory_order_acq_rel);
  }

  // Never destroyed: workers outlive static teardown. A child made by fork has none
  // of the workers, and may have a copy of a lock a parent's thread held: it leaves
  // its parent's pool alone and starts one of its own (multiprocessing's workers
  // calling a gradient their parent had called hung waiting for workers).
  static Pool *&instance() {
    static Pool *pool = [] {
      pthread_atfork(nullptr, nullptr, [] { instance() = new Pool; });
      return new Pool;
    }();
    return pool;
  }

  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void work(int64_t index) {
    on_worker = true;
    uint64_t seen = 0;
    for (;;) {
      for (int spin = 0;
           spin < kSpins && generation_.load(std::memory_order_acquire) == seen; ++spin) {
        relax();
      }
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      const std::function<void(int64_t)> *task;
      int64_t tasks;
      {
        // The launch's generation with its task, together: read apart, a worker
        // could take the next launch's task as this one's and run it twice.
        std::unique_lock<std::mutex> lock(mutex_);
        seen = generation_.load(std::memory_order_acquire);
        task = task_;
        tasks = tasks_;
      }
      // The task pointer is used only once the task is taken: the caller may have run
      // every task itself and returned.
      if (index >= tasks || !take(index, seen)) continue;
      as_task(*task, index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        done_.notify_one();
      }
    }
  }

  std::mutex launch_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)> *task_ = nullptr;
  int64_t tasks_ = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> open_{new std::atomic<uint64_t>[kMostTasks]{}};
  std::atomic<int64_t> pending_{0};
  std::atomic<uint64_t> generation_{0};
};

// [first, last] cut into `parts` contiguous chunks (fewer where the range is
// shorter, or chunks would be shorter than `grain`), run by up to `workers` threads
// (one where the range starts below 0).
struct Chunks {
  int64_t first, count, parts, workers;
  Chunks(int64_t first_, int64_t last, int64_t parts_, int64_t workers_, int64_t grain)
      : first(first_) {
    count = last >= first_ ? last - first_ + 1 : 0;
    grain = std::max<int64_t>(1, std::min(grain, grain_limit.load(std::memory_order_relaxed)));
    parts = std::max<int64_t>(1, std::min<int64_t>({parts_, count, count / grain}));
    workers = std::max<int64_t>(1, std::min<int64_t>(workers_, parts));
    // Negative indices wrap around (Numba's a[i] for i < 0 is a[n + i]): what an index
    // touches was worked out for i >= 0 (index_reach), so such a range runs its chunks
    // on one thread, in order.
    if (first < 0) workers = 1;
  }
  int64_t begin(int64_t c) const { return first + count / parts * c + std::min(c, count % parts); }
  int64_t end(int64_t c) const { return begin(c + 1) - 1; }  // inclusive
  int64_t shortest() const { return count / parts; }
};

// The chunks of a pass that worker w of `workers` runs: a contiguous share of `wave`.
std::vector<int64_t> share(const std::vector<int64_t> &wave, int64_t w, int64_t workers) {
  const auto n = static_cast<int64_t>(wave.size());
  return {wave.begin() + n * w / workers, wave.begin() + n * (w + 1) / workers};
}

// Chunks from `first` on, every `step`-th.
std::vector<int64_t> every(int64_t first, int64_t step, int64_t parts) {
  std::vector<int64_t> out;
  for (int64_t c = first; c < parts; c += step) out.push_back(c);
  return out;
}

// fn() with a failed allocation ending it (0, else the bytes asked for); on a worker,
// what the chunk allocated is freed after it.
size_t guarded(int64_t t, const std::function<void()> &fn) {
  struct Call {
    const std::function<void()> *fn;
    static void trampoline(void *self) { (*static_cast<Call *>(self)->fn)(); }
  } call{&fn};
  const int64_t outer = chunk_index;
  chunk_index = t;
  const size_t failed = run_guarded(&Call::trampoline, &call);
  chunk_index = outer;
  if (on_worker) arena_release();
  return failed;
}

// After every task ended: a failed allocation ends the derivative call as on one
// thread.
void raise_failure(const std::vector<size_t> &failed) {
  for (size_t bytes : failed) {
    if (bytes) fail_allocation(bytes);
  }
}

// Where a chunk's body failed (Numba's status, not 0), the derivative call ends
// with the first such chunk's status and exception (fail_from_loop). Returns
// whether one failed: outside a derivative call, fail_from_loop returns.
bool end_with_failed_body(const std::vector<int32_t> &status,
                          const std::vector<void *> &exception) {
  for (size_t c = 0; c < status.size(); ++c) {
    if (status[c] != 0) {
      fail_from_loop(status[c], reinterpret_cast<int64_t>(exception[c]));
      return true;
    }
  }
  return false;
}

// A shadow of a reverse pass and how its threads use it (ParforShadow), decided
// for this pass.
struct Private {
  int64_t slot, bytes, kind;
};

// Zeroed copies of the private shadows of `plan` for worker w, in slots: kept by this
// thread between launches (a fresh mapping per launch costs a page fault per page),
// one set per worker index (a busy pool runs every worker's share on one thread).
void give_copies(int64_t w, std::vector<int64_t> &slots, const std::vector<Private> &plan) {
  thread_local std::vector<std::vector<std::vector<char>>> kept;
  if (static_cast<int64_t>(kept.size()) <= w) kept.resize(w + 1);
  auto &mine = kept[w];
  if (mine.size() < plan.size()) mine.resize(plan.size());
  for (size_t p = 0; p < plan.size(); ++p) {
    const auto [slot, bytes, kind] = plan[p];
    if (kind == kParforShared || (w == 0 && kind != kParforDrop)) continue;  // the shadow
    auto &copy = mine[p];
    if (copy.size() < static_cast<size_t>(bytes) + 64) {
      try {
        copy.assign(static_cast<size_t>(bytes) + 64, 0);
      } catch (const std::bad_alloc &) {
        fail_allocation(static_cast<size_t>(bytes));
        return;
      }
    }
    // 64-aligned within the vector, zeroed.
    auto address = reinterpret_cast<uintptr_t>(copy.data());
    char *aligned = copy.data() + ((64 - address % 64) % 64);
    std::memset(aligned, 0, static_cast<size_t>(bytes));
    slots[slot] = reinterpret_cast<int64_t>(aligned);
  }
}

// Whether the memory of two shadows (a Const array's aside: never written) overlaps.
bool shadows_overlap(const int64_t *shadows, const int64_t *privates, int64_t count) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (int64_t p = 0; p < count; ++p) {
    const int64_t slot = privates[4 * p], bytes = privates[4 * p + 1];
    if (privates[4 * p + 2] == kParforDrop || bytes <= 0) continue;
    const auto at = static_cast<uint64_t>(shadows[slot]);
    spans.emplace_back(at, at + static_cast<uint64_t>(bytes));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t k = 1; k < spans.size(); ++k) {
    if (spans[k].first < spans[k - 1].second) return true;
  }
  return false;
}

template <typename T>
void add_into(T *to, const T *from, size_t n) {
  for (size_t i = 0; i < n; ++i) to[i] += from[i];
}

}  // namespace

void zero_in_shares(const std::vector<std::pair<uint64_t, uint64_t>> &spans, int64_t threads) {
  threads = std::max<int64_t>(1, threads);
  Pool::get().run(threads, [&](int64_t w) {
    for (const auto &[address, bytes] : spans) {
      // Shares cut on 64-byte boundaries: no cache line written by two threads.
      auto cut = [&, address = address, bytes = bytes](int64_t part) {
        if (part == 0) return address;
        if (part == threads) return address + bytes;
        const uint64_t at = (address + bytes / threads * part) / 64 * 64;
        return std::clamp(at, address, address + bytes);
      };
      const uint64_t low = cut(w), high = cut(w + 1);
      if (high > low) std::memset(reinterpret_cast<void *>(low), 0, high - low);
    }
  });
}

int64_t set_parfor_grain_limit(int64_t limit) {
  return grain_limit.exchange(limit > 0 ? limit : INT64_MAX);
}

std::map<std::string, uint64_t> parfor_symbols() {
  return {
      {"__enzyme_py_parfor_thread", reinterpret_cast<uint64_t>(&enzyme_py_parfor_thread)},
      {"__enzyme_py_parfor_run", reinterpret_cast<uint64_t>(&enzyme_py_parfor_run)},
      {"__enzyme_py_parfor_reverse", reinterpret_cast<uint64_t>(&enzyme_py_parfor_reverse)},
      {"__enzyme_py_parfor_snapshot", reinterpret_cast<uint64_t>(&enzyme_py_parfor_snapshot)},
      {"__enzyme_py_parfor_check", reinterpret_cast<uint64_t>(&enzyme_py_parfor_check)},
      {"__enzyme_py_parfor_fail", reinterpret_cast<uint64_t>(&enzyme_py_parfor_fail)},
      {"__enzyme_py_fused_run", reinterpret_cast<uint64_t>(&enzyme_py_fused_run)},
  };
}

}  // namespace enzyme_py

using enzyme_py::Chunks;

extern "C" int64_t enzyme_py_parfor_thread() { return enzyme_py::chunk_index; }

extern "C" void enzyme_py_parfor_fail(int64_t status, int64_t exception) {
  enzyme_py::fail_from_loop(status, exception);
}

extern "C" void enzyme_py_fused_run(ParforChunk chunk, int64_t *slots, int64_t count,
                                    int64_t workers) {
  // (hardware_concurrency reads /sys on each call: once per step of heat's time loop
  // was most of its gradient.)
  static const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  if (workers <= 0) workers = cores;
  const int64_t grain = std::min(enzyme_py::kFusedGrain,
                                 enzyme_py::grain_limit.load(std::memory_order_relaxed));
  // Nested in a launch, or too short for two threads: all on this thread.
  if (workers == 1 || enzyme_py::in_task || count < 2 * grain) {
    void *exception = nullptr;
    chunk(slots, 0, count - 1, &exception);
    return;
  }
  enzyme_py_parfor_run(chunk, slots, 0, count - 1, workers, workers, grain);
}

extern "C" void enzyme_py_parfor_run(ParforChunk chunk, int64_t *slots, int64_t first,
                                     int64_t last, int64_t parts, int64_t workers,
                                     int64_t grain) {
  const Chunks chunks(first, last, parts, workers, grain);
  if (chunks.count == 0) return;
  std::vector<int32_t> status(chunks.parts, 0);
  std::vector<void *> exception(chunks.parts, nullptr);
  std::vector<size_t> failed(chunks.parts, 0);
  const auto all = enzyme_py::every(0, 1, chunks.parts);
  enzyme_py::Pool::get().run(chunks.workers, [&](int64_t w) {
    for (int64_t c : enzyme_py::share(all, w, chunks.workers)) {
      failed[c] = enzyme_py::guarded(c, [&] {
        status[c] = chunk(slots, chunks.begin(c), chunks.end(c), &exception[c]);
      });
    }
  });
  enzyme_py::raise_failure(failed);
  enzyme_py::end_with_failed_body(status, exception);
}

extern "C" void enzyme_py_parfor_reverse(ParforReverseChunk chunk, int64_t *slots,
                                         int64_t *shadows, int64_t slot_count,
                                         const int64_t *privates, int64_t count,
                                         int64_t first, int64_t last, int64_t parts,
                                         int64_t threads, int64_t grain) {
  using enzyme_py::Private;
  Chunks chunks(first, last, parts, threads, grain);
  if (chunks.count == 0) return;
  // Overlapping shadows (one array passed twice, or two views of one): one thread,
  // every shadow in place, as the serial derivative.
  if (enzyme_py::shadows_overlap(shadows, privates, count)) chunks.workers = 1;
  // Each shadow's use in this pass: a summed one in place where the loop's indices
  // own its entries and the chunks are long enough for two waves to keep apart.
  std::vector<Private> plan;
  bool waves = false;
  for (int64_t p = 0; p < count; ++p) {
    Private entry{privates[4 * p], privates[4 * p + 1], privates[4 * p + 2]};
    const int64_t reach = privates[4 * p + 3];
    const bool summed = entry.kind == kParforSumFloat64 || entry.kind == kParforSumFloat32;
    if (summed && chunks.workers > 1 && reach >= 0 && reach <= chunks.shortest()) {
      entry.kind = kParforShared;
      waves = waves || reach > 0;
    }
    plan.push_back(entry);
  }
  const int64_t workers = chunks.workers;
  // Per worker: its shadow slots, the private ones pointing at zeroed copies of its
  // own (made by the worker itself, in memory its thread keeps for the next launch).
  std::vector<std::vector<int64_t>> own(workers);
  for (auto &slots_of : own) slots_of.assign(shadows, shadows + slot_count);
  std::vector<size_t> failed(chunks.parts, 0), copies_failed(workers, 0);
  std::vector<int32_t> status(chunks.parts, 0);
  std::vector<void *> exception(chunks.parts, nullptr);
  auto &pool = enzyme_py::Pool::get();
  std::vector<std::vector<int64_t>> passes;
  if (waves) {
    passes = {enzyme_py::every(0, 2, chunks.parts), enzyme_py::every(1, 2, chunks.parts)};
  } else {
    passes = {enzyme_py::every(0, 1, chunks.parts)};
  }
  for (size_t pass = 0; pass < passes.size(); ++pass) {
    pool.run(workers, [&](int64_t w) {
      if (pass == 0) {
        copies_failed[w] =
            enzyme_py::guarded(0, [&] { enzyme_py::give_copies(w, own[w], plan); });
      }
      if (copies_failed[w]) return;
      for (int64_t c : enzyme_py::share(passes[pass], w, workers)) {
        failed[c] = enzyme_py::guarded(c, [&] {
          status[c] = chunk(slots, own[w].data(), chunks.begin(c), chunks.end(c), &exception[c]);
        });
      }
    });
  }
  // A chunk that failed ends the call before any copy is added (a copy never made
  // would leave the shadow's own slot, added into itself).
  enzyme_py::raise_failure(copies_failed);
  enzyme_py::raise_failure(failed);
  if (enzyme_py::end_with_failed_body(status, exception)) return;
  // The copies added into the shared shadows, each thread a part of every shadow.
  const bool summed = workers > 1 && std::any_of(plan.begin(), plan.end(), [](const Private &e) {
    return e.kind == kParforSumFloat64 || e.kind == kParforSumFloat32;
  });
  if (!summed) return;
  pool.run(workers, [&](int64_t t) {
    for (const Private &entry : plan) {
      if (entry.kind != kParforSumFloat64 && entry.kind != kParforSumFloat32) continue;
      const size_t size = entry.kind == kParforSumFloat64 ? sizeof(double) : sizeof(float);
      const size_t n = static_cast<size_t>(entry.bytes) / size;
      const size_t lo = n * t / workers, hi = n * (t + 1) / workers;
      for (int64_t u = 1; u < workers; ++u) {
        if (entry.kind == kParforSumFloat64) {
          enzyme_py::add_into(reinterpret_cast<double *>(shadows[entry.slot]) + lo,
                              reinterpret_cast<const double *>(own[u][entry.slot]) + lo,
                              hi - lo);
        } else {
          enzyme_py::add_into(reinterpret_cast<float *>(shadows[entry.slot]) + lo,
                              reinterpret_cast<const float *>(own[u][entry.slot]) + lo,
                              hi - lo);
        }
      }
    }
  });
}

extern "C" void enzyme_py_parfor_check(const int64_t *slots, const int64_t *arrays,
                                       int64_t count) {
  for (int64_t a = 0; a < count; ++a) {
    if (!arrays[3 * a + 2]) continue;  // only read
    const auto lo = static_cast<uint64_t>(slots[arrays[3 * a]]);
    const auto hi = lo + static_cast<uint64_t>(arrays[3 * a + 1]);
    for (int64_t b = 0; b < count; ++b) {
      const auto other_lo = static_cast<uint64_t>(slots[arrays[3 * b]]);
      const auto other_hi = other_lo + static_cast<uint64_t>(arrays[3 * b + 1]);
      if (b != a && lo < other_hi && other_lo < hi) {
        enzyme_py::fail_from_loop(kParforOverlap, 0);
        return;  // outside a derivative call: nothing to end
      }
    }
  }
}

extern "C" int64_t *enzyme_py_parfor_snapshot(const int64_t *slots, int64_t slot_count,
                                              const int64_t *copies, int64_t count) {
  const size_t head = (static_cast<size_t>(slot_count) * sizeof(int64_t) + 63) / 64 * 64;
  size_t bytes = head;
  for (int64_t c = 0; c < count; ++c) {
    if (copies[2 * c] >= 0) bytes += (static_cast<size_t>(copies[2 * c + 1]) + 63) / 64 * 64;
  }
  // On the tape: a time loop snapshots at every step, and blocks of their own came
  // as fresh pages each call (heat: a page fault per 4 KiB, most of the call's time).
  auto *block = static_cast<char *>(enzyme_py::tape_block(bytes));
  if (!block) return nullptr;
  auto *out = reinterpret_cast<int64_t *>(block);
  std::memcpy(out, slots, static_cast<size_t>(slot_count) * sizeof(int64_t));
  char *next = block + head;
  for (int64_t c = 0; c < count; ++c) {
    const int64_t slot = copies[2 * c];
    if (slot < 0) continue;  // memory nothing overwrites before the reverse pass
    const auto size = static_cast<size_t>(copies[2 * c + 1]);
    std::memcpy(next, reinterpret_cast<const void *>(slots[slot]), size);
    out[slot] = reinterpret_cast<int64_t>(next);
    next += (size + 63) / 64 * 64;
  }
  return out;
}
