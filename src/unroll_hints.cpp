#include "unroll_hints.h"

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/InstrTypes.h>
#include <llvm/IR/Intrinsics.h>
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

// A call that stays a call in the machine code: a function's, or a libm function's
// behind an LLVM math intrinsic (llvm.exp.f64 becomes `call exp`). LLVM's unroller
// counts those intrinsics as instructions.
bool makes_calls(const llvm::Loop &loop) {
  for (const llvm::BasicBlock *block : loop.blocks()) {
    for (const llvm::Instruction &inst : *block) {
      const auto *call = llvm::dyn_cast<llvm::CallBase>(&inst);
      if (!call) continue;
      const llvm::Function *callee = call->getCalledFunction();
      if (!callee) return true;
      switch (callee->getIntrinsicID()) {
        case llvm::Intrinsic::not_intrinsic:
        case llvm::Intrinsic::exp:
        case llvm::Intrinsic::exp2:
        case llvm::Intrinsic::log:
        case llvm::Intrinsic::log2:
        case llvm::Intrinsic::log10:
        case llvm::Intrinsic::pow:
        case llvm::Intrinsic::powi:
        case llvm::Intrinsic::sin:
        case llvm::Intrinsic::cos:
          return true;
        default:
          break;
      }
    }
  }
  return false;
}

}  // namespace

llvm::PreservedAnalyses KeepVectorLoopsRolled::run(llvm::Function &fn,
                                                   llvm::FunctionAnalysisManager &analyses) {
  llvm::LoopInfo &loops = analyses.getResult<llvm::LoopAnalysis>(fn);
  for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
    const bool vectorised = llvm::getBooleanLoopAttribute(loop, "llvm.loop.isvectorized");
    // A loop's blocks include its inner loops': a loop around one that calls calls.
    if (!vectorised && !holds_vector_loop(*loop) && !makes_calls(*loop)) continue;
    if (llvm::getBooleanLoopAttribute(loop, "llvm.loop.unroll.runtime.disable")) continue;
    llvm::addStringMetadataToLoop(loop, "llvm.loop.unroll.runtime.disable");
  }
  // Only loops' metadata changes: every analysis still holds.
  return llvm::PreservedAnalyses::all();
}

}  // namespace enzyme_py
