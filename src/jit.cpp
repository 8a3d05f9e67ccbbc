#include "jit.h"

#include "crash_report.h"
#include "fused_threads.h"
#include "index_signs.h"
#include "invariant_exits.h"
#include "jit_memory.h"
#include "llvm_options.h"
#include "llvm_util.h"
#include "object_emit.h"
#include "scatter_adds.h"
#include "scratch_forwarding.h"
#include "shadow_zeroing.h"
#include "split_codegen.h"
#include "tape_scopes.h"
#include "unread_stores.h"
#include "unroll_hints.h"
#include "wide_vectors.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/StandardInstrumentations.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

namespace enzyme_py {

void check(LLVMErrorRef err, const char *what) {
  if (!err) return;
  char *msg = LLVMGetErrorMessage(err);  // consumes err
  std::string text = std::string(what) + ": " + msg;
  LLVMDisposeErrorMessage(msg);
  throw std::runtime_error(text);
}

namespace {

std::string take_message(char *msg) {
  std::string text = msg ? msg : "";
  LLVMDisposeMessage(msg);
  return text;
}

// glibc's vector math library (libmvec, part of libc6): with it, LLVM
// vectorises loops that call exp, log, sin, cos or pow. Derivatives of such
// loops evaluate these functions more often than the primal (Enzyme's rules
// call exp again for exp's adjoint), so this is where their time goes.
bool use_vector_math() {
  if (!dlopen("libmvec.so.1", RTLD_NOW | RTLD_GLOBAL)) return false;
  const char *argv[] = {"enzyme_py", "-vector-library=LIBMVEC-X86"};
  LLVMParseCommandLineOptions(2, argv, nullptr);
  return true;
}

// Whether `mod` calls a function libmvec has vector variants of (LLVM 15's
// LIBMVEC-X86 list: exp, log, sin, cos, pow, as calls or intrinsics, float or double).
bool calls_vector_math(LLVMModuleRef mod) {
  static const char *const kNames[] = {"exp", "log", "sin", "cos", "pow"};
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    if (!LLVMIsDeclaration(f) || !LLVMGetFirstUse(f)) continue;
    size_t length = 0;
    const char *spelled = LLVMGetValueName2(f, &length);
    std::string name(spelled, length);
    if (name.rfind("llvm.", 0) == 0) {
      name = name.substr(5, name.find('.', 5) - 5);  // llvm.exp.f64 -> exp
    } else if (name.rfind("__", 0) == 0 && name.size() > 9 &&
               name.compare(name.size() - 7, 7, "_finite") == 0) {
      name = name.substr(2, name.size() - 9);  // __exp_finite -> exp
    }
    if (!name.empty() && name.back() == 'f') name.pop_back();  // expf -> exp
    for (const char *known : kNames) {
      if (name == known) return true;
    }
  }
  return false;
}

}  // namespace

HostJit::HostJit() {
  static const bool vector_math = use_vector_math();
  vector_math_ = vector_math;
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMInitializeNativeAsmParser();

  triple_ = take_message(LLVMGetDefaultTargetTriple());
  cpu_ = take_message(LLVMGetHostCPUName());
  features_ = take_message(LLVMGetHostCPUFeatures());
  wide_vectors_ = wide_vectors_pay(cpu_, features_);
  features_ = tuned_features(features_);

  char *error = nullptr;
  if (LLVMGetTargetFromTriple(triple_.c_str(), &target_, &error)) {
    throw std::runtime_error("no LLVM target for " + triple_ + ": " +
                             take_message(error));
  }
  machine_ = make_machine();
  LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(machine_);
  data_layout_ = take_message(LLVMCopyStringRepOfTargetData(layout));
  LLVMDisposeTargetData(layout);

  LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
  // All loaded code and its data in one reservation (jit_memory.h: otherwise code
  // and its constants may land more than 2 GiB apart, and the code crashes).
  LLVMOrcLLJITBuilderSetObjectLinkingLayerCreator(builder, &create_object_layer, nullptr);
  check(LLVMOrcCreateLLJIT(&jit_, builder), "creating the ORC JIT");

  // C++ code (ez.cpp) calls its runtime (operator new, __throw_length_error,
  // _Unwind_Resume): loaded with this extension, but privately; made visible.
  for (const char *runtime : {"libstdc++.so.6", "libgcc_s.so.1"}) {
    dlopen(runtime, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  }
  // Resolve undefined symbols (sin, cos, memset, ...) from the running process.
  LLVMOrcDefinitionGeneratorRef process_symbols = nullptr;
  check(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
            &process_symbols, LLVMOrcLLJITGetGlobalPrefix(jit_), nullptr, nullptr),
        "adding process symbols to the JIT");
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit_), process_symbols);
  // The C allocator as this extension binds it: memory the loaded code mallocs is
  // freed by the tape's free (arena.cpp) and the reverse. The process search can
  // find another definition than the one the extension's calls reach (seen with
  // an LD_PRELOADed allocator, glibc's libc_malloc_debug): free() would then get
  // memory of another heap.
  const std::pair<const char *, void *> allocator[] = {
      {"malloc", reinterpret_cast<void *>(&std::malloc)},
      {"calloc", reinterpret_cast<void *>(&std::calloc)},
      {"realloc", reinterpret_cast<void *>(&std::realloc)},
      {"free", reinterpret_cast<void *>(&std::free)},
      {"posix_memalign", reinterpret_cast<void *>(&posix_memalign)},
      {"aligned_alloc", reinterpret_cast<void *>(&aligned_alloc)},
  };
  for (const auto &[name, address] : allocator) {
    define_symbol(name, reinterpret_cast<uint64_t>(address));
  }
  LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(jit_),
                                          &HostJit::report, this);
}

