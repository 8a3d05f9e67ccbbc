#include "engine.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <llvm-c/Analysis.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Linker.h>

#include "arena.h"
#include "entry_abi.h"
#include "enzyme_plugin.h"
#include "rewrites.h"

namespace enzyme_py {
namespace {

// Errors reported by Enzyme or LLVM while the engine works. Differentiation
// runs with the GIL held, so one process-wide list is enough.
std::vector<std::string> pending_errors;
// In the isolated build child, errors are also written to stderr as they come:
// Enzyme sometimes exit()s right after reporting, and the parent reads stderr.
bool echo_errors = false;

bool log_enabled() {
  const char *v = std::getenv("ENZYME_PY_LOG");
  return v && *v && std::string(v) != "0";
}

const char *error_kind_name(capi::ErrorType kind) {
  switch (kind) {
    case capi::NoDerivative: return "no derivative";
    case capi::NoShadow: return "no shadow";
    case capi::IllegalTypeAnalysis: return "illegal type analysis";
    case capi::NoType: return "type analysis could not deduce a type";
    case capi::IllegalFirstPointer: return "illegal first pointer";
    case capi::InternalError: return "internal error";
    case capi::TypeDepthExceeded: return "type depth exceeded";
    case capi::MixedActivityError: return "mixed activity";
    case capi::IllegalReplaceFicticiousPHIs: return "illegal phi replacement";
    case capi::GetIndexError: return "index error";
    case capi::NoTruncate: return "no truncation";
    case capi::GCRewrite: return "GC rewrite";
    case capi::NaNError: return "NaN";
    case capi::NoAccumulate: return "unhandled accumulation";
  }
  return "error";
}

// Installed as the plugin's CustomErrorHandler: Enzyme calls it instead of
// aborting. Record the message; the request then fails with EnzymeFailure.
LLVMValueRef on_enzyme_error(const char *message, LLVMValueRef, capi::ErrorType kind,
                             const void *, LLVMValueRef, LLVMBuilderRef) {
  // Reported as warnings by Enzyme itself: the derivative stays correct.
  if (kind == capi::TypeDepthExceeded || kind == capi::GCRewrite) {
    if (log_enabled()) std::fprintf(stderr, "[enzyme_py] Enzyme warning: %s\n", message);
    return nullptr;
  }
  pending_errors.push_back(std::string(error_kind_name(kind)) + ": " +
                           (message ? message : ""));
  if (echo_errors) std::fprintf(stderr, "%s\n", pending_errors.back().c_str());
  return nullptr;
}

// LLVM's default handler exits the process on an error diagnostic (Enzyme
// emits its failures as such); record them instead.
void on_diagnostic(LLVMDiagnosticInfoRef info, void *) {
  if (LLVMGetDiagInfoSeverity(info) != LLVMDSError) return;
  char *text = LLVMGetDiagInfoDescription(info);
  pending_errors.push_back(text ? text : "LLVM error");
  LLVMDisposeMessage(text);
  if (echo_errors) std::fprintf(stderr, "%s\n", pending_errors.back().c_str());
}

std::string take_errors() {
  std::string all;
  for (size_t i = 0; i < pending_errors.size(); ++i) {
    const std::string &e = pending_errors[i];
    // Enzyme reports some failures twice (once more at the stub it emits).
    if (std::find(pending_errors.begin(), pending_errors.begin() + i, e) !=
        pending_errors.begin() + i) {
      continue;
    }
    if (!all.empty()) all += "\n";
    all += e;
  }
  pending_errors.clear();
  return all;
}

std::string print_value(LLVMValueRef value) {
  char *text = LLVMPrintValueToString(value);
  std::string result = text;
  LLVMDisposeMessage(text);
  return result;
}

std::string print_module(LLVMModuleRef mod) {
  char *text = LLVMPrintModuleToString(mod);
  std::string result = text;
  LLVMDisposeMessage(text);
  return result;
}

// Enzyme's type tree for one value of `type`, its pointee described by `pointee`.
class TypeTrees {
 public:
  TypeTrees(const EnzymeApi &api, LLVMContextRef ctx) : api_(api), ctx_(ctx) {}
  ~TypeTrees() {
    for (auto tree : owned_) api_.FreeTypeTree(tree);
  }

