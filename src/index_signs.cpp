#include "index_signs.h"

#include <map>
#include <memory>
#include <set>
#include <vector>

#include <llvm/Analysis/AssumptionCache.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/PatternMatch.h>

namespace enzyme_py {
namespace {

using llvm::BasicBlock;
using llvm::Instruction;
using llvm::PHINode;
using llvm::Value;
namespace pm = llvm::PatternMatch;

// The value `inst` assumes non-negative (`assume(x >= 0)`, or `x > -1` as instcombine
// spells it), or null.
Value *assumed_non_negative(Instruction &inst) {
  auto *assume = llvm::dyn_cast<llvm::AssumeInst>(&inst);
  llvm::ICmpInst::Predicate predicate;
  Value *x = nullptr;
  if (!assume) return nullptr;
  if (pm::match(assume->getArgOperand(0), pm::m_ICmp(predicate, pm::m_Value(x), pm::m_Zero())) &&
      predicate == llvm::ICmpInst::ICMP_SGE)
    return x;
  if (pm::match(assume->getArgOperand(0),
                pm::m_ICmp(predicate, pm::m_Value(x), pm::m_AllOnes())) &&
      predicate == llvm::ICmpInst::ICMP_SGT)
    return x;
  return nullptr;
}

// `assume(x >= 0)` at `b`: what assumed_non_negative reads back.
void assume_non_negative(llvm::IRBuilder<> &b, Value *x) {
  b.CreateAssumption(b.CreateICmpSGE(x, llvm::ConstantInt::get(x->getType(), 0)));
}

// Proves integer values non-negative (see index_signs.h).
class SignProver {
 public:
  SignProver(llvm::Function &fn, llvm::DominatorTree &dt, llvm::LoopInfo &loops,
             llvm::AssumptionCache &assumptions)
      : fn_(fn), dt_(dt), loops_(loops), assumptions_(assumptions) {}

  bool non_negative(Value *v) {
    if (auto found = known_.find(v); found != known_.end()) return found->second;
    // Every value the rules for v reach, then the largest subset whose rules hold
    // when the subset's members are taken as non-negative.
    std::vector<Instruction *> closure;
    std::set<Value *> seen{v};
    std::vector<Value *> work{v};
    while (!work.empty()) {
      Value *u = work.back();
      work.pop_back();
      auto *inst = llvm::dyn_cast<Instruction>(u);
      if (known_.count(u) || !inst || !ruled(inst)) continue;
      closure.push_back(inst);
      std::vector<Value *> next(inst->op_begin(), inst->op_end());
      if (auto *phi = llvm::dyn_cast<PHINode>(inst))
        if (Counter c = counter(phi); c.end) next.push_back(c.end);
      for (Value *operand : next)
        if (operand->getType()->isIntegerTy() && seen.insert(operand).second)
          work.push_back(operand);
    }
    std::set<Instruction *> holding(closure.begin(), closure.end());
    auto ok = [&](Value *u) {
      auto *inst = llvm::dyn_cast<Instruction>(u);
      if (inst && holding.count(inst)) return true;
      if (auto found = known_.find(u); found != known_.end()) return found->second;
      if (inst && ruled(inst)) return false;  // in the closure and dropped
      return known_[u] = leaf(u);
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (Instruction *inst : closure) {
        if (holding.count(inst) && !rule(inst, ok)) {
          holding.erase(inst);
          changed = true;
        }
      }
    }
    for (Instruction *inst : closure) known_[inst] = holding.count(inst) > 0;
    if (auto found = known_.find(v); found != known_.end()) return found->second;
    return known_[v] = leaf(v);
  }

 private:
  // A loop counter P = phi [S, P + 1] that leaves its loop where P + 1 == E.
  struct Counter {
    Value *start = nullptr;
    Value *end = nullptr;
  };

  // Instructions with a rule of their own (the rest are leaves).
  static bool ruled(Instruction *inst) {
    if (!inst->getType()->isIntegerTy()) return false;
    if (auto *call = llvm::dyn_cast<llvm::IntrinsicInst>(inst)) {
      switch (call->getIntrinsicID()) {
        case llvm::Intrinsic::smax:
        case llvm::Intrinsic::smin:
        case llvm::Intrinsic::umax:
        case llvm::Intrinsic::umin:
          return true;
        default:
          return false;
      }
    }
    switch (inst->getOpcode()) {
      case Instruction::Add:
      case Instruction::Mul:
      case Instruction::UDiv:
      case Instruction::URem:
      case Instruction::SDiv:
      case Instruction::SRem:
      case Instruction::And:
      case Instruction::Or:
      case Instruction::LShr:
      case Instruction::AShr:
      case Instruction::ZExt:
      case Instruction::SExt:
      case Instruction::Select:
      case Instruction::PHI:
        return true;
      default:
        return false;
    }
  }