LLVMTargetMachineRef HostJit::make_machine() const {
  // PIC: calls to libm and other process symbols go through stubs, so they
  // reach wherever the JIT's memory lands relative to the shared libraries.
  return LLVMCreateTargetMachine(target_, triple_.c_str(), cpu_.c_str(), features_.c_str(),
                                 LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                 LLVMCodeModelDefault);
}

void HostJit::report(void *self, LLVMErrorRef err) {
  char *msg = LLVMGetErrorMessage(err);  // consumes err
  auto *jit = static_cast<HostJit *>(self);
  {
    std::lock_guard<std::mutex> hold(jit->reported_lock_);
    if (!jit->reported_.empty()) jit->reported_ += "; ";
    jit->reported_ += msg;
  }
  LLVMDisposeErrorMessage(msg);
}

HostJit::~HostJit() {
  // The JIT's code may still be referenced by Python objects at exit; the
  // process is going away then, so it is deliberately not torn down.
}

void HostJit::prepare(LLVMModuleRef mod) const {
  LLVMSetTarget(mod, triple_.c_str());
  LLVMSetDataLayout(mod, data_layout_.c_str());
  // Code is compiled for this machine's CPU. clang marks each function with the
  // CPU it compiled for ("target-cpu"="x86-64", SSE2 only); LLVM 15's libmvec
  // mapping still offers such a function the AVX2 variants (_ZGVdN4v_cos), whose
  // <4 x double> it then passes in two SSE registers where the callee reads one
  // AVX register: silently wrong values (seen in the reverse pass of an -O0 loop
  // nest, and wherever a noinline function keeps clang's attributes).
  static const char *const kTargetAttributes[] = {"target-cpu", "target-features", "tune-cpu"};
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    for (const char *name : kTargetAttributes) {
      LLVMRemoveStringAttributeAtIndex(f, LLVMAttributeFunctionIndex, name,
                                       static_cast<unsigned>(std::strlen(name)));
    }
  }
}

namespace {

// "FIRST|SECOND": the pipelines, run in order.
std::vector<std::string> pipelines_of(const std::string &passes) {
  const auto bar = passes.find('|');
  if (bar == std::string::npos) return {passes};
  return {passes.substr(0, bar), passes.substr(bar + 1)};
}

// LLVM's options are global: one module (or one split module's parts) at a time is
// optimised with them set. Held while pipeline `index` runs.
struct PipelineSettings {
  PipelineSettings(std::mutex &options, size_t index, bool calls_vector_math)
      : lock(options) {
    // Where loops call exp, log, sin, cos or pow, the remainder of a vectorised loop
    // (4 lanes, 4 interleaved: 16 iterations a vector step) is vectorised too: loops
    // of ~10 iterations are common in model code (GMM's, over the dimension) and
    // otherwise keep their calls scalar (GMM with exp in such a loop: 19% slower).
    // Elsewhere it cost first builds (heat's code generation: 25 -> 29 ms) for no
    // measured speed.
    if (calls_vector_math) epilogue.emplace(4);
    // The second pipeline runs with LLVM's store-to-load forwarding heuristic off
    // (see llvm_options.h); a loop refused in the first for it has had its loads
    // carried in registers by then, and vectorises.
    if (index > 0) ignored.emplace();
  }
  std::lock_guard<std::mutex> lock;
  std::optional<EpilogueLanesForced> epilogue;
  std::optional<StoreLoadConflictsIgnored> ignored;
};

}  // namespace

void HostJit::optimize(LLVMModuleRef mod, const std::string &passes) const {
  run_pipelines(mod, pipelines_of(passes), vector_math_ && calls_vector_math(mod));
}

