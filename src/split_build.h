// Optimisation and code generation on several cores: a derivative module whose
// functions fall apart into parts that never call each other, each part optimised
// and compiled on a thread of its own.
//
// A threaded prange derivative (GMM prange) is its entry function, which launches
// the loops, and the chunks the runner calls through pointers: the reverse chunk
// with the body's derivative inlined, the forward one. Nothing calls across those
// parts, so LLVM's pipeline (whose inlining follows calls) optimises each alone as
// it would inside the whole module; on one thread the optimisation was 277 ms of
// GMM prange's first call (n = 10^4, 2-core AMD EPYC), code generation 160 more.
//
// The parts: the entry's, and one per root, a function reached only through its
// address, each with every function it calls (a helper called from two parts is
// copied into both, internal in each). Parts under kMinPartInstructions join others;
// at most one part a thread; once the other parts are that large, a smaller root
// joins the entry's part (where its launch is, which may be dropped). Internal
// constants are copied into every part; other variables live in the part that uses
// them, or the entry's where several do. A function both called and reached through
// its address, a function two parts would copy that is not internal, llvm.used naming
// a definition, or anything that must stay in one object (split_codegen.h's
// `splittable`), keeps the module whole.
//
// Each part is cloned, sent to its thread as bitcode and read back into a context
// of its own (as split_codegen.h does), with a target machine of its own. The
// pipelines run in order on all parts at once (LLVM's options are global: each
// pipeline's are set for all parts together). Then `after` runs on the entry's part
// (drop_unread_launches), roots nothing reaches any more are dropped, and the parts
// are compiled, the symbols they share renamed with `unique` (the entry's name) so
// that no two derivatives' meet in the JIT. The objects come back as a bundle
// (split_codegen.h); the optimised IR as each part's text, the entry's first.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <llvm-c/TargetMachine.h>
#include <llvm-c/Types.h>

#include "split_codegen.h"

namespace enzyme_py {

struct BuiltParts {
  std::string optimized_ir;  // every part's module, the entry's first
  std::string object;        // one object or a bundle
  double codegen_ms = 0;     // of the whole, for ENZYME_PY_LOG
};

struct PartPipelines {
  size_t count = 0;  // pipelines, run in order on every part
  // Runs pipeline `index` on a part's module with that part's target machine.
  std::function<void(LLVMModuleRef, LLVMTargetMachineRef, size_t index)> run;
  // Held while pipeline `index` runs on all parts: LLVM's global options for it.
  std::function<std::shared_ptr<void>(size_t index)> settings;
  // Runs on the entry's part once every pipeline has (on the calling thread).
  std::function<void(LLVMModuleRef)> after;
  EmitObject emit;
  MakeMachine make_machine;
  // Compiles the entry's part where it is the only part left.
  std::function<std::string(LLVMModuleRef)> emit_alone;
};

// `mod` (entry `entry`) optimised and compiled in parts on up to `threads` threads,
// or nullopt where it does not split (then `mod` is unchanged). `mod` keeps the
// entry's part.
std::optional<BuiltParts> build_in_parts(LLVMModuleRef mod, LLVMTargetMachineRef machine,
                                         const std::string &entry, unsigned threads,
                                         const std::string &unique, const PartPipelines &how);

}  // namespace enzyme_py
