#include "isolation.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "enzyme_hooks.h"

namespace enzyme_py {

namespace {

// The child's answer travels through a memfd as length-prefixed fields.
enum ChildStatus : uint64_t {
  kOk = 0,
  kEnzymeFailure = 1,
  kInvalidArgument = 2,
  kError = 3,
  kOutOfMemory = 4,
};

void put_field(std::string &buf, const std::string &field) {
  uint64_t n = field.size();
  buf.append(reinterpret_cast<const char *>(&n), sizeof n);
  buf.append(field);
}

bool get_field(const std::string &buf, size_t &at, std::string &field) {
  uint64_t n = 0;
  if (at + sizeof n > buf.size()) return false;
  std::memcpy(&n, buf.data() + at, sizeof n);
  at += sizeof n;
  if (n > buf.size() - at) return false;
  field.assign(buf.data() + at, n);
  at += n;
  return true;
}

bool write_all(int fd, const std::string &data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string read_all(int fd) {
  std::string data;
  ::lseek(fd, 0, SEEK_SET);
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(chunk, static_cast<size_t>(n));
  }
  return data;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string tail(const std::string &text, size_t max_chars) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t.size() <= max_chars ? t : "..." + t.substr(t.size() - max_chars);
}

// `text` without the functions Enzyme v0.0.289 prints whenever it takes a custom
// augmented forward pass that returns a tape alone (" aug: todiff: <function>" then
// "aug foundcalled: <function>", on a successful build): a prange loop's launch rule
// printed about 800 lines of IR into ENZYME_PY_LOG=1's output and into the tail of
// a failed build's message, hiding what that build said.
std::string without_rule_dumps(std::string text) {
  static const std::string kStart = " aug: todiff: ", kRule = "aug foundcalled: ";
  for (size_t at = text.find(kStart); at != std::string::npos; at = text.find(kStart, at)) {
    const size_t rule = text.find(kRule, at);
    const size_t close = rule == std::string::npos ? rule : text.find("\n}\n", rule);
    if (close == std::string::npos) break;  // not as printed: left whole
    text.erase(at, close + 3 - at);
  }
  return text;
}

// Exit statuses of the build child when its result cannot be written.
constexpr int kExitResultTooBig = 120;  // EFBIG: over RLIMIT_FSIZE (ulimit -f)
constexpr int kExitWriteFailed = 121;

// Hooks for the test suite (ENZYME_PY_TEST_CRASH_IN_BUILD), run in the child:
// prove that what happens there cannot reach the caller.
void simulate_in_child(const std::string &what) {
  std::fprintf(stderr, "simulated crash: %s\n", what.c_str());
  if (what == "sigkill") ::raise(SIGKILL);  // as the out-of-memory killer does
  if (what == "segv") ::raise(SIGSEGV);
  if (what == "sleep") {
    ::sleep(60);  // a slow build, to interrupt
    return;
  }
  if (what == "memory") {
    // Exhaust a memory limit for real: std::bad_alloc, as a huge width gives.
    // The limit: what the child maps now, plus 256 MiB.
    unsigned long pages = 0;
    if (FILE *statm = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(statm, "%lu", &pages) != 1) pages = 0;
      std::fclose(statm);
    }
    rlim_t bytes = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
    struct rlimit limit{bytes + (256u << 20), bytes + (256u << 20)};
    ::setrlimit(RLIMIT_AS, &limit);
    std::vector<std::unique_ptr<char[]>> hog;
    for (;;) {
      hog.emplace_back(new char[16u << 20]);
      std::memset(hog.back().get(), 1, 16u << 20);
    }
  }
  if (what == "interrupt_after") return;  // builds; Ctrl-C once the result is written
  std::abort();
}

bool crash_signal(int sig) {
  return sig == SIGABRT || sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE;
}

// How a wait for the build child ended.
enum class ChildEnd {
  kResult,       // it wrote its whole result (it still runs, about to exit)
  kExited,       // it exited (or died) without saying so; `wstatus` tells how
  kInterrupted,  // `interrupted` said so: it was killed and reaped
};

// Waits until the child says on `done` that its result is written, or exits;
// polls `interrupted` (if given) every ~10 ms; what `while_waiting` returns is held
// while it waits. A child that wrote its result is not waited for: tearing down its copy
// of this process took 4-5 ms (heat's first derivative); reap_later() reaps it.
ChildEnd wait_for_child(pid_t pid, int done, int &wstatus, const std::function<bool()> &interrupted,
                        const std::function<std::shared_ptr<void>()> &while_waiting) {
  Fd exited;
#ifdef SYS_pidfd_open
  exited.fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  // Without a pidfd, another child forked meanwhile may hold `done` open, so its
  // end of file says nothing: poll for the exit then.
  const int timeout_ms = interrupted || exited.fd < 0 ? 10 : -1;
  for (;;) {
    struct pollfd ends[2] = {{done, POLLIN, 0}, {exited.fd, POLLIN, 0}};
    {
      std::shared_ptr<void> waiting = while_waiting ? while_waiting() : nullptr;
      ::poll(ends, exited.fd >= 0 ? 2 : 1, timeout_ms);  // or woken by a signal
    }
    char byte = 0;
    if ((ends[0].revents & POLLIN) && ::read(done, &byte, 1) == 1) return ChildEnd::kResult;
    const pid_t reaped = ::waitpid(pid, &wstatus, WNOHANG);
    if (reaped == pid) return ChildEnd::kExited;
    if (reaped < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    }
    if (interrupted && interrupted()) {
      if (::waitpid(pid, &wstatus, WNOHANG) != pid) {
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
        }
      }
      return ChildEnd::kInterrupted;
    }
  }
}