  capi::CTypeTreeRef for_value(LLVMTypeRef type, capi::CConcreteType pointee) {
    capi::CTypeTreeRef tree = nullptr;
    switch (LLVMGetTypeKind(type)) {
      case LLVMDoubleTypeKind: tree = leaf(capi::DT_Double); break;
      case LLVMFloatTypeKind: tree = leaf(capi::DT_Float); break;
      case LLVMIntegerTypeKind: tree = leaf(capi::DT_Integer); break;
      case LLVMPointerTypeKind: {
        tree = leaf(capi::DT_Pointer);
        if (pointee != capi::DT_Unknown) {
          // {[-1]: Pointer, [-1,-1]: pointee}: every byte it points at.
          capi::CTypeTreeRef inner = leaf(pointee);
          api_.TypeTreeOnlyEq(inner, -1);
          api_.MergeTypeTree(tree, inner);
        }
        break;
      }
      default: return track(api_.NewTypeTree());
    }
    return tree;
  }

  capi::CTypeTreeRef empty() { return track(api_.NewTypeTree()); }

 private:
  // {[-1]: kind}
  capi::CTypeTreeRef leaf(capi::CConcreteType kind) {
    capi::CTypeTreeRef tree = track(api_.NewTypeTreeCT(kind, ctx_));
    api_.TypeTreeOnlyEq(tree, -1);
    return tree;
  }
  capi::CTypeTreeRef track(capi::CTypeTreeRef tree) {
    owned_.push_back(tree);
    return tree;
  }