  // Whether inst is non-negative given what `ok` says of the values it reads.
  template <typename Ok>
  bool rule(Instruction *inst, Ok &ok) {
    auto operand = [&](unsigned k) { return inst->getOperand(k); };
    if (auto *call = llvm::dyn_cast<llvm::IntrinsicInst>(inst)) {
      const bool a = ok(operand(0)), b = ok(operand(1));
      const auto id = call->getIntrinsicID();
      return id == llvm::Intrinsic::smax || id == llvm::Intrinsic::umin ? a || b : a && b;
    }
    switch (inst->getOpcode()) {
      case Instruction::Add:
      case Instruction::Mul:
        // An overflow is poison: the fold may assume it does not happen.
        return inst->hasNoSignedWrap() && ok(operand(0)) && ok(operand(1));
      case Instruction::SDiv:
      case Instruction::Or:
        return ok(operand(0)) && ok(operand(1));
      case Instruction::UDiv:
      case Instruction::SRem:
      case Instruction::AShr:
      case Instruction::SExt:
        return ok(operand(0));
      case Instruction::URem:
      case Instruction::And:
        return ok(operand(0)) || ok(operand(1));
      case Instruction::LShr:
        return ok(operand(0)) || (llvm::isa<llvm::ConstantInt>(operand(1)) &&
                                  !llvm::cast<llvm::ConstantInt>(operand(1))->isZero());
      case Instruction::ZExt:
        return true;
      case Instruction::Select:
        return ok(operand(1)) && ok(operand(2));
      case Instruction::PHI: {
        auto *phi = llvm::cast<PHINode>(inst);
        bool all = true;
        for (Value *in : phi->incoming_values()) all = all && ok(in);
        if (all) return true;
        const Counter c = counter(phi);
        return c.end && ok(c.start) && ok(c.end);
      }
      default:
        return false;
    }
  }

  // Constants, arguments the function asserts, and what ValueTracking knows of an
  // instruction's value where it is computed (llvm.assume among others).
  bool leaf(Value *v) {
    if (auto *constant = llvm::dyn_cast<llvm::ConstantInt>(v)) return !constant->isNegative();
    if (auto *argument = llvm::dyn_cast<llvm::Argument>(v)) return asserted(argument);
    if (auto *inst = llvm::dyn_cast<Instruction>(v))
      return llvm::isKnownNonNegative(v, fn_.getParent()->getDataLayout(), 0, &assumptions_,
                                      inst, &dt_);
    return false;
  }

  // Whether every run of the function meets an `assume(argument >= 0)`: one in the
  // entry block with nothing before it that may leave the block (a run that meets
  // it with a negative argument is undefined as a whole, so the fact holds
  // everywhere in the function, before the assume too).
  bool asserted(llvm::Argument *argument) const {
    for (Instruction &inst : fn_.getEntryBlock()) {
      if (assumed_non_negative(inst) == argument) return true;
      if (!llvm::isGuaranteedToTransferExecutionToSuccessor(&inst)) return false;
    }
    return false;
  }

  Counter counter(PHINode *phi) {
    llvm::Loop *loop = loops_.getLoopFor(phi->getParent());
    if (!loop || loop->getHeader() != phi->getParent() || phi->getNumIncomingValues() != 2)
      return {};
    BasicBlock *preheader = loop->getLoopPreheader();
    BasicBlock *latch = loop->getLoopLatch();
    if (!preheader || !latch) return {};
    Value *start = phi->getIncomingValueForBlock(preheader);
    Value *next = phi->getIncomingValueForBlock(latch);
    if (!pm::match(next, pm::m_c_Add(pm::m_Specific(phi), pm::m_One()))) return {};
    // The latch leaves the loop exactly where next == end.
    auto *branch = llvm::dyn_cast<llvm::BranchInst>(latch->getTerminator());
    if (!branch || !branch->isConditional()) return {};
    llvm::ICmpInst::Predicate predicate;
    Value *end = nullptr;
    if (!pm::match(branch->getCondition(),
                   pm::m_c_ICmp(predicate, pm::m_Specific(next), pm::m_Value(end))))
      return {};
    const bool leaves_on_true = !loop->contains(branch->getSuccessor(0));
    const bool leaves_on_false = !loop->contains(branch->getSuccessor(1));
    const bool exact =
        (predicate == llvm::ICmpInst::ICMP_EQ && leaves_on_true && !leaves_on_false) ||
        (predicate == llvm::ICmpInst::ICMP_NE && !leaves_on_true && leaves_on_false);
    if (!exact || !loop->isLoopInvariant(end) || !entered_below(preheader, start, end)) return {};
    return {start, end};
  }

