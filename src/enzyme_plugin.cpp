#include "enzyme_plugin.h"

#include <dlfcn.h>

#include <memory>
#include <stdexcept>

namespace enzyme_py {
namespace {

std::unique_ptr<EnzymeApi> loaded_api;

template <typename Fn>
void resolve(const EnzymeApi &api, Fn &slot, const char *name) {
  void *sym = dlsym(api.handle, name);
  if (!sym) {
    throw std::runtime_error("Enzyme plugin " + api.path +
                             " does not export '" + name +
                             "': it is not the Enzyme v0.0.289 build enzyme_py "
                             "declares its C API for");
  }
  slot = reinterpret_cast<Fn>(sym);
}

}  // namespace

void *EnzymeApi::option(const char *name) const {
  return handle ? dlsym(handle, name) : nullptr;
}

const EnzymeApi &load_enzyme_plugin(const std::string &path) {
  if (loaded_api) {
    if (loaded_api->path != path) {
      throw std::runtime_error("an Enzyme plugin is already loaded from " +
                               loaded_api->path + "; cannot load " + path +
                               " into the same process");
    }
    return *loaded_api;
  }
  // RTLD_NODELETE: the plugin registers LLVM options and passes in static
  // constructors; unloading it would leave dangling registrations.
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char *why = dlerror();
    throw std::runtime_error("cannot load the Enzyme plugin " + path + ": " +
                             (why ? why : "unknown dlopen error"));
  }
  auto api = std::make_unique<EnzymeApi>();
  api->path = path;
  api->handle = handle;
  resolve(*api, api->CreateEnzymeLogic, "CreateEnzymeLogic");
  resolve(*api, api->FreeEnzymeLogic, "FreeEnzymeLogic");
  resolve(*api, api->CreateTypeAnalysis, "CreateTypeAnalysis");
  resolve(*api, api->FreeTypeAnalysis, "FreeTypeAnalysis");
  resolve(*api, api->NewTypeTree, "EnzymeNewTypeTree");
  resolve(*api, api->NewTypeTreeCT, "EnzymeNewTypeTreeCT");
  resolve(*api, api->FreeTypeTree, "EnzymeFreeTypeTree");
  resolve(*api, api->MergeTypeTree, "EnzymeMergeTypeTree");
  resolve(*api, api->TypeTreeOnlyEq, "EnzymeTypeTreeOnlyEq");
  resolve(*api, api->TypeTreeShiftIndiciesEq, "EnzymeTypeTreeShiftIndiciesEq");
  resolve(*api, api->TypeTreeToString, "EnzymeTypeTreeToString");
  resolve(*api, api->StringFree, "EnzymeStringFree");
  resolve(*api, api->CreatePrimalAndGradient, "EnzymeCreatePrimalAndGradient");
  resolve(*api, api->CreateForwardDiff, "EnzymeCreateForwardDiff");
  resolve(*api, api->CreateAugmentedPrimal, "EnzymeCreateAugmentedPrimal");
  resolve(*api, api->ExtractFunctionFromAugmentation, "EnzymeExtractFunctionFromAugmentation");
  resolve(*api, api->ExtractTapeTypeFromAugmentation, "EnzymeExtractTapeTypeFromAugmentation");
  resolve(*api, api->ExtractReturnInfo, "EnzymeExtractReturnInfo");
  resolve(*api, api->RegisterAllocationHandler, "EnzymeRegisterAllocationHandler");
  resolve(*api, api->SetCLBool, "EnzymeSetCLBool");
  resolve(*api, api->SetCLInteger, "EnzymeSetCLInteger");
  resolve(*api, api->CustomErrorHandler, "CustomErrorHandler");
  loaded_api = std::move(api);
  return *loaded_api;
}

const EnzymeApi &enzyme_api() {
  if (!loaded_api) throw std::runtime_error("the Enzyme plugin is not loaded");
  return *loaded_api;
}

bool enzyme_loaded() { return static_cast<bool>(loaded_api); }

}  // namespace enzyme_py
