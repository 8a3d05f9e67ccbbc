#include "engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <llvm-c/Analysis.h>
#include <llvm-c/IRReader.h>

#include "arena.h"
#include "parfor_runner.h"
#include "entry_abi.h"
#include "enzyme_hooks.h"
#include "enzyme_plugin.h"
#include "fused_threads.h"
#include "isolation.h"
#include "llvm_util.h"
#include "rewrites.h"
#include "tape_scopes.h"
#include "type_trees.h"
#include "unread_launches.h"

namespace enzyme_py {
namespace {

// Whether `f` has a forward-mode rule attached (enzyme_derivative metadata).
bool has_forward_rule(LLVMValueRef f) {
  static const char kKind[] = "enzyme_derivative";
  unsigned kind = LLVMGetMDKindIDInContext(LLVMGetModuleContext(LLVMGetGlobalParent(f)), kKind,
                                           sizeof kKind - 1);
  size_t count = 0;
  LLVMValueMetadataEntry *entries = LLVMGlobalCopyAllMetadata(f, &count);
  bool found = false;
  for (size_t i = 0; i < count; ++i) found |= LLVMValueMetadataEntriesGetKind(entries, i) == kind;
  LLVMDisposeValueMetadataEntries(entries);
  return found;
}

// The first call through a function pointer in `fn` or what it calls directly
// (an empty string if there is none).
std::string find_indirect_call(LLVMValueRef fn) {
  std::vector<LLVMValueRef> todo{fn};
  std::vector<LLVMValueRef> seen;
  while (!todo.empty()) {
    LLVMValueRef f = todo.back();
    todo.pop_back();
    if (std::find(seen.begin(), seen.end(), f) != seen.end() || LLVMIsDeclaration(f)) continue;
    seen.push_back(f);
    if (f != fn && has_forward_rule(f)) continue;  // Enzyme does not look inside
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb)) {
      for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst;
           inst = LLVMGetNextInstruction(inst)) {
        if (!LLVMIsACallInst(inst) && !LLVMIsAInvokeInst(inst)) continue;
        LLVMValueRef callee = LLVMGetCalledValue(inst);
        if (LLVMIsAFunction(callee)) {
          todo.push_back(callee);
        } else if (!LLVMIsAInlineAsm(callee)) {
          return print_value(inst);
        }
      }
    }
  }
  return "";
}