  const EnzymeApi &api_;
  LLVMContextRef ctx_;
  std::vector<capi::CTypeTreeRef> owned_;
};

struct ModuleOwner {
  LLVMModuleRef mod;
  ~ModuleOwner() {
    if (mod) LLVMDisposeModule(mod);
  }
};

// The shadow of a temporary from a registered allocation function: the same
// call again (the arena zeroes what it hands out).
LLVMValueRef shadow_allocation(LLVMBuilderRef b, LLVMValueRef call, size_t num_args,
                               LLVMValueRef *args, void *) {
  return LLVMBuildCall2(b, LLVMGetCalledFunctionType(call), LLVMGetCalledValue(call), args,
                        static_cast<unsigned>(num_args), "shadow_alloc");
}

// Enzyme's release of such a shadow: left to the arena, released after the call.
LLVMValueRef shadow_release(LLVMBuilderRef b, LLVMValueRef to_free) {
  LLVMModuleRef mod =
      LLVMGetGlobalParent(LLVMGetBasicBlockParent(LLVMGetInsertBlock(b)));
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(ctx), 0);
  LLVMTypeRef type = LLVMFunctionType(LLVMVoidTypeInContext(ctx), &i8p, 1, 0);
  LLVMValueRef keep = LLVMGetNamedFunction(mod, kArenaKeep);
  if (!keep) {
    keep = LLVMAddFunction(mod, kArenaKeep, type);
    // A no-op to differentiate through: forward over reverse (ez.hessian of a
    // function with temporaries) meets it in the first derivative.
    static const char kInactive[] = "enzyme_inactive";
    LLVMAddAttributeAtIndex(
        keep, LLVMAttributeFunctionIndex,
        LLVMCreateStringAttribute(ctx, kInactive, sizeof kInactive - 1, "", 0));
  }
  LLVMValueRef arg = LLVMBuildPointerCast(b, to_free, i8p, "");
  return LLVMBuildCall2(b, type, keep, &arg, 1, "");
}

// The first call through a function pointer in `fn` or what it calls directly
// (an empty string if there is none).
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

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

SourceModule::SourceModule(LLVMContextRef ctx, const std::string &ir_text) {
  LLVMMemoryBufferRef buffer =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(ir_text.data(), ir_text.size(), "ir");
  char *error = nullptr;
  // Takes ownership of the buffer.
  if (LLVMParseIRInContext(ctx, buffer, &mod_, &error)) {
    std::string text = error ? error : "unknown parse error";
    LLVMDisposeMessage(error);
    throw std::invalid_argument("invalid LLVM IR: " + text);
  }
  if (LLVMVerifyModule(mod_, LLVMReturnStatusAction, &error)) {
    std::string text = error ? error : "";
    LLVMDisposeMessage(error);
    LLVMDisposeModule(mod_);
    mod_ = nullptr;
    throw std::invalid_argument("invalid LLVM IR: " + text);
  }
  LLVMDisposeMessage(error);
}

SourceModule::~SourceModule() {
  if (mod_) LLVMDisposeModule(mod_);
}

std::string SourceModule::ir() const { return print_module(mod_); }

std::unique_ptr<SourceModule> SourceModule::with_rules(const std::vector<Rule> &rules) const {
  ModuleOwner linked{LLVMCloneModule(mod_)};
  std::vector<const SourceModule *> done;
  for (const Rule &r : rules) {
    // A rule written in the function's own module is there already.
    if (r.rule_module == this) continue;
    if (std::find(done.begin(), done.end(), r.rule_module) != done.end()) continue;
    // Linked in already: a derivative made with these rules, differentiated again.
    LLVMValueRef existing = LLVMGetNamedFunction(linked.mod, r.rule.c_str());
    if (existing && !LLVMIsDeclaration(existing)) continue;
    done.push_back(r.rule_module);
    // The linker consumes its source: link a clone.
    if (LLVMLinkModules2(linked.mod, LLVMCloneModule(r.rule_module->get()))) {
      throw std::invalid_argument("the rules for '" + r.target +
                                  "' cannot be linked with the function's module "
                                  "(a name defined in both?)");
    }
  }
  LLVMContextRef ctx = LLVMGetModuleContext(linked.mod);
  for (const Rule &r : rules) {
    LLVMValueRef target = LLVMGetNamedFunction(linked.mod, r.target.c_str());
    LLVMValueRef rule = LLVMGetNamedFunction(linked.mod, r.rule.c_str());
    if (!target) throw std::invalid_argument("no function '" + r.target + "' to attach a rule to");
    if (!rule || LLVMIsDeclaration(rule)) {
      throw std::invalid_argument("the rule '" + r.rule + "' is not defined");
    }
    LLVMMetadataRef node_ops[] = {LLVMValueAsMetadata(rule)};
    LLVMMetadataRef node = LLVMMDNodeInContext2(ctx, node_ops, 1);
    unsigned kind = LLVMGetMDKindIDInContext(ctx, r.kind.c_str(),
                                             static_cast<unsigned>(r.kind.size()));
    LLVMGlobalSetMetadata(target, kind, node);
    // Kept for Enzyme until it has made the derivative.
    LLVMSetLinkage(rule, LLVMExternalLinkage);
  }
  LLVMModuleRef out = linked.mod;
  linked.mod = nullptr;
  return std::make_unique<SourceModule>(out);
}

Engine::Engine(const std::string &plugin_path) {
  const EnzymeApi &api = load_enzyme_plugin(plugin_path);
  *api.CustomErrorHandler = &on_enzyme_error;
  // Enzyme v0.0.289 can fail an internal assertion in its min-cut caching
  // (computeMinCache), which would abort the interpreter: off in this process.
  // Isolated builds turn it on in their child (DerivativeRequest::mincut).
  set_mincut(false);
  for (const auto &[name, address] : arena_symbols()) {
    if (name.rfind("NRT_", 0) != 0) continue;  // Numba's allocation functions only
    std::string n = name;
    api.RegisterAllocationHandler(n.data(), &shadow_allocation, &shadow_release);
  }
  ctx_ = LLVMContextCreate();
  // Typed pointers (LLVM 15 still reads them): parameter types then say what a
  // pointer points at, and Numba and `clang -no-opaque-pointers` emit them.
  LLVMContextSetOpaquePointers(ctx_, 0);
  LLVMContextSetDiagnosticHandler(ctx_, &on_diagnostic, nullptr);
  jit_ = std::make_unique<HostJit>();
  // Before any other definition of these names (Numba's own are defined later).
  for (const auto &[name, address] : arena_symbols()) jit_->define_symbol(name, address);
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
  const EnzymeApi &api = enzyme_api();
  const bool log = log_enabled();
  auto t0 = Clock::now();
  pending_errors.clear();

  ModuleOwner work{LLVMCloneModule(source.get())};
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
  strip_memory_attributes_of_declarations(mod);
  strip_scoped_noalias(mod);
  compare_without_fabs(mod);
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
      if (augmented && pending_errors.empty()) {
        int64_t at[3] = {-1, -1, -1};
        uint8_t there[3] = {0, 0, 0};
        api.ExtractReturnInfo(augmented, at, there, 3);
        // The entry point flattens the returned struct in order: the tape first.
        if (!there[0] || at[0] != 0 || (there[1] && at[1] != 1) || there[2]) {
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
  Artifact out;
  out.entry_name = entry_name;
  out.enzyme_ir = print_value(derivative);
  out.derivative_module = print_module(mod);
  // Also for primal-only requests: a kernel's range driver calls a derivative made
  // earlier (its tape allocations still marked) once per index.
  // The augmented forward pass of split mode: every allocation it keeps must
  // live as long as its tape (SplitTape in arena.h), the tape struct included.
  route_tape_to_arena(mod, req.split == 1);

  // Only the entry stays visible; everything else may be inlined and dropped,
  // and objects of several derivatives never clash in the JIT.
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    if (!LLVMIsDeclaration(f)) LLVMSetLinkage(f, LLVMInternalLinkage);
  }
  for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g)) {
    size_t length = 0;
    const char *name = LLVMGetValueName2(g, &length);
    // LLVM's own (llvm.compiler.used, from an earlier vectorisation) keep theirs.
    if (length >= 5 && std::strncmp(name, "llvm.", 5) == 0) continue;
    if (!LLVMIsDeclaration(g)) LLVMSetLinkage(g, LLVMInternalLinkage);
  }
  LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(ctx_), 0);
  LLVMTypeRef entry_type = LLVMFunctionType(LLVMVoidTypeInContext(ctx_), &i8p, 1, 0);
  LLVMValueRef entry = LLVMAddFunction(mod, entry_name.c_str(), entry_type);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx_);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx_, entry, "entry"));
  LLVMValueRef slots = LLVMBuildBitCast(
      b, LLVMGetParam(entry, 0), LLVMPointerType(LLVMInt64TypeInContext(ctx_), 0), "");
  EntryBuilder slots_io(ctx_, b, slots);
  LLVMTypeRef dtype = LLVMGlobalGetValueType(derivative);
  std::vector<LLVMValueRef> call_args;
  try {
    for (unsigned i = 0, n = LLVMCountParams(derivative); i < n; ++i) {
      call_args.push_back(slots_io.load(LLVMTypeOf(LLVMGetParam(derivative, i)), out.in_slots));
    }
    LLVMValueRef result = LLVMBuildCall2(b, dtype, derivative, call_args.data(),
                                         call_args.size(), "");
    LLVMTypeRef rtype = LLVMGetReturnType(dtype);
    if (LLVMGetTypeKind(rtype) != LLVMVoidTypeKind) slots_io.store(result, rtype, out.out_slots);
    LLVMBuildRetVoid(b);
  } catch (...) {
    LLVMDisposeBuilder(b);
    throw;
  }
  LLVMDisposeBuilder(b);

  char *verify_error = nullptr;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &verify_error)) {
    std::string text = verify_error ? verify_error : "";
    LLVMDisposeMessage(verify_error);
    throw EnzymeFailure("the derivative of '" + req.function +
                        "' is not valid LLVM IR: " + text);
  }
  LLVMDisposeMessage(verify_error);

  // Enzyme can leave in-memory IR that verifies and prints correctly yet
  // crashes LLVM's InstCombine (seen on Numba's GMM). Optimizing what the
  // printed text parses back to is immune to that.
  {
    std::string text = print_module(mod);
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
  }
  jit_->optimize(mod, req.passes);
  out.optimized_ir = print_module(mod);
  auto t_opt = Clock::now();
  out.object = jit_->emit_object(mod);
  if (log) {
    std::fprintf(stderr,
                 "[enzyme_py] %s '%s' width=%u: enzyme %.1f ms, optimize %.1f ms, "
                 "codegen %.1f ms\n",
                 req.forward ? "forward" : "reverse", req.function.c_str(), req.width,
                 std::chrono::duration<double, std::milli>(t_enzyme - t0).count(),
                 std::chrono::duration<double, std::milli>(t_opt - t_enzyme).count(),
                 ms_since(t_opt));
  }
  return out;
}

