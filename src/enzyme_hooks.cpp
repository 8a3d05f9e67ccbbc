#include "enzyme_hooks.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "arena.h"

namespace enzyme_py {
namespace {

std::vector<std::string> pending_errors;
bool echo_errors = false;

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

// The shadow of a temporary from a registered allocation function: the same
// call again (the arena zeroes what it hands out).
LLVMValueRef shadow_allocation(LLVMBuilderRef b, LLVMValueRef call, size_t num_args,
                               LLVMValueRef *args, void *) {
  return LLVMBuildCall2(b, LLVMGetCalledFunctionType(call), LLVMGetCalledValue(call), args,
                        static_cast<unsigned>(num_args), "shadow_alloc");
}

unsigned enum_kind(const char *name) {
  return LLVMGetEnumAttributeKindForName(name, std::strlen(name));
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
    // It does nothing, and says so: to alias analysis, a call that might keep the
    // pointer or write memory made every shadow of a temporary escape. The
    // optimiser drops it (no speed change was measured on the GMM gradient).
    for (const char *name : {"readnone", "nounwind", "willreturn", "nosync", "nofree"}) {
      LLVMAddAttributeAtIndex(keep, LLVMAttributeFunctionIndex,
                              LLVMCreateEnumAttribute(ctx, enum_kind(name), 0));
    }
    LLVMAddAttributeAtIndex(keep, 1, LLVMCreateEnumAttribute(ctx, enum_kind("nocapture"), 0));
  }
  LLVMValueRef arg = LLVMBuildPointerCast(b, to_free, i8p, "");
  return LLVMBuildCall2(b, type, keep, &arg, 1, "");
}

}  // namespace

void install_enzyme_hooks(const EnzymeApi &api) {
  *api.CustomErrorHandler = &on_enzyme_error;
  for (const auto &[name, address] : arena_symbols()) {
    if (name.rfind("NRT_", 0) != 0) continue;  // Numba's allocation functions only
    std::string n = name;
    api.RegisterAllocationHandler(n.data(), &shadow_allocation, &shadow_release);
  }
}

void capture_diagnostics(LLVMContextRef ctx) {
  LLVMContextSetDiagnosticHandler(ctx, &on_diagnostic, nullptr);
}

void clear_errors() { pending_errors.clear(); }

bool has_errors() { return !pending_errors.empty(); }

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

void echo_errors_to_stderr() { echo_errors = true; }

bool log_enabled() {
  const char *v = std::getenv("ENZYME_PY_LOG");
  return v && *v && std::string(v) != "0";
}

}  // namespace enzyme_py
