#include "wide_vectors.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include <llvm/Analysis/IVDescriptors.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/Transforms/Utils/LoopUtils.h>

namespace enzyme_py {
namespace {

constexpr unsigned kWideBits = 512;
// Longer bodies are more than a stream: left to LLVM's own choice of width.
constexpr size_t kMostInstructions = 64;
// A loop known to run fewer times than this fills too few 512-bit vectors to gain.
constexpr unsigned kFewestIterations = 32;

// Intrinsics a streaming loop may call: arithmetic the vectoriser widens as it is,
// and markers that compile to nothing. (Math functions such as exp go to libmvec,
// whose LLVM 15 mappings stop at 256 bits.)
bool plain_intrinsic(const llvm::Instruction &inst) {
  const auto *call = llvm::dyn_cast<llvm::IntrinsicInst>(&inst);
  if (!call) return false;
  switch (call->getIntrinsicID()) {
    case llvm::Intrinsic::fmuladd:
    case llvm::Intrinsic::fma:
    case llvm::Intrinsic::fabs:
    case llvm::Intrinsic::sqrt:
    case llvm::Intrinsic::minnum:
    case llvm::Intrinsic::maxnum:
    case llvm::Intrinsic::copysign:
    case llvm::Intrinsic::assume:
    case llvm::Intrinsic::experimental_noalias_scope_decl:
      return true;
    default:
      return false;
  }
}

// The width hint (in elements) a streaming loop gets, or nothing (see the header).
std::optional<unsigned> streaming_width(llvm::Loop &loop, llvm::ScalarEvolution &se) {
  if (!loop.isInnermost() || !loop.getLoopPreheader() || !loop.getExitBlock()) return {};
  const unsigned most = se.getSmallConstantMaxTripCount(&loop);
  if (most != 0 && most < kFewestIterations) return {};
  if (llvm::findStringMetadataForLoop(&loop, "llvm.loop.isvectorized") ||
      llvm::findStringMetadataForLoop(&loop, "llvm.loop.vectorize.width"))
    return {};
  for (llvm::PHINode &phi : loop.getHeader()->phis()) {
    llvm::InductionDescriptor induction;
    if (llvm::InductionDescriptor::isInductionPHI(&phi, &loop, &se, induction)) continue;
    llvm::RecurrenceDescriptor reduction;
    if (llvm::RecurrenceDescriptor::isReductionPHI(&phi, &loop, reduction)) return {};
  }
  size_t count = 0;
  unsigned bits = 0;  // the widest floating-point value the loop computes, loads or stores
  bool stores = false;
  for (llvm::BasicBlock *block : loop.blocks()) {
    for (llvm::Instruction &inst : *block) {
      if (++count > kMostInstructions) return {};
      if (llvm::isa<llvm::CallBase>(inst) && !plain_intrinsic(inst)) return {};
      llvm::Type *type = inst.getType();
      if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
        type = store->getValueOperand()->getType();
        stores |= type->isFloatingPointTy();
      }
      if (type->isVectorTy()) return {};
      if (type->isFloatingPointTy())
        bits = std::max(bits, static_cast<unsigned>(type->getPrimitiveSizeInBits().getFixedSize()));
    }
  }
  if (!stores || bits == 0 || kWideBits % bits != 0) return {};
  return kWideBits / bits;
}

}  // namespace

llvm::PreservedAnalyses WidenStreamingLoops::run(llvm::Function &fn,
                                                 llvm::FunctionAnalysisManager &analyses) {
  if (!enabled || fn.isDeclaration()) return llvm::PreservedAnalyses::all();
  auto &loops = analyses.getResult<llvm::LoopAnalysis>(fn);
  auto &se = analyses.getResult<llvm::ScalarEvolutionAnalysis>(fn);
  bool changed = false;
  for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
    if (const std::optional<unsigned> width = streaming_width(*loop, se)) {
      llvm::addStringMetadataToLoop(loop, "llvm.loop.vectorize.width", *width);
      // One vector a step (8 doubles, not the 16 or 32 that interleaving makes: a
      // stencil over a few dozen entries still runs vector steps).
      llvm::addStringMetadataToLoop(loop, "llvm.loop.interleave.count", 1);
      changed = true;
    }
  }
  if (!changed) return llvm::PreservedAnalyses::all();
  const llvm::Attribute legal = fn.getFnAttribute("min-legal-vector-width");
  unsigned at_least = 0;
  if (legal.isValid()) legal.getValueAsString().getAsInteger(10, at_least);
  // clang gives each function the width its own code needs ("0" for none), which
  // would split the widened loops' vectors in two.
  if (at_least < kWideBits)
    fn.addFnAttr("min-legal-vector-width", std::to_string(kWideBits));
  // Only loop metadata and a function attribute changed.
  return llvm::PreservedAnalyses::all();
}

bool wide_vectors_pay(const std::string &cpu, const std::string &features) {
  if (const char *choice = std::getenv("ENZYME_PY_WIDE_VECTORS")) {
    const std::string value(choice);
    if (value == "0") return false;
    if (value == "1") return true;
  }
  if (features.find("+avx512f") == std::string::npos) return false;
  static const char *const kCores[] = {"icelake-client", "icelake-server", "rocketlake",
                                       "tigerlake", "sapphirerapids", "znver3", "znver4"};
  for (const char *core : kCores)
    if (cpu == core) return true;
  return false;
}

std::string tuned_features(const std::string &features) {
  if (features.find("+avx512f") == std::string::npos) return features;
  if (features.find("prefer-256-bit") != std::string::npos) return features;
  return features + (features.empty() ? "" : ",") + "+prefer-256-bit";
}

}  // namespace enzyme_py