  // Whether every entry to `preheader` passes a branch edge on which start < end (as
  // `start < end` or `end - start >= 1`, signed; with both non-negative, end - start
  // cannot overflow).
  static bool entered_below(BasicBlock *preheader, Value *start, Value *end) {
    BasicBlock *block = preheader;
    for (int steps = 0; steps < 4; ++steps) {
      BasicBlock *before = block->getSinglePredecessor();
      if (!before) return false;
      auto *branch = llvm::dyn_cast<llvm::BranchInst>(before->getTerminator());
      if (branch && branch->isConditional() &&
          branch->getSuccessor(0) != branch->getSuccessor(1)) {
        auto *compare = llvm::dyn_cast<llvm::ICmpInst>(branch->getCondition());
        if (!compare) return false;
        const bool taken = branch->getSuccessor(0) == block;
        const auto predicate =
            taken ? compare->getPredicate() : compare->getInversePredicate();
        return implies_below(predicate, compare->getOperand(0), compare->getOperand(1), start,
                             end);
      }
      block = before;
    }
    return false;
  }

  // Whether `lhs predicate rhs` holding means start < end. Unsigned compares count
  // too: a counter's rule asks start and end to be non-negative, and between
  // non-negative values the two orders agree (instcombine makes `start < end`
  // unsigned once it knows both are, from an assume).
  static bool implies_below(llvm::ICmpInst::Predicate predicate, Value *lhs, Value *rhs,
                            Value *start, Value *end) {
    using P = llvm::ICmpInst;
    const bool less = predicate == P::ICMP_SLT || predicate == P::ICMP_ULT;
    const bool greater = predicate == P::ICMP_SGT || predicate == P::ICMP_UGT;
    if ((less && lhs == start && rhs == end) || (greater && lhs == end && rhs == start))
      return true;
    // end - start > 0, or >= 1.
    if (!pm::match(lhs, pm::m_Sub(pm::m_Specific(end), pm::m_Specific(start)))) return false;
    return (predicate == P::ICMP_SGT && pm::match(rhs, pm::m_Zero())) ||
           (predicate == P::ICMP_SGE && pm::match(rhs, pm::m_One()));
  }