// Reaps a child that has written its result, off the caller's path (in the
// caller's, if no thread can be started). Until then the exiting child is, for a few
// milliseconds, one that a wait for any child (os.wait()) could collect.
void reap_later(pid_t pid) {
  const auto reap = [pid] {
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  };
  try {
    std::thread(reap).detach();
  } catch (const std::system_error &) {
    reap();
  }
}

// The child's result: status, then the artifact's fields (or a message), then
// kEndMark, so that a reader tells a complete result from a partial one.
constexpr uint64_t kEndMark = 0x454e445f52455355ull;

bool parse_result(const std::string &buf, uint64_t &status, std::string &message, Artifact &art) {
  size_t at = sizeof status;
  if (buf.size() < at + sizeof kEndMark) return false;
  std::memcpy(&status, buf.data(), sizeof status);
  if (status == kOk) {
    for (std::string *f : {&art.object, &art.entry_name, &art.in_slots, &art.out_slots,
                           &art.enzyme_ir, &art.derivative_module, &art.optimized_ir}) {
      if (!get_field(buf, at, *f)) return false;
    }
  } else if (!get_field(buf, at, message)) {
    return false;
  }
  uint64_t end = 0;
  if (buf.size() != at + sizeof end) return false;
  std::memcpy(&end, buf.data() + at, sizeof end);
  return end == kEndMark;
}

std::string how_child_died(int wstatus) {
  if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    std::string how = "was killed by signal " + std::to_string(sig);
    if (sig == SIGABRT) return how + " (an assertion or abort)";
    if (sig == SIGSEGV) return how + " (a segmentation fault)";
    if (sig == SIGKILL) {
      return how + " (SIGKILL: the kernel's out-of-memory killer does this to a build "
                   "that takes all memory; not retried)";
    }
    return how;
  }
  int code = WEXITSTATUS(wstatus);
  if (code == kExitResultTooBig) {
    return "could not write its result: it is larger than the file size limit "
           "(RLIMIT_FSIZE, `ulimit -f`), which applies to the memory file the result "
           "travels through. Raise the limit (`ulimit -f unlimited`) or build in this "
           "process (ENZYME_PY_ISOLATE=0)";
  }
  if (code == kExitWriteFailed) return "could not write its result (a write error)";
  return "exited with status " + std::to_string(code) + " (Enzyme gave up)";
}

}  // namespace

