// A report on stderr when the process dies of a fatal signal (SIGSEGV, SIGBUS,
// SIGILL, SIGFPE): the faulting address, where the instruction was (in the code
// of a loaded derivative, which one, and whether that code was already unloaded,
// or in a shared library), and the native call stack. Python's faulthandler
// names only the Python frames; this names the native ones. The previous handler
// (faulthandler's, if it was installed first) runs after it.
#pragma once

#include <cstdint>
#include <string>

namespace enzyme_py {

// Installs the handler once (later calls do nothing).
void install_crash_report();

// Bookkeeping the report reads: an entry point loaded at `address`, and its unload
// (nothing is kept before install_crash_report).
void note_loaded(const std::string &symbol, uint64_t address);
void note_unloaded(const std::string &symbol);

}  // namespace enzyme_py
