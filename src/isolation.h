// Isolated builds: a derivative built in a forked child, its result sent back
// through a memfd, so that an abort or a crash inside Enzyme (its assertions are
// enabled) becomes an exception in the caller instead of killing it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine.h"

namespace enzyme_py {

// Runs `build` in a forked child and returns its artifact. In the child, `setup` runs
// first (signals are reset, stderr goes to a memfd that the parent reads for the
// error message). The child's exceptions come back as the same kinds
// (EnzymeFailure, std::invalid_argument, std::runtime_error; std::bad_alloc as an
// EnzymeFailure); its death as BuildCrashed (crash signals: worth a retry) or
// EnzymeFailure. `function` names what is built in the messages. While it waits,
// `interrupted` (if given) is polled every ~10 ms, and what `while_waiting` returns
// (if given) is held in between; see Engine::build_isolated.
Artifact build_in_child(const std::string &function, const std::function<void()> &setup,
                        const std::function<Artifact()> &build,
                        const std::function<bool()> &interrupted,
                        const std::function<std::shared_ptr<void>()> &while_waiting);

}  // namespace enzyme_py