void HostJit::run_pipelines(LLVMModuleRef mod, const std::vector<std::string> &pipelines,
                            bool vector_calls) const {
  for (size_t index = 0; index < pipelines.size(); ++index) {
    const PipelineSettings settings(options_mutex(), index, vector_calls);
    run_pipeline(mod, pipelines[index], machine_);
  }
}

std::mutex &HostJit::options_mutex() {
  static std::mutex mutex;
  return mutex;
}

void HostJit::run_pipeline(LLVMModuleRef mod, const std::string &passes,
                           LLVMTargetMachineRef machine) const {
  // What LLVMRunPasses does (its instrumentation too: optnone functions are left
  // alone), with enzyme_py's own passes registered by name.
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  tuning.LoopUnrolling = true;
  llvm::PassInstrumentationCallbacks callbacks;
  // An LLVMTargetMachineRef is a TargetMachine (llvm-c's unwrap is not public).
  llvm::PassBuilder builder(reinterpret_cast<llvm::TargetMachine *>(machine), tuning,
                            llvm::None, &callbacks);
  const bool wide = wide_vectors_;
  builder.registerPipelineParsingCallback(
      [wide](llvm::StringRef name, llvm::FunctionPassManager &passes,
         llvm::ArrayRef<llvm::PassBuilder::PipelineElement>) {
        if (name == kWidenStreamingLoops) {
          passes.addPass(WidenStreamingLoops(wide));
          return true;
        }
        if (name == kSplitScatterAdds) {
          passes.addPass(SplitScatterAdds());
          return true;
        }
        if (name == kSinkShadowZeroing) {
          passes.addPass(SinkShadowZeroing());
          return true;
        }
        if (name == kThreadFusedLoops) {
          passes.addPass(ThreadFusedLoops());
          return true;
        }
        if (name == kKeepVectorLoopsRolled) {
          passes.addPass(KeepVectorLoopsRolled());
          return true;
        }
        if (name == kForwardScratchStores) {
          passes.addPass(ForwardScratchStores());
          return true;
        }
        if (name == kHoistInvariantExits) {
          passes.addPass(HoistInvariantExits());
          return true;
        }
        if (name == kDropUnreadStores) {
          passes.addPass(DropUnreadStores());
          return true;
        }
        if (name == kScopeTapeLoads) {
          passes.addPass(ScopeTapeLoads());
          return true;
        }
        if (name == kFoldIndexSigns) {
          passes.addPass(FoldIndexSigns());
          return true;
        }
        return false;
      });
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgsccs;
  llvm::ModuleAnalysisManager modules;
  builder.registerLoopAnalyses(loops);
  builder.registerFunctionAnalyses(functions);
  builder.registerCGSCCAnalyses(cgsccs);
  builder.registerModuleAnalyses(modules);
  builder.crossRegisterProxies(loops, functions, cgsccs, modules);
  llvm::StandardInstrumentations instrumentation(/*DebugLogging=*/false);
  instrumentation.registerCallbacks(callbacks, &functions);
  llvm::ModulePassManager pipeline;
  if (llvm::Error err = builder.parsePassPipeline(pipeline, passes)) {
    throw std::runtime_error("optimizing the derivative: " + llvm::toString(std::move(err)));
  }
  pipeline.run(*llvm::unwrap(mod), modules);
  // enzyme_py's own pass is checked: invalid IR from it must be an error, never code.
  if (passes.find(kSplitScatterAdds) != std::string::npos) {
    std::string problems;
    llvm::raw_string_ostream out(problems);
    if (llvm::verifyModule(*llvm::unwrap(mod), &out)) {
      throw std::runtime_error("optimizing the derivative made invalid IR (" +
                               std::string(kSplitScatterAdds) + "): " + out.str());
    }
  }
}

namespace {

// Threads for code generation: the cores this process may run on, or
// ENZYME_PY_CODEGEN_THREADS (1: one object always). Read once.
unsigned codegen_threads() {
  static const unsigned threads = [] {
    if (const char *text = std::getenv("ENZYME_PY_CODEGEN_THREADS")) {
      const long value = std::strtol(text, nullptr, 10);
      if (value >= 1) return static_cast<unsigned>(std::min(value, 64L));
    }
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
      return static_cast<unsigned>(std::max(1, CPU_COUNT(&allowed)));
    }
    return std::max(1u, std::thread::hardware_concurrency());
  }();
  return threads;
}

}  // namespace

std::string HostJit::emit_object(LLVMModuleRef mod, const std::string &unique) const {
  if (unique.empty()) return emit_object_code(mod, machine_);
  return emit_split(mod, machine_, codegen_threads(), unique, emit_object_code,
                    [this] { return make_machine(); });
}