uint64_t Engine::load(const std::string &object, const std::string &entry_name) {
  return jit_->load(object, entry_name);
}

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

}  // namespace

namespace {

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

// Waits for the child; polls `interrupted` every ~10 ms. On an interrupt, the
// child is killed (if it still runs) and reaped, and the result is true.
bool wait_for_child(pid_t pid, int &wstatus, const std::function<bool()> &interrupted,
                    const std::function<std::shared_ptr<void>()> &while_waiting) {
  Fd exited;
#ifdef SYS_pidfd_open
  exited.fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  for (;;) {
    pid_t done = ::waitpid(pid, &wstatus, interrupted ? WNOHANG : 0);
    if (done == pid) return false;
    if (done < 0 && errno != EINTR) {
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    }
    if (!interrupted) continue;
    if (interrupted()) {
      if (::waitpid(pid, &wstatus, WNOHANG) != pid) {
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
        }
      }
      return true;
    }
    std::shared_ptr<void> waiting = while_waiting ? while_waiting() : nullptr;
    if (exited.fd >= 0) {
      struct pollfd p{exited.fd, POLLIN, 0};
      ::poll(&p, 1, 10);  // wakes when the child exits, or on a signal
    } else {
      struct timespec ten_ms{0, 10000000};
      ::nanosleep(&ten_ms, nullptr);
    }
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

Artifact Engine::build_isolated(const SourceModule &source, const DerivativeRequest &req,
                                const std::string &entry_name,
                                const std::function<bool()> &interrupted,
                                const std::function<std::shared_ptr<void>()> &while_waiting) {
  Fd result{static_cast<int>(::syscall(SYS_memfd_create, "enzyme_py_result", 0))};
  Fd errors{static_cast<int>(::syscall(SYS_memfd_create, "enzyme_py_stderr", 0))};
  if (result.fd < 0 || errors.fd < 0) {
    throw std::runtime_error(std::string("memfd_create failed: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The child: no Python, no destructors, no atexit handlers; only _exit.
    ::dup2(errors.fd, STDERR_FILENO);
    // A crash here ends the child plainly: no Python faulthandler report.
    for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGILL, SIGFPE}) ::signal(sig, SIG_DFL);
    // Writing past RLIMIT_FSIZE then fails with EFBIG, reported as such.
    ::signal(SIGXFSZ, SIG_IGN);
    // Ctrl-C is the parent's to handle: it kills this child.
    ::signal(SIGINT, SIG_IGN);
    echo_errors = true;
    set_mincut(req.mincut);
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
      art = build(source, req, entry_name);
    } catch (const std::bad_alloc &) {
      status = kOutOfMemory;
      message = "Enzyme ran out of memory while differentiating '" + req.function +
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
      ::_exit(0);
    }
    ::_exit(errno == EFBIG ? kExitResultTooBig : kExitWriteFailed);
  }
  int wstatus = 0;
  bool interrupt = wait_for_child(pid, wstatus, interrupted, while_waiting);
  std::string child_stderr = read_all(errors.fd);
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
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::string text = "Enzyme crashed while differentiating '" + req.function +
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
