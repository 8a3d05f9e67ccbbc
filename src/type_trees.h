// Enzyme's type trees of the values a derivative takes and returns: what the engine
// tells Enzyme's type analysis of each parameter (and of what a pointer points at).
#pragma once

#include <string>
#include <vector>

#include <llvm-c/Core.h>

#include "enzyme_plugin.h"

namespace enzyme_py {

// Type trees made for one request, all freed with it.
class TypeTrees {
 public:
  TypeTrees(const EnzymeApi &api, LLVMContextRef ctx) : api_(api), ctx_(ctx) {}
  ~TypeTrees();
  TypeTrees(const TypeTrees &) = delete;
  TypeTrees &operator=(const TypeTrees &) = delete;

  // The tree of one value of `type`: {[-1]: its kind}; a pointer's also
  // {[-1,-1]: pointee} (every byte it points at) unless `pointee` is DT_Unknown.
  // Other types (aggregates, void) get an empty tree.
  capi::CTypeTreeRef for_value(LLVMTypeRef type, capi::CConcreteType pointee);
  capi::CTypeTreeRef empty();

 private:
  capi::CTypeTreeRef leaf(capi::CConcreteType kind);  // {[-1]: kind}
  capi::CTypeTreeRef track(capi::CTypeTreeRef tree);

  const EnzymeApi &api_;
  LLVMContextRef ctx_;
  std::vector<capi::CTypeTreeRef> owned_;
};

// One type tree as Enzyme prints it, for `kind` (and `pointee`, when >= 0) built the
// way argument trees are built. Exercises the TypeTree entry points (the C API test).
std::string type_tree_string(const EnzymeApi &api, LLVMContextRef ctx, int kind, int pointee);

}  // namespace enzyme_py
