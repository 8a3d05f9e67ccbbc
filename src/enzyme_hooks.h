// What the engine installs into Enzyme and LLVM: the capture of the errors they report
// (Enzyme's CustomErrorHandler, the context's diagnostic handler) and the allocation
// handlers of Numba's temporaries (NRT_*: shadows from the arena).
#pragma once

#include <string>

#include <llvm-c/Core.h>

#include "enzyme_plugin.h"

namespace enzyme_py {

// Install the error handler and the NRT_* allocation handlers into the plugin
// (once, when the engine is created).
void install_enzyme_hooks(const EnzymeApi &api);
// Record the error diagnostics of `ctx` (LLVM's default handler exits the process).
void capture_diagnostics(LLVMContextRef ctx);

// The errors recorded since the last clear or take. Differentiation runs with the
// GIL held, so one process-wide list is enough.
void clear_errors();
bool has_errors();
// Every recorded error once (Enzyme reports some twice), one per line; clears them.
std::string take_errors();
// In the isolated build child, errors are also written to stderr as they come:
// Enzyme sometimes exit()s right after reporting, and the parent reads stderr.
void echo_errors_to_stderr();

// ENZYME_PY_LOG is set (timings and Enzyme's warnings on stderr).
bool log_enabled();

}  // namespace enzyme_py
