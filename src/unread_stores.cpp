#include "unread_stores.h"

#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>

#include <unordered_set>
#include <vector>

namespace enzyme_py {
namespace {

// The stores into the memory `fresh` points to, where they are all its uses do
// (through GEPs and casts); false where anything else uses it.
bool only_stored_into(llvm::Value *fresh, std::vector<llvm::StoreInst *> &stores) {
  std::vector<llvm::Value *> pointers{fresh};
  std::unordered_set<llvm::Value *> seen{fresh};
  while (!pointers.empty()) {
    llvm::Value *pointer = pointers.back();
    pointers.pop_back();
    for (llvm::Use &use : pointer->uses()) {
      llvm::User *user = use.getUser();
      const bool address = (llvm::isa<llvm::GetElementPtrInst>(user) && use.getOperandNo() == 0) ||
                           llvm::isa<llvm::BitCastInst>(user) ||
                           llvm::isa<llvm::AddrSpaceCastInst>(user);
      if (address) {
        if (seen.insert(user).second) pointers.push_back(user);
        continue;
      }
      auto *store = llvm::dyn_cast<llvm::StoreInst>(user);
      if (!store || store->isVolatile() || use.getOperandNo() != store->getPointerOperandIndex()) {
        return false;
      }
      stores.push_back(store);
    }
  }
  return true;
}

}  // namespace

llvm::PreservedAnalyses DropUnreadStores::run(llvm::Function &fn,
                                              llvm::FunctionAnalysisManager &) {
  std::vector<llvm::StoreInst *> unread;
  for (llvm::Instruction &inst : llvm::instructions(fn)) {
    auto *call = llvm::dyn_cast<llvm::CallBase>(&inst);
    // hasRetAttr: the call site's attributes or the callee's (returnDoesNotAlias
    // reads the call site's only).
    if (!call || !call->getType()->isPointerTy() || !call->hasRetAttr(llvm::Attribute::NoAlias)) {
      continue;
    }
    std::vector<llvm::StoreInst *> stores;
    if (only_stored_into(call, stores)) unread.insert(unread.end(), stores.begin(), stores.end());
  }
  for (llvm::StoreInst *store : unread) store->eraseFromParent();
  return unread.empty() ? llvm::PreservedAnalyses::all() : llvm::PreservedAnalyses::none();
}

}  // namespace enzyme_py
