#include "enzyme_pass.h"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/PassPlugin.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include "enzyme_plugin.h"
#include "rewrites.h"

namespace enzyme_py {
namespace {

// In the child: parse, run the pass, print. Any failure is a message on stderr
// and a non-zero exit.
std::string transform(const std::string &plugin_path, const std::string &ir_text) {
  llvm::LLVMContext ctx;
  ctx.setOpaquePointers(false);
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> mod =
      llvm::parseIR(llvm::MemoryBufferRef(ir_text, "source"), diag, ctx);
  if (!mod) throw std::runtime_error("the IR does not parse: " + diag.getMessage().str());
  llvm::Expected<llvm::PassPlugin> plugin = llvm::PassPlugin::Load(plugin_path);
  if (!plugin) throw std::runtime_error(llvm::toString(plugin.takeError()));
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb;
  plugin->registerPassBuilderCallbacks(pb);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  if (llvm::Error err = pb.parsePassPipeline(mpm, "enzyme")) {
    throw std::runtime_error("the plugin has no 'enzyme' pass: " + llvm::toString(std::move(err)));
  }
  strip_scoped_noalias(llvm::wrap(mod.get()));  // see rewrites.h
  mpm.run(*mod, mam);
  std::string verify;
  llvm::raw_string_ostream verify_os(verify);
  if (llvm::verifyModule(*mod, &verify_os)) {
    throw std::runtime_error("Enzyme's pass left invalid IR: " + verify_os.str());
  }
  std::string out;
  llvm::raw_string_ostream os(out);
  mod->print(os, nullptr);
  return os.str();
}

std::string read_fd(int fd) {
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

}  // namespace

std::string run_enzyme_pass(const std::string &plugin_path, const std::string &ir_text) {
  int result = static_cast<int>(::syscall(SYS_memfd_create, "enzyme_py_pass", 0));
  int errors = static_cast<int>(::syscall(SYS_memfd_create, "enzyme_py_pass_err", 0));
  if (result < 0 || errors < 0) throw std::runtime_error("memfd_create failed");
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(errors, STDERR_FILENO);
    for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE}) ::signal(sig, SIG_DFL);
    // Enzyme's own reporting: an error it would hand to enzyme_py's handler (and
    // carry on past) ends the child instead.
    if (enzyme_loaded()) *enzyme_api().CustomErrorHandler = nullptr;
    int status = 0;
    try {
      std::string text = transform(plugin_path, ir_text);
      size_t done = 0;
      while (done < text.size()) {
        ssize_t n = ::write(result, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      status = done == text.size() ? 0 : 3;
    } catch (const std::exception &e) {
      std::fprintf(stderr, "%s\n", e.what());
      status = 2;
    }
    std::fflush(stderr);
    ::_exit(status);
  }
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) break;
  }
  std::string err = read_fd(errors);
  std::string text = read_fd(result);
  ::close(errors);
  ::close(result);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    if (err.size() > 4000) err = "..." + err.substr(err.size() - 4000);
    throw std::runtime_error("Enzyme's pass failed on the module (" +
                             std::string(WIFSIGNALED(wstatus) ? "killed by a signal" : "exited") +
                             "): " + err);
  }
  return text;
}

}  // namespace enzyme_py
