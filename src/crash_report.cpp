#include "crash_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>

#include "jit_memory.h"

namespace enzyme_py {
namespace {

// Written under a lock by loads and unloads, read without one by the handler (a
// torn read there costs a wrong name in a report, nothing else).
constexpr size_t kRecords = 8192;
constexpr size_t kNameBytes = 56;
struct Record {
  uint64_t address;
  bool unloaded;
  char name[kNameBytes];
};
Record records[kRecords];
std::atomic<size_t> recorded{0};  // records written, oldest overwritten past kRecords
std::mutex records_lock;
// Nothing is recorded before install_crash_report (at import, before any load): loads
// and unloads of a process that did not ask for reports pay nothing.
std::atomic<bool> installed{false};

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
struct sigaction previous[4];

void put(const char *text) {
  ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void put_hex(uint64_t value) {
  char text[19] = "0x";
  for (int i = 0; i < 16; ++i) text[2 + i] = "0123456789abcdef"[(value >> (60 - 4 * i)) & 15];
  text[18] = '\0';
  put(text);
}

// The loaded entry point nearest below `pc` (code of one object follows its entry
// point, which the JIT places first in its code section), or null. Of records at the
// same address (code loaded where unloaded code was), the later one.
const Record *nearest_entry(uint64_t pc) {
  const size_t n = recorded.load(std::memory_order_acquire);
  const Record *best = nullptr;
  for (size_t i = 0; i < n && i < kRecords; ++i) {
    const Record &r = records[i];
    if (r.address <= pc && (!best || r.address >= best->address)) best = &r;
  }
  return best;
}

void describe(const char *what, uint64_t address) {
  put(what);
  put_hex(address);
  uintptr_t base = 0;
  size_t size = 0;
  reservation_bounds(&base, &size);
  if (base && address >= base && address < base + size) {
    put(" (in the JIT's code reservation");
    if (const Record *r = nearest_entry(address)) {
      put("; nearest entry below: ");
      put(r->name);
      put(" + ");
      put_hex(address - r->address);
      if (r->unloaded) put(", UNLOADED");
    }
    put(")");
  } else {
    Dl_info info;
    if (dladdr(reinterpret_cast<void *>(address), &info) && info.dli_fname) {
      put(" (in ");
      put(info.dli_fname);
      if (info.dli_sname) {
        put(": ");
        put(info.dli_sname);
      }
      put(")");
    }
  }
  put("\n");
}

void on_fatal_signal(int sig, siginfo_t *info, void *context) {
  put("\nenzyme_py: fatal signal ");
  char number[3] = {static_cast<char>('0' + sig / 10), static_cast<char>('0' + sig % 10), 0};
  put(sig < 10 ? number + 1 : number);
  put(". Please report it with what follows.\n");
  describe("  fault address ", reinterpret_cast<uint64_t>(info->si_addr));
  auto *uc = static_cast<ucontext_t *>(context);
#if defined(__x86_64__)
  describe("  instruction   ", static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]));
#else
  (void)uc;
#endif
  put("  native stack:\n");
  void *frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  // The previous handler runs when the instruction faults again on return.
  for (size_t i = 0; i < 4; ++i) {
    if (kSignals[i] == sig) sigaction(sig, &previous[i], nullptr);
  }
}

}  // namespace

void install_crash_report() {
  static std::once_flag once;
  std::call_once(once, [] {
    void *warm[1];
    backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
    static char stack[1 << 16];  // a handler that runs even on stack overflow
    stack_t alt{};
    alt.ss_sp = stack;
    alt.ss_size = sizeof stack;
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
      sigaltstack(&alt, nullptr);
    }
    struct sigaction action {};
    action.sa_sigaction = &on_fatal_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < 4; ++i) sigaction(kSignals[i], &action, &previous[i]);
    installed.store(true, std::memory_order_release);
  });
}

void note_loaded(const std::string &symbol, uint64_t address) {
  if (!installed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> hold(records_lock);
  const size_t n = recorded.load(std::memory_order_relaxed);
  Record &r = records[n % kRecords];
  r.address = address;
  r.unloaded = false;
  std::strncpy(r.name, symbol.c_str(), kNameBytes - 1);
  r.name[kNameBytes - 1] = '\0';
  recorded.store(n + 1, std::memory_order_release);
}

void note_unloaded(const std::string &symbol) {
  if (!installed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> hold(records_lock);
  const size_t n = recorded.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n && i < kRecords; ++i) {
    if (std::strncmp(records[i].name, symbol.c_str(), kNameBytes - 1) == 0) {
      records[i].unloaded = true;
    }
  }
}

}  // namespace enzyme_py
