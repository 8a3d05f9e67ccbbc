#include "type_trees.h"

namespace enzyme_py {

TypeTrees::~TypeTrees() {
  for (auto tree : owned_) api_.FreeTypeTree(tree);
}

capi::CTypeTreeRef TypeTrees::for_value(LLVMTypeRef type, capi::CConcreteType pointee) {
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

capi::CTypeTreeRef TypeTrees::empty() { return track(api_.NewTypeTree()); }

capi::CTypeTreeRef TypeTrees::leaf(capi::CConcreteType kind) {
  capi::CTypeTreeRef tree = track(api_.NewTypeTreeCT(kind, ctx_));
  api_.TypeTreeOnlyEq(tree, -1);
  return tree;
}

capi::CTypeTreeRef TypeTrees::track(capi::CTypeTreeRef tree) {
  owned_.push_back(tree);
  return tree;
}

std::string type_tree_string(const EnzymeApi &api, LLVMContextRef ctx, int kind, int pointee) {
  capi::CTypeTreeRef tree = api.NewTypeTreeCT(static_cast<capi::CConcreteType>(kind), ctx);
  api.TypeTreeOnlyEq(tree, -1);
  if (pointee >= 0) {
    capi::CTypeTreeRef inner =
        api.NewTypeTreeCT(static_cast<capi::CConcreteType>(pointee), ctx);
    api.TypeTreeOnlyEq(inner, -1);
    api.TypeTreeOnlyEq(inner, -1);
    api.MergeTypeTree(tree, inner);
    api.FreeTypeTree(inner);
  }
  const char *text = api.TypeTreeToString(tree);
  std::string result = text;
  api.StringFree(text);
  api.FreeTypeTree(tree);
  return result;
}

}  // namespace enzyme_py
