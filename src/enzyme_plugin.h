// Loading the Enzyme plugin in-process and resolving its C API by name.
#pragma once

#include <string>
#include <vector>

#include "enzyme_capi.h"

namespace enzyme_py {

// The resolved entry points of one loaded plugin. Owned by the process: the
// plugin registers LLVM passes and options at load time and is never unloaded.
struct EnzymeApi {
  std::string path;
  void *handle = nullptr;

  capi::CreateEnzymeLogic_t CreateEnzymeLogic = nullptr;
  capi::FreeEnzymeLogic_t FreeEnzymeLogic = nullptr;
  capi::CreateTypeAnalysis_t CreateTypeAnalysis = nullptr;
  capi::FreeTypeAnalysis_t FreeTypeAnalysis = nullptr;
  capi::EnzymeNewTypeTree_t NewTypeTree = nullptr;
  capi::EnzymeNewTypeTreeCT_t NewTypeTreeCT = nullptr;
  capi::EnzymeFreeTypeTree_t FreeTypeTree = nullptr;
  capi::EnzymeMergeTypeTree_t MergeTypeTree = nullptr;
  capi::EnzymeTypeTreeOnlyEq_t TypeTreeOnlyEq = nullptr;
  capi::EnzymeTypeTreeShiftIndiciesEq_t TypeTreeShiftIndiciesEq = nullptr;
  capi::EnzymeTypeTreeToString_t TypeTreeToString = nullptr;
  capi::EnzymeStringFree_t StringFree = nullptr;
  capi::EnzymeCreatePrimalAndGradient_t CreatePrimalAndGradient = nullptr;
  capi::EnzymeCreateForwardDiff_t CreateForwardDiff = nullptr;
  capi::EnzymeCreateAugmentedPrimal_t CreateAugmentedPrimal = nullptr;
  capi::EnzymeExtractFunctionFromAugmentation_t ExtractFunctionFromAugmentation = nullptr;
  capi::EnzymeExtractTapeTypeFromAugmentation_t ExtractTapeTypeFromAugmentation = nullptr;
  capi::EnzymeExtractReturnInfo_t ExtractReturnInfo = nullptr;
  capi::EnzymeRegisterAllocationHandler_t RegisterAllocationHandler = nullptr;
  capi::EnzymeSetCLBool_t SetCLBool = nullptr;
  capi::EnzymeSetCLInteger_t SetCLInteger = nullptr;

  // Address of the plugin's `CustomErrorHandler` variable.
  capi::CustomErrorHandler_t *CustomErrorHandler = nullptr;

  // Address of an exported cl::opt<bool> / cl::opt<int> object, or null.
  void *option(const char *name) const;
};

// dlopen the plugin at `path` and resolve every entry point above.
// Throws std::runtime_error naming the file and the first missing symbol.
const EnzymeApi &load_enzyme_plugin(const std::string &path);

// The plugin loaded by load_enzyme_plugin; throws if none is loaded yet.
const EnzymeApi &enzyme_api();
bool enzyme_loaded();

}  // namespace enzyme_py