BuiltParts HostJit::optimize_and_emit(LLVMModuleRef mod, const std::string &passes,
                                      const std::string &entry,
                                      const std::function<void(LLVMModuleRef)> &after) const {
  const bool vector_calls = vector_math_ && calls_vector_math(mod);
  const std::vector<std::string> pipelines = pipelines_of(passes);
  PartPipelines how;
  how.count = pipelines.size();
  how.run = [&](LLVMModuleRef part, LLVMTargetMachineRef machine, size_t index) {
    run_pipeline(part, pipelines[index], machine);
  };
  how.settings = [&](size_t index) -> std::shared_ptr<void> {
    return std::make_shared<PipelineSettings>(options_mutex(), index, vector_calls);
  };
  how.after = after;
  how.emit = emit_object_code;
  how.make_machine = [this] { return make_machine(); };
  how.emit_alone = [&](LLVMModuleRef part) { return emit_object(part, entry); };
  if (std::optional<BuiltParts> built =
          build_in_parts(mod, machine_, entry, codegen_threads(), entry, how)) {
    return std::move(*built);
  }
  run_pipelines(mod, pipelines, vector_calls);
  after(mod);
  BuiltParts built;
  built.optimized_ir = print_module(mod);
  const auto start = std::chrono::steady_clock::now();
  built.object = emit_object(mod, entry);
  built.codegen_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
  return built;
}

void HostJit::define_symbol(const std::string &name, uint64_t address) {
  if (!defined_.insert(name).second) return;
  LLVMOrcCSymbolMapPair pair;
  pair.Name = LLVMOrcLLJITMangleAndIntern(jit_, name.c_str());
  pair.Sym.Address = address;
  pair.Sym.Flags.GenericFlags = LLVMJITSymbolGenericFlagsExported;
  pair.Sym.Flags.TargetFlags = 0;
  LLVMOrcMaterializationUnitRef unit = LLVMOrcAbsoluteSymbols(&pair, 1);
  check(LLVMOrcJITDylibDefine(LLVMOrcLLJITGetMainJITDylib(jit_), unit),
        "defining a symbol for the JIT");
}

uint64_t HostJit::load(const std::string &object, const std::string &symbol) {
  const std::vector<std::string_view> objects = bundled_objects(object);
  // A MemoryError if its code cannot fit (src/jit_memory.h), before the load.
  std::string full = room_problem(objects);
  if (!full.empty()) throw JitMemoryFull(full);
  // Its own resource tracker (a bundle's objects share one), to unload it if its
  // symbols do not resolve.
  LLVMOrcResourceTrackerRef tracker =
      LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(jit_));
  for (const std::string_view part : objects) {
    LLVMMemoryBufferRef buffer = LLVMCreateMemoryBufferWithMemoryRangeCopy(
        part.data(), part.size(), symbol.c_str());
    // The JIT takes ownership of the buffer.
    LLVMErrorRef added = LLVMOrcLLJITAddObjectFileWithRT(jit_, tracker, buffer);
    if (added) {
      if (LLVMErrorRef removed = LLVMOrcResourceTrackerRemove(tracker)) {
        LLVMConsumeError(removed);
      }
      LLVMOrcReleaseResourceTracker(tracker);
      check(added, "loading object code into the JIT");
    }
  }
  {
    std::lock_guard<std::mutex> hold(reported_lock_);
    reported_.clear();
  }
  LLVMOrcExecutorAddress address = 0;
  LLVMErrorRef failed = LLVMOrcLLJITLookup(jit_, &address, symbol.c_str());
  if (failed) {
    char *msg = LLVMGetErrorMessage(failed);  // consumes failed
    std::string text = msg;
    LLVMDisposeErrorMessage(msg);
    {
      std::lock_guard<std::mutex> hold(reported_lock_);
      if (!reported_.empty()) text = reported_ + " (" + text + ")";
    }
    if (LLVMErrorRef removed = LLVMOrcResourceTrackerRemove(tracker)) {
      LLVMConsumeError(removed);
    }
    LLVMOrcReleaseResourceTracker(tracker);
    throw MissingSymbols(text);
  }
  // Kept, so that the code can be removed again (unload). A symbol loaded a second
  // time (not done by enzyme_py) keeps its first tracker, and its code stays.
  if (!trackers_.emplace(symbol, tracker).second) LLVMOrcReleaseResourceTracker(tracker);
  note_loaded(symbol, address);
  return address;
}

bool HostJit::unload(const std::string &symbol) {
  auto found = trackers_.find(symbol);
  if (found == trackers_.end()) return false;
  LLVMOrcResourceTrackerRef tracker = found->second;
  trackers_.erase(found);
  note_unloaded(symbol);
  LLVMErrorRef removed = LLVMOrcResourceTrackerRemove(tracker);
  LLVMOrcReleaseResourceTracker(tracker);
  check(removed, "unloading code from the JIT");
  return true;
}

}  // namespace enzyme_py