// The shadows to zero, in the derivative's parameter positions: Enzyme's combined
// reverse derivative takes each parameter, then the shadow of a Duplicated one.
std::vector<ZeroedShadow> zeroed_in_derivative(const DerivativeRequest &req) {
  if (req.zeroed.empty()) return {};
  if (req.forward || req.split || req.width != 1 || req.primal_only || req.atomic_add) {
    throw std::invalid_argument(
        "only a combined reverse derivative of width 1 zeroes its shadows itself");
  }
  constexpr unsigned kNone = ~0u;
  std::vector<unsigned> at(req.args.size()), shadow_at(req.args.size(), kNone);
  unsigned position = 0;
  for (size_t k = 0; k < req.args.size(); ++k) {
    at[k] = position++;
    if (req.args[k] == capi::DFT_DUP_ARG || req.args[k] == capi::DFT_DUP_NONEED) {
      shadow_at[k] = position++;
    }
  }
  std::vector<ZeroedShadow> out;
  for (const ZeroedShadow &z : req.zeroed) {
    if (z.shadow >= req.args.size() || shadow_at[z.shadow] == kNone) {
      throw std::invalid_argument("parameter " + std::to_string(z.shadow) +
                                  " to zero the shadow of has none");
    }
    ZeroedShadow mapped{shadow_at[z.shadow], {}, z.itemsize};
    for (unsigned d : z.dims) {
      if (d >= req.args.size()) {
        throw std::invalid_argument("no parameter " + std::to_string(d) + " sizes a shadow");
      }
      mapped.dims.push_back(at[d]);
    }
    out.push_back(std::move(mapped));
  }
  return out;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

Engine::Engine(const std::string &plugin_path) {
  const EnzymeApi &api = load_enzyme_plugin(plugin_path);
  install_enzyme_hooks(api);  // error capture, NRT_* allocation handlers
  // Enzyme v0.0.289 can fail an internal assertion in its min-cut caching
  // (computeMinCache), which would abort the interpreter: off in this process.
  // Isolated builds turn it on in their child (DerivativeRequest::mincut).
  set_mincut(false);
  ctx_ = LLVMContextCreate();
  // Typed pointers (LLVM 15 still reads them): parameter types then say what a
  // pointer points at, and Numba and `clang -no-opaque-pointers` emit them.
  LLVMContextSetOpaquePointers(ctx_, 0);
  capture_diagnostics(ctx_);
  jit_ = std::make_unique<HostJit>();
  // Before any other definition of these names (Numba's own are defined later).
  for (const auto &[name, address] : arena_symbols()) jit_->define_symbol(name, address);
  for (const auto &[name, address] : parfor_symbols()) jit_->define_symbol(name, address);
}

void Engine::set_mincut(bool on) {
  const EnzymeApi &api = enzyme_api();
  if (void *mincut = api.option("EnzymeMinCutCache")) api.SetCLBool(mincut, on ? 1 : 0);
}

Engine::~Engine() {
  // Compiled code and modules may outlive the engine at interpreter exit;
  // the context is left to the process teardown.
}

Artifact Engine::build(const SourceModule &source, const DerivativeRequest &req,
                       const std::string &entry_name) {
  ModuleOwner work{LLVMCloneModule(source.get())};
  return build_from(work, req, entry_name);
}

Artifact Engine::build_from(ModuleOwner &work, const DerivativeRequest &req,
                            const std::string &entry_name) {
  const EnzymeApi &api = enzyme_api();
  const bool log = log_enabled();
  auto t0 = Clock::now();
  clear_errors();

  LLVMModuleRef mod = work.mod;
  jit_->prepare(mod);
  LLVMValueRef fn = LLVMGetNamedFunction(mod, req.function.c_str());
  if (!fn || LLVMIsDeclaration(fn)) {
    throw std::invalid_argument("no function named '" + req.function +
                                "' is defined in the module");
  }
  const unsigned nparams = LLVMCountParams(fn);
  if (req.args.size() != nparams || req.pointee.size() != nparams) {
    throw std::invalid_argument("'" + req.function + "' has " +
                                std::to_string(nparams) + " parameters, " +
                                std::to_string(req.args.size()) +
                                " activities were given");
  }
  const std::vector<ZeroedShadow> zeroed = zeroed_in_derivative(req);
  prepare_for_enzyme(mod, /*runtime_too=*/true);
  if (req.forward && !req.primal_only) {
    // Seen with Enzyme v0.0.289: forward mode through a call via a function
    // pointer computes wrong values (the primal too) without any error.
    std::string call = find_indirect_call(fn);
    if (!call.empty()) {
      throw EnzymeFailure("'" + req.function + "' calls through a function pointer, which "
                          "Enzyme v0.0.289 differentiates wrongly in forward mode (no error, "
                          "wrong values); use reverse mode, make the call direct, or give the "
                          "called function a rule (ez.register_derivative):" + call);
    }
  }

  LLVMTypeRef fn_type = LLVMGlobalGetValueType(fn);
  TypeTrees trees(api, ctx_);
  std::vector<capi::CTypeTreeRef> arg_trees;
  std::vector<capi::IntList> known(nparams, capi::IntList{nullptr, 0});
  for (unsigned i = 0; i < nparams; ++i) {
    arg_trees.push_back(
        trees.for_value(LLVMTypeOf(LLVMGetParam(fn, i)), req.pointee[i]));
  }
  LLVMTypeRef ret_type = LLVMGetReturnType(fn_type);
  capi::CFnTypeInfo info{arg_trees.data(),
                         trees.for_value(ret_type, capi::DT_Unknown), known.data()};
  std::vector<capi::CDIFFE_TYPE> activities = req.args;
  std::vector<uint8_t> overwritten(nparams, 0);

  LLVMValueRef derivative = nullptr;
  if (req.primal_only) {
    // No differentiation: the function itself behind an entry point.
    derivative = fn;
  } else {
    // A fresh logic per request: Enzyme caches derivatives by Function*, and
    // the modules they point into are freed after each request.
    capi::EnzymeLogicRef logic = api.CreateEnzymeLogic(/*PostOpt=*/0);
    capi::EnzymeTypeAnalysisRef analysis =
        api.CreateTypeAnalysis(logic, nullptr, nullptr, 0);
    if (req.forward) {
      derivative = api.CreateForwardDiff(
          logic, nullptr, nullptr, fn, req.ret, activities.data(), activities.size(),
          analysis, req.return_primal, capi::DEM_ForwardMode, /*freeMemory=*/1,
          req.runtime_activity, req.strong_zero, req.width, nullptr, info,
          /*subsequent_calls_may_write=*/0, overwritten.data(), overwritten.size(),
          nullptr);
    } else if (req.split) {
      capi::EnzymeAugmentedReturnPtr augmented = api.CreateAugmentedPrimal(
          logic, nullptr, nullptr, fn, req.ret, activities.data(), activities.size(),
          analysis, req.return_primal, /*shadowReturnUsed=*/0, info,
          /*subsequent_calls_may_write=*/0, overwritten.data(), overwritten.size(),
          /*nowrite_shadows=*/overwritten.data(), overwritten.size(),
          /*forceAnonymousTape=*/1, req.runtime_activity, req.strong_zero, req.width,
          req.atomic_add);
      if (augmented && !has_errors()) {
        int64_t at[3] = {-1, -1, -1};
        uint8_t there[3] = {0, 0, 0};
        api.ExtractReturnInfo(augmented, at, there, 3);
        // The entry point flattens the returned struct in order: the tape first.
        // Without a primal to return (a void function, an ActiveOnly return) the
        // tape is the whole return value (its place -1), flattened the same way.
        const bool tape_alone = there[0] && at[0] == -1 && !there[1] && !there[2];
        if (!tape_alone && (!there[0] || at[0] != 0 || (there[1] && at[1] != 1) || there[2])) {
          api.FreeTypeAnalysis(analysis);
          api.FreeEnzymeLogic(logic);
          throw EnzymeFailure("the augmented forward pass of '" + req.function +
                              "' returns its tape in an unexpected place; split mode "
                              "cannot call it");
        }
        if (req.split == 1) {
          derivative = api.ExtractFunctionFromAugmentation(augmented);
        } else {
          derivative = api.CreatePrimalAndGradient(
              logic, nullptr, nullptr, fn, req.ret, activities.data(), activities.size(),
              analysis, /*returnValue=*/0, /*dretUsed=*/0, capi::DEM_ReverseModeGradient,
              req.runtime_activity, req.strong_zero, req.width, /*freeMemory=*/0,
              api.ExtractTapeTypeFromAugmentation(augmented), /*forceAnonymousTape=*/1, info,
              /*subsequent_calls_may_write=*/0, overwritten.data(), overwritten.size(),
              augmented, req.atomic_add);
        }
      }
    } else {
      derivative = api.CreatePrimalAndGradient(
          logic, nullptr, nullptr, fn, req.ret, activities.data(), activities.size(),
          analysis, req.return_primal, /*dretUsed=*/0, capi::DEM_ReverseModeCombined,
          req.runtime_activity, req.strong_zero, req.width, /*freeMemory=*/1, nullptr,
          /*forceAnonymousTape=*/0, info, /*subsequent_calls_may_write=*/0,
          overwritten.data(), overwritten.size(), nullptr, req.atomic_add);
    }
    api.FreeTypeAnalysis(analysis);
    api.FreeEnzymeLogic(logic);
  }
  std::string errors = take_errors();
  if (!errors.empty() || !derivative) {
    throw EnzymeFailure("Enzyme could not differentiate '" + req.function + "': " +
                        (errors.empty() ? "no derivative was produced" : errors));
  }
  auto t_enzyme = Clock::now();

  const std::string derivative_name = entry_name + "_derivative";
  LLVMSetValueName2(derivative, derivative_name.c_str(), derivative_name.size());
  LLVMSetLinkage(derivative, LLVMExternalLinkage);
  erase_type_marks(mod);
  const int unwrapped = drop_unsigned_wrap_of_negative_adds(mod);
  if (log && unwrapped) {
    std::fprintf(stderr, "[enzyme_py] '%s': nuw dropped from %d add(s) of a negative constant\n",
                 req.function.c_str(), unwrapped);
  }
  divide_by_squares_in_steps(mod);
  Artifact out;
  out.entry_name = entry_name;
  out.derivative_module = print_module(mod);
  // Enzyme can leave in-memory IR that verifies and prints correctly yet
  // crashes LLVM's InstCombine (seen on Numba's GMM). What follows works on what
  // the printed text parses back to, which is immune to that: the text just
  // printed, so the module is printed once, not twice.
  {
    size_t name_length = 0;
    const char *name = LLVMGetValueName2(derivative, &name_length);
    const std::string printed_name(name, name_length);  // as LLVM made it unique
    // Cut from the module's text: printing the function again took ~10 ms of GMM
    // prange's build.
    out.enzyme_ir = function_text(out.derivative_module, printed_name);
    if (out.enzyme_ir.empty()) out.enzyme_ir = print_value(derivative);
    const std::string &text = out.derivative_module;
    LLVMMemoryBufferRef buffer = LLVMCreateMemoryBufferWithMemoryRangeCopy(
        text.data(), text.size(), "derivative");
    LLVMModuleRef reparsed = nullptr;
    char *parse_error = nullptr;
    if (LLVMParseIRInContext(ctx_, buffer, &reparsed, &parse_error)) {
      std::string why = parse_error ? parse_error : "";
      LLVMDisposeMessage(parse_error);
      throw EnzymeFailure("the derivative of '" + req.function +
                          "' does not parse back: " + why);
    }
    LLVMDisposeModule(work.mod);
    work.mod = mod = reparsed;
    derivative = LLVMGetNamedFunction(mod, printed_name.c_str());
    if (!derivative) {
      throw EnzymeFailure("the derivative of '" + req.function +
                          "' is missing from its module once parsed back");
    }
  }
  // After the module kept for differentiating again, which keeps Enzyme's
  // convention (adjoints added into the shadows).
  derivative = zero_shadows_on_entry(derivative, zeroed);
  if (!req.forward && !req.split && !req.primal_only) {
    // Its parameters are never the tape: its cache loads may be scoped (tape_scopes.h).
    LLVMAddAttributeAtIndex(
        derivative, LLVMAttributeFunctionIndex,
        LLVMCreateStringAttribute(ctx_, kScopeTapeAttribute,
                                  static_cast<unsigned>(std::strlen(kScopeTapeAttribute)), "", 0));
  }
  // Also for primal-only requests: a kernel's range driver calls a derivative made
  // earlier (its tape allocations still marked) once per index.
  // The augmented forward pass of split mode: every allocation it keeps must
  // live as long as its tape (SplitTape in arena.h), the tape struct included.
  route_tape_to_arena(mod, req.split == 1);

  add_entry_point(mod, derivative, entry_name, out.in_slots, out.out_slots);

  char *verify_error = nullptr;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &verify_error)) {
    std::string text = verify_error ? verify_error : "";
    LLVMDisposeMessage(verify_error);
    throw EnzymeFailure("the derivative of '" + req.function +
                        "' is not valid LLVM IR: " + text);
  }
  LLVMDisposeMessage(verify_error);
  if (req.fused_workers > 0) set_fused_workers(mod, req.fused_workers);
  int dropped = 0;
  BuiltParts built = jit_->optimize_and_emit(mod, req.passes, entry_name, [&](LLVMModuleRef part) {
    dropped = drop_unread_launches(part);
    // The dropped launches' functions (the launch, its chunks: GMM prange's 980 of
    // 5300 lines) are code nothing calls now: not compiled.
    if (dropped) jit_->optimize(part, "globaldce");
  });
  if (log && dropped) {
    std::fprintf(stderr, "[enzyme_py] '%s': %d prange launch(es) nothing reads dropped\n",
                 req.function.c_str(), dropped);
  }
  out.optimized_ir = std::move(built.optimized_ir);
  out.object = std::move(built.object);
  if (log) {
    const double total = ms_since(t_enzyme);
    std::fprintf(stderr,
                 "[enzyme_py] %s '%s' width=%u: enzyme %.1f ms, optimize %.1f ms, "
                 "codegen %.1f ms\n",
                 req.forward ? "forward" : "reverse", req.function.c_str(), req.width,
                 std::chrono::duration<double, std::milli>(t_enzyme - t0).count(),
                 total - built.codegen_ms, built.codegen_ms);
  }
  return out;
}

uint64_t Engine::load(const std::string &object, const std::string &entry_name) {
  return jit_->load(object, entry_name);
}

Artifact Engine::build_isolated(const SourceModule &source, const DerivativeRequest &req,
                                const std::string &entry_name,
                                const std::function<bool()> &interrupted,
                                const std::function<std::shared_ptr<void>()> &while_waiting) {
  return build_in_child(
      req.function,
      [this, &req] {
        echo_errors_to_stderr();
        set_mincut(req.mincut);
      },
      [this, &source, &req, &entry_name] {
        // The child's copy of the source module is its own, and it exits after the
        // build: built from in place, not cloned (GMM prange: ~9 ms).
        ModuleOwner work{source.get()};
        return build_from(work, req, entry_name);
      },
      interrupted, while_waiting);
}

}  // namespace enzyme_py
