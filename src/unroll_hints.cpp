#include "unroll_hints.h"

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Transforms/Utils/LoopUtils.h>

namespace enzyme_py {

namespace {

bool holds_vector_loop(const llvm::Loop &loop) {
  for (const llvm::Loop *inner : loop.getSubLoops()) {
    if (llvm::getBooleanLoopAttribute(inner, "llvm.loop.isvectorized")) return true;
    if (holds_vector_loop(*inner)) return true;
  }
  return false;
}

}  // namespace

llvm::PreservedAnalyses KeepVectorLoopsRolled::run(llvm::Function &fn,
                                                   llvm::FunctionAnalysisManager &analyses) {
  llvm::LoopInfo &loops = analyses.getResult<llvm::LoopAnalysis>(fn);
  for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
    const bool vectorised = llvm::getBooleanLoopAttribute(loop, "llvm.loop.isvectorized");
    if (!vectorised && !holds_vector_loop(*loop)) continue;
    if (llvm::getBooleanLoopAttribute(loop, "llvm.loop.unroll.runtime.disable")) continue;
    llvm::addStringMetadataToLoop(loop, "llvm.loop.unroll.runtime.disable");
  }
  // Only loops' metadata changes: every analysis still holds.
  return llvm::PreservedAnalyses::all();
}

}  // namespace enzyme_py