Artifact build_in_child(const std::string &function, const std::function<void()> &setup,
                        const std::function<Artifact()> &build,
                        const std::function<bool()> &interrupted,
                        const std::function<std::shared_ptr<void>()> &while_waiting) {
  Fd result{static_cast<int>(::syscall(SYS_memfd_create, "enzyme_py_result", 0))};
  Fd errors{static_cast<int>(::syscall(SYS_memfd_create, "enzyme_py_stderr", 0))};
  if (result.fd < 0 || errors.fd < 0) {
    throw std::runtime_error(std::string("memfd_create failed: ") + std::strerror(errno));
  }
  int done_pipe[2] = {-1, -1};
  if (::pipe2(done_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2 failed: ") + std::strerror(errno));
  }
  Fd done{done_pipe[0]};
  Fd done_writer{done_pipe[1]};
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The child: no Python, no destructors, no atexit handlers; only _exit.
    ::dup2(errors.fd, STDERR_FILENO);
    // A crash here ends the child plainly: no Python faulthandler report.
    for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE}) ::signal(sig, SIG_DFL);
    // Nor a core file: the parent reports the crash and retries (a core of this
    // process's size, in the user's folder, for each crash Enzyme has, would be litter).
    const struct rlimit no_core = {0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    // Writing past RLIMIT_FSIZE then fails with EFBIG, reported as such.
    ::signal(SIGXFSZ, SIG_IGN);
    // Ctrl-C is the parent's to handle: it kills this child.
    ::signal(SIGINT, SIG_IGN);
    setup();
    // For the test suite: a build that takes this long (the progress line of long builds).
    if (const char *ms = std::getenv("ENZYME_PY_TEST_SLOW_BUILD_MS")) {
      ::usleep(1000u * static_cast<unsigned>(std::atoi(ms)));
    }
    std::string buf;
    uint64_t status = kOk;
    std::string message;
    Artifact art;
    try {
      if (const char *what = std::getenv("ENZYME_PY_TEST_CRASH_IN_BUILD")) simulate_in_child(what);
      art = build();
    } catch (const std::bad_alloc &) {
      status = kOutOfMemory;
      message = "Enzyme ran out of memory while differentiating '" + function +
                "' (std::bad_alloc in the isolated build process; not retried)";
    } catch (const EnzymeFailure &e) {
      status = kEnzymeFailure;
      message = e.what();
    } catch (const std::invalid_argument &e) {
      status = kInvalidArgument;
      message = e.what();
    } catch (const std::exception &e) {
      status = kError;
      message = e.what();
    }
    buf.append(reinterpret_cast<const char *>(&status), sizeof status);
    if (status == kOk) {
      for (const std::string *f : {&art.object, &art.entry_name, &art.in_slots, &art.out_slots,
                                   &art.enzyme_ir, &art.derivative_module, &art.optimized_ir}) {
        put_field(buf, *f);
      }
    } else {
      put_field(buf, message);
    }
    buf.append(reinterpret_cast<const char *>(&kEndMark), sizeof kEndMark);
    if (write_all(result.fd, buf)) {
      const char *what = std::getenv("ENZYME_PY_TEST_CRASH_IN_BUILD");
      if (what && std::string(what) == "interrupt_after") {
        ::kill(::getppid(), SIGINT);
        ::sleep(60);  // still running when the parent sees the interrupt
      }
      const char byte = 1;
      ssize_t said = -1;
      do {
        said = ::write(done_writer.fd, &byte, 1);
      } while (said < 0 && errno == EINTR);
      ::_exit(0);
    }
    ::_exit(errno == EFBIG ? kExitResultTooBig : kExitWriteFailed);
  }
  ::close(done_writer.fd);  // the child's alone: its exit ends the pipe
  done_writer.fd = -1;
  int wstatus = 0;
  const ChildEnd end = wait_for_child(pid, done.fd, wstatus, interrupted, while_waiting);
  if (end == ChildEnd::kResult) reap_later(pid);
  const bool interrupt = end == ChildEnd::kInterrupted;
  std::string child_stderr = without_rule_dumps(read_all(errors.fd));
  if (!child_stderr.empty() && log_enabled()) std::fputs(child_stderr.c_str(), stderr);
  uint64_t status = kError;
  std::string message;
  Artifact art;
  bool complete = parse_result(read_all(result.fd), status, message, art);
  if (interrupt) {
    // A finished build keeps its result; the caller reports the interrupt after.
    if (!complete || status != kOk) throw BuildInterrupted();
    art.interrupted = true;
    return art;
  }
  if (end == ChildEnd::kExited && (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)) {
    std::string text = "Enzyme crashed while differentiating '" + function +
                       "' (the isolated build process " + how_child_died(wstatus) +
                       "); the process that asked lives on. Enzyme's last output:\n" +
                       tail(child_stderr, 4000);
    if (WIFSIGNALED(wstatus) && crash_signal(WTERMSIG(wstatus))) throw BuildCrashed(text);
    throw EnzymeFailure(text);
  }
  if (!complete) throw std::runtime_error("the build process sent an incomplete result");
  if (status == kEnzymeFailure || status == kOutOfMemory) throw EnzymeFailure(message);
  if (status == kInvalidArgument) throw std::invalid_argument(message);
  if (status != kOk) throw std::runtime_error(message);
  return art;
}

}  // namespace enzyme_py
