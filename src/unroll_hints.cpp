#include "unroll_hints.h"

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Transforms/Utils/LoopUtils.h>

namespace enzyme_py {

llvm::PreservedAnalyses KeepVectorLoopsRolled::run(llvm::Function &fn,
                                                   llvm::FunctionAnalysisManager &analyses) {
  llvm::LoopInfo &loops = analyses.getResult<llvm::LoopAnalysis>(fn);
  for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
    if (!llvm::getBooleanLoopAttribute(loop, "llvm.loop.isvectorized")) continue;
    if (llvm::getBooleanLoopAttribute(loop, "llvm.loop.unroll.runtime.disable")) continue;
    llvm::addStringMetadataToLoop(loop, "llvm.loop.unroll.runtime.disable");
  }
  // Only loops' metadata changes: every analysis still holds.
  return llvm::PreservedAnalyses::all();
}

}  // namespace enzyme_py