  llvm::Function &fn_;
  llvm::DominatorTree &dt_;
  llvm::LoopInfo &loops_;
  llvm::AssumptionCache &assumptions_;
  std::map<Value *, bool> known_;
};

// The sign test `compare` makes of a value, as (that value, the result the test gives
// where it is non-negative), or null.
std::pair<Value *, bool> sign_test(llvm::ICmpInst *compare) {
  using P = llvm::ICmpInst;
  Value *x = compare->getOperand(0);
  if (!x->getType()->isIntegerTy()) return {nullptr, false};
  switch (compare->getPredicate()) {
    case P::ICMP_SLT:  // x < 0
      if (pm::match(compare->getOperand(1), pm::m_Zero())) return {x, false};
      break;
    case P::ICMP_SLE:  // x <= -1
      if (pm::match(compare->getOperand(1), pm::m_AllOnes())) return {x, false};
      break;
    case P::ICMP_SGT:  // x > -1
      if (pm::match(compare->getOperand(1), pm::m_AllOnes())) return {x, true};
      break;
    case P::ICMP_SGE:  // x >= 0
      if (pm::match(compare->getOperand(1), pm::m_Zero())) return {x, true};
      break;
    default:
      break;
  }
  return {nullptr, false};
}

// The parameter of `stand_in` that receives argument `a` of the call it stands for:
// the call's arguments in order, or (twice as many parameters) each followed by its
// shadow, as Enzyme passes them to a rule. Null for any other shape.
llvm::Argument *passed_on(llvm::Function &stand_in, llvm::Function &callee, unsigned a) {
  const size_t given = stand_in.arg_size(), taken = callee.arg_size();
  if (given == taken) return stand_in.getArg(a);
  if (given == 2 * taken) return stand_in.getArg(2 * a);
  return nullptr;
}

}  // namespace

void assume_signs_in_callees(llvm::Module &mod) {
  for (llvm::Function &caller : mod) {
    if (caller.isDeclaration()) continue;
    // The assumes of the entry block, and where they are: a call after them in that
    // block, or in any other block, runs only once they have held.
    std::map<Value *, Instruction *> non_negative;
    for (Instruction &inst : caller.getEntryBlock())
      if (Value *x = assumed_non_negative(inst)) non_negative.emplace(x, &inst);
    if (non_negative.empty()) continue;
    for (BasicBlock &block : caller) {
      for (Instruction &inst : block) {
        auto *call = llvm::dyn_cast<llvm::CallInst>(&inst);
        llvm::Function *callee = call ? call->getCalledFunction() : nullptr;
        if (!callee || callee->isDeclaration() || !callee->hasOneUse() || callee == &caller)
          continue;
        llvm::IRBuilder<> b(&*callee->getEntryBlock().getFirstInsertionPt());
        for (unsigned k = 0; k < call->arg_size() && k < callee->arg_size(); ++k) {
          llvm::Argument *param = callee->getArg(k);
          auto found = non_negative.find(call->getArgOperand(k));
          if (found == non_negative.end() || !param->getType()->isIntegerTy()) continue;
          if (call->getParent() == found->second->getParent() &&
              !found->second->comesBefore(call))
            continue;
          assume_non_negative(b, param);
        }
      }
    }
  }
}

int assume_signs_of_calls(llvm::Module &mod, const std::string &callee_name,
                          const std::string &function_name,
                          const std::vector<std::pair<unsigned, unsigned>> &pairs,
                          const std::vector<std::string> &stand_ins) {
  std::set<llvm::Function *> standing;
  for (const std::string &name : stand_ins)
    if (llvm::Function *fn = mod.getFunction(name)) standing.insert(fn);
  llvm::Function *callee = mod.getFunction(callee_name);
  llvm::Function *function = mod.getFunction(function_name);
  if (!callee || !function || function->isDeclaration() || callee->use_empty()) return 0;
  // The prover of each caller, with the analyses it reads.
  struct Caller {
    explicit Caller(llvm::Function &fn)
        : dt(fn), loops(dt), assumptions(fn), prover(fn, dt, loops, assumptions) {}
    llvm::DominatorTree dt;
    llvm::LoopInfo loops;
    llvm::AssumptionCache assumptions;
    SignProver prover;
  };
  std::map<llvm::Function *, std::unique_ptr<Caller>> callers;
  std::vector<bool> holds(pairs.size(), true);
  for (llvm::User *user : callee->users()) {
    auto *call = llvm::dyn_cast<llvm::CallInst>(user);
    if (!call || call->getCalledOperand() != callee) return 0;  // callers unknown
    llvm::Function *from = call->getFunction();
    const bool stands_in = standing.count(from) > 0;
    std::unique_ptr<Caller> &caller = callers[from];
    if (!caller && !stands_in) caller = std::make_unique<Caller>(*from);
    for (size_t k = 0; k < pairs.size(); ++k) {
      const unsigned a = pairs[k].first;
      if (!holds[k]) continue;
      Value *arg = a < call->arg_size() ? call->getArgOperand(a) : nullptr;
      holds[k] = arg && arg->getType()->isIntegerTy() &&
                 (stands_in ? arg == passed_on(*from, *callee, a) : caller->prover.non_negative(arg));
    }
  }
  llvm::IRBuilder<> b(&*function->getEntryBlock().getFirstInsertionPt());
  int added = 0;
  for (size_t k = 0; k < pairs.size(); ++k) {
    if (!holds[k] || pairs[k].second >= function->arg_size()) continue;
    llvm::Argument *param = function->getArg(pairs[k].second);
    if (!param->getType()->isIntegerTy()) continue;
    assume_non_negative(b, param);
    ++added;
  }
  return added;
}

llvm::PreservedAnalyses FoldIndexSigns::run(llvm::Function &fn,
                                            llvm::FunctionAnalysisManager &analyses) {
  SignProver prover(fn, analyses.getResult<llvm::DominatorTreeAnalysis>(fn),
                    analyses.getResult<llvm::LoopAnalysis>(fn),
                    analyses.getResult<llvm::AssumptionAnalysis>(fn));
  std::vector<std::pair<llvm::ICmpInst *, bool>> folds;
  for (BasicBlock &block : fn) {
    for (Instruction &inst : block) {
      auto *compare = llvm::dyn_cast<llvm::ICmpInst>(&inst);
      // The test an assume states is the fact itself: folded, later passes lose it.
      if (!compare || llvm::any_of(compare->users(), [](llvm::User *user) {
            return llvm::isa<llvm::AssumeInst>(user);
          }))
        continue;
      auto [x, result] = sign_test(compare);
      if (x && prover.non_negative(x)) folds.emplace_back(compare, result);
    }
  }
  for (auto [compare, result] : folds) {
    compare->replaceAllUsesWith(llvm::ConstantInt::getBool(compare->getType(), result));
    compare->eraseFromParent();
  }
  if (folds.empty()) return llvm::PreservedAnalyses::all();
  llvm::PreservedAnalyses kept;
  kept.preserveSet<llvm::CFGAnalyses>();
  return kept;
}

}  // namespace enzyme_py
