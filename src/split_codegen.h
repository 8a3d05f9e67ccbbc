// Code generation on several cores: a large derivative module's functions split into
// parts, each compiled to an object file on a thread of its own, the objects bundled.
//
// Code generation is single-threaded in LLVM and is a third of a large derivative's
// first call: GMM prange's (n = 10^4, d = 10, k = 25) entry function and its reverse
// chunk, 2441 and 3218 lines of IR, took 230-270 ms one after the other on a 2-core
// AMD EPYC. A part is a module of its own (a clone, sent to its thread as bitcode and
// read back there into a fresh LLVM context, as LLVM's ParallelCG does), compiled with
// a target machine of its own made as HostJit's. (A module whose parts never call each
// other is optimised and compiled part by part by split_build.h; this splits what it
// keeps whole, and its one part left, by functions.)
//
// Split only where it pays: two or more cores, functions enough for each part to hold
// kMinPartInstructions (below that the bitcode round trip and the thread cost more
// than they save), and a module with nothing that must stay in one object (comdats,
// aliases, appending globals such as constructors, thread-locals, blocks whose
// address is taken). Internal symbols
// become external so that the parts reach each other's, renamed with `unique` (the
// entry's name, itself unique per derivative) so that no two derivatives' meet in the
// JIT. Variables stay in the first part; functions are dealt to the least loaded part,
// largest first.
//
// A bundle is the one string the Artifact, the disk cache and HostJit::load carry: a
// magic, a count, then each object's size and bytes. One object stays as it is.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <llvm-c/TargetMachine.h>
#include <llvm-c/Types.h>

namespace llvm {
class Function;
class GlobalValue;
class Module;
}  // namespace llvm

namespace enzyme_py {

// Each part needs at least this many instructions for a split.
inline constexpr size_t kMinPartInstructions = 1500;

// Emits one module with one target machine (LLVMTargetMachineEmitToMemoryBuffer).
using EmitObject = std::function<std::string(LLVMModuleRef, LLVMTargetMachineRef)>;
// A fresh target machine, as the caller's (each thread's own).
using MakeMachine = std::function<LLVMTargetMachineRef()>;

// Object code for `mod` (which the split changes: it keeps the first part): one
// object, or a bundle of the parts' objects compiled on up to `threads` threads.
std::string emit_split(LLVMModuleRef mod, LLVMTargetMachineRef machine, unsigned threads,
                       const std::string &unique, const EmitObject &emit,
                       const MakeMachine &make_machine);

// The objects in `object`: itself, or a bundle's parts (views into it). Throws
// std::runtime_error for a damaged bundle.
std::vector<std::string_view> bundled_objects(const std::string &object);

// Shared with split_build.h.
// A part's own LLVM context and target machine, disposed with their owners (the
// module, owned inside the context, by a ModuleOwner declared after it).
using ContextOwner = std::unique_ptr<LLVMOpaqueContext, void (*)(LLVMContextRef)>;
using MachineOwner = std::unique_ptr<LLVMOpaqueTargetMachine, void (*)(LLVMTargetMachineRef)>;
size_t instruction_count(const llvm::Function &fn);
// llvm.used and llvm.compiler.used: lists for the optimiser, copied into every part.
bool keeps_alive(const llvm::GlobalValue &value);
// Nothing in `mod` must stay in one object file.
bool splittable(const llvm::Module &mod);
// A symbol another part defines is reached through the GOT: wherever the JIT puts it.
void declare_elsewhere(llvm::Module &mod, const std::set<std::string> &names);
std::string module_bitcode(llvm::Module &mod);
// `code` (module_bitcode's) read into `context`; throws std::runtime_error.
LLVMModuleRef read_bitcode(const std::string &code, LLVMContextRef context);
std::string bundle_objects(const std::vector<std::string> &objects);

// Runs work(index) for every part at once: part 0 on the calling thread, the others
// on threads of their own; once all have ended, the first error any threw.
template <typename Work>
void on_every_part(size_t parts, const Work &work) {
  std::vector<std::exception_ptr> errors(parts);
  std::vector<std::thread> workers;
  for (size_t index = 1; index < parts; ++index) {
    workers.emplace_back([&, index] {
      try {
        work(index);
      } catch (...) {
        errors[index] = std::current_exception();
      }
    });
  }
  try {
    work(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread &worker : workers) worker.join();
  for (const std::exception_ptr &error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace enzyme_py
