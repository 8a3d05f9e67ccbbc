#include "wide_vectors.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>

#include <llvm/Analysis/IVDescriptors.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/ScalarEvolution.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Transforms/Utils/LoopUtils.h>
#include <llvm/Transforms/Utils/ScalarEvolutionExpander.h>
#include <llvm/Transforms/Utils/ValueMapper.h>

namespace enzyme_py {
namespace {

constexpr unsigned kWideBits = 512;
// Longer bodies are more than a stream: left to LLVM's own choice of width.
constexpr size_t kMostInstructions = 64;
// Fewer iterations than this fill too few 512-bit vectors to gain: a loop known to
// run fewer is left alone, and one whose count is known only at run time runs as
// LLVM would have compiled it where it runs fewer (a copy of it, behind a check of
// the count before it).
constexpr unsigned kFewestIterations = 32;
// The copy for short runs: not looked at again.
constexpr const char *kShortRuns = "enzyme_py.loop.short_runs";

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
std::optional<unsigned> streaming_width(llvm::Loop &loop, llvm::ScalarEvolution &se,
                                        bool before_scatter) {
  if (!loop.isInnermost() || !loop.getLoopPreheader() || !loop.getExitBlock()) return {};
  // A loop known to run a few times (a 3 x 4 transform's) is no stream.
  const unsigned most = se.getSmallConstantMaxTripCount(&loop);
  if (most != 0 && most < kFewestIterations) return {};
  if (llvm::findStringMetadataForLoop(&loop, "llvm.loop.isvectorized") ||
      llvm::findStringMetadataForLoop(&loop, "llvm.loop.vectorize.width") ||
      llvm::findStringMetadataForLoop(&loop, kShortRuns))
    return {};
  for (llvm::PHINode &phi : loop.getHeader()->phis()) {
    llvm::InductionDescriptor induction;
    if (llvm::InductionDescriptor::isInductionPHI(&phi, &loop, &se, induction)) continue;
    llvm::RecurrenceDescriptor reduction;
    if (llvm::RecurrenceDescriptor::isReductionPHI(&phi, &loop, reduction)) return {};
  }
  std::set<llvm::Value *> loaded;
  size_t count = 0;
  unsigned bits = 0;  // the widest floating-point value the loop computes, loads or stores
  bool stores = false;
  for (llvm::BasicBlock *block : loop.blocks()) {
    for (llvm::Instruction &inst : *block) {
      if (++count > kMostInstructions) return {};
      if (llvm::isa<llvm::CallBase>(inst) && !plain_intrinsic(inst)) return {};
      llvm::Type *type = inst.getType();
      if (auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst))
        loaded.insert(load->getPointerOperand());
      if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
        if (before_scatter && loaded.count(store->getPointerOperand())) return {};
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

// The vectoriser's width for `loop`, one vector a step (8 doubles, not the 16 or 32
// that interleaving makes: a loop of 10 still runs one vector step).
void add_width_hint(llvm::Loop &loop, unsigned width) {
  llvm::addStringMetadataToLoop(&loop, "llvm.loop.vectorize.width", width);
  llvm::addStringMetadataToLoop(&loop, "llvm.loop.interleave.count", 1);
}

// `loop` behind a check of its iteration count: where it runs at least
// kFewestIterations times, the loop itself, given the width hint; else a copy of it
// as it was (kShortRuns). False where the loop is not in the form this needs (one exit, reached from its one exiting block; its count known on
// entry and computable there).
bool version_by_count(llvm::Loop &loop, unsigned width, llvm::LoopInfo &loops,
                      llvm::DominatorTree &tree, llvm::ScalarEvolution &se) {
  llvm::BasicBlock *check = loop.getLoopPreheader();
  llvm::BasicBlock *exit = loop.getExitBlock();
  llvm::BasicBlock *exiting = loop.getExitingBlock();
  if (!check || !exit || !exiting || exit->getSinglePredecessor() != exiting) return false;
  if (!loop.isLCSSAForm(tree) && (!llvm::formLCSSA(loop, tree, &loops, &se) ||
                                   !loop.isLCSSAForm(tree)))
    return false;
  const llvm::SCEV *backedges = se.getBackedgeTakenCount(&loop);
  if (llvm::isa<llvm::SCEVCouldNotCompute>(backedges) || !backedges->getType()->isIntegerTy())
    return false;
  const llvm::DataLayout &layout = check->getModule()->getDataLayout();
  llvm::SCEVExpander expander(se, layout, "wide");
  if (!expander.isSafeToExpandAt(backedges, check->getTerminator())) return false;

  llvm::BasicBlock *preheader = llvm::SplitBlock(check, check->getTerminator(), &tree, &loops,
                                                 nullptr, loop.getHeader()->getName() + ".wide.ph");
  llvm::ValueToValueMapTy map;
  llvm::SmallVector<llvm::BasicBlock *, 8> blocks;
  llvm::Loop *short_runs = llvm::cloneLoopWithPreheader(preheader, check, &loop, map, ".short",
                                                        &loops, &tree, blocks);
  llvm::remapInstructionsInBlocks(blocks, map);
  llvm::Value *count = expander.expandCodeFor(backedges, backedges->getType(),
                                              check->getTerminator());
  llvm::IRBuilder<> b(check->getTerminator());
  llvm::Value *long_run = b.CreateICmpUGE(
      count, llvm::ConstantInt::get(backedges->getType(), kFewestIterations - 1), "wide.long");
  llvm::Instruction *old = check->getTerminator();
  llvm::BranchInst::Create(preheader, short_runs->getLoopPreheader(), long_run, old);
  old->eraseFromParent();
  // Both copies leave to the exit, whose LCSSA phis take the copy's values too.
  auto *short_exiting = llvm::cast<llvm::BasicBlock>(map[exiting]);
  for (llvm::PHINode &phi : exit->phis()) {
    llvm::Value *value = phi.getIncomingValueForBlock(exiting);
    auto copied = map.find(value);
    phi.addIncoming(copied == map.end() ? value : static_cast<llvm::Value *>(copied->second),
                    short_exiting);
  }
  tree.changeImmediateDominator(exit, check);
  add_width_hint(loop, width);
  llvm::addStringMetadataToLoop(short_runs, kShortRuns);
  return true;
}

}  // namespace

llvm::PreservedAnalyses WidenStreamingLoops::run(llvm::Function &fn,
                                                 llvm::FunctionAnalysisManager &analyses) {
  if (!enabled || fn.isDeclaration()) return llvm::PreservedAnalyses::all();
  bool versioned = false;
  bool touched = false;  // metadata or LCSSA phis, where a loop was not versioned
  // One loop at a time, each with its analyses as they are after the one before.
  for (;;) {
    auto &loops = analyses.getResult<llvm::LoopAnalysis>(fn);
    auto &se = analyses.getResult<llvm::ScalarEvolutionAnalysis>(fn);
    auto &tree = analyses.getResult<llvm::DominatorTreeAnalysis>(fn);
    llvm::Loop *found = nullptr;
    unsigned width = 0;
    for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
      if (const std::optional<unsigned> w = streaming_width(*loop, se, before_scatter)) {
        found = loop;
        width = *w;
        break;
      }
    }
    if (!found) break;
    if (!before_scatter) {
      // The scatter pass's loops (wide_vectors.h): widened as they are.
      add_width_hint(*found, width);
      versioned = true;
    } else if (version_by_count(*found, width, loops, tree, se)) {
      versioned = true;
    } else {
      // Not versioned: LLVM's width, and not looked at again.
      llvm::addStringMetadataToLoop(found, kShortRuns);
    }
    touched = true;
    analyses.invalidate(fn, llvm::PreservedAnalyses::none());
  }
  if (!touched) return llvm::PreservedAnalyses::all();
  if (!versioned) return llvm::PreservedAnalyses::none();
  const llvm::Attribute legal = fn.getFnAttribute("min-legal-vector-width");
  unsigned at_least = 0;
  if (legal.isValid()) legal.getValueAsString().getAsInteger(10, at_least);
  if (at_least < kWideBits) fn.addFnAttr("min-legal-vector-width", std::to_string(kWideBits));
  return llvm::PreservedAnalyses::none();
}

bool wide_vectors_pay(const std::string &cpu, const std::string &features) {
  if (const char *choice = std::getenv("ENZYME_PY_WIDE_VECTORS")) {
    const std::string value(choice);
    if (value == "0") return false;
    if (value == "1") return true;
  }
  if (features.find("+avx512f") == std::string::npos) return false;
  static const char *const kCores[] = {"icelake-client", "icelake-server", "rocketlake",
                                       "tigerlake", "sapphirerapids"};
  for (const char *core : kCores)
    if (cpu == core) return true;
  return false;
}

}  // namespace enzyme_py
