#include "fused_threads.h"

#include "parfor_runner.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/ValueMapper.h>

namespace enzyme_py {
namespace {

using llvm::BasicBlock;
using llvm::Instruction;
using llvm::PHINode;
using llvm::Value;

// A fused loop as scatter_fusion.cpp writes it: one block, `w` from 0 by 1 while
// w + 1 != count, the other phis loads carried from the iteration before.
struct FusedLoop {
  BasicBlock *body = nullptr;
  BasicBlock *preheader = nullptr;
  BasicBlock *exit = nullptr;
  PHINode *w = nullptr;
  Instruction *next = nullptr;  // w + 1
  llvm::ICmpInst *done = nullptr;
  Value *count = nullptr;
  std::vector<PHINode *> carried;
  std::vector<llvm::StoreInst *> zeroes;  // kFusedZeroMark's: after the loop when threaded
};

bool is_zero(const Instruction &inst) {
  return llvm::isa<llvm::StoreInst>(inst) && inst.getMetadata(kFusedZeroMark);
}

// What an iteration may do and still run on any thread in any order (the fused loop's
// own construction proves its stores and loads apart): arithmetic, addresses, plain
// loads and stores, calls that write no memory and return.
bool may_run_anywhere(const Instruction &inst) {
  if (auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst)) return load->isSimple();
  if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) return store->isSimple();
  if (auto *call = llvm::dyn_cast<llvm::CallInst>(&inst)) {
    return call->onlyReadsMemory() && call->doesNotThrow() && call->willReturn() &&
           !llvm::isa<llvm::InlineAsm>(call->getCalledOperand());
  }
  return llvm::isa<PHINode, llvm::BinaryOperator, llvm::UnaryOperator, llvm::CastInst,
                   llvm::GetElementPtrInst, llvm::CmpInst, llvm::SelectInst, llvm::FreezeInst,
                   llvm::BranchInst>(inst);
}

std::optional<FusedLoop> fused_loop(llvm::BranchInst *latch) {
  FusedLoop l;
  l.body = latch->getParent();
  if (!latch->isConditional() || latch->getSuccessor(1) != l.body) return std::nullopt;
  l.exit = latch->getSuccessor(0);
  if (l.exit == l.body || !l.exit->phis().empty()) return std::nullopt;
  for (BasicBlock *pred : llvm::predecessors(l.body)) {
    if (pred == l.body) continue;
    if (l.preheader) return std::nullopt;
    l.preheader = pred;
  }
  if (!l.preheader || l.preheader->getTerminator()->getNumSuccessors() != 1) return std::nullopt;
  l.done = llvm::dyn_cast<llvm::ICmpInst>(latch->getCondition());
  if (!l.done || l.done->getPredicate() != llvm::ICmpInst::ICMP_EQ || !l.done->hasOneUse())
    return std::nullopt;
  l.next = llvm::dyn_cast<Instruction>(l.done->getOperand(0));
  l.count = l.done->getOperand(1);
  auto *count_inst = llvm::dyn_cast<Instruction>(l.count);
  if (!l.next || l.next->getParent() != l.body || (count_inst && count_inst->getParent() == l.body))
    return std::nullopt;
  l.w = llvm::dyn_cast<PHINode>(l.next->getOperand(0));
  auto *one = llvm::dyn_cast<llvm::ConstantInt>(l.next->getOperand(1));
  if (l.next->getOpcode() != Instruction::Add || !l.w || l.w->getParent() != l.body || !one ||
      !one->isOne() || !l.w->getType()->isIntegerTy(64))
    return std::nullopt;
  auto *zero = llvm::dyn_cast<llvm::ConstantInt>(l.w->getIncomingValueForBlock(l.preheader));
  if (!zero || !zero->isZero() || l.w->getIncomingValueForBlock(l.body) != l.next)
    return std::nullopt;
  for (PHINode &phi : l.body->phis()) {
    if (&phi == l.w) continue;
    auto *source = llvm::dyn_cast<Instruction>(phi.getIncomingValueForBlock(l.body));
    if (!source || source->getParent() != l.body) return std::nullopt;
    l.carried.push_back(&phi);
  }
  for (Instruction &inst : *l.body) {
    if (!may_run_anywhere(inst)) return std::nullopt;
    if (is_zero(inst)) l.zeroes.push_back(llvm::cast<llvm::StoreInst>(&inst));
    for (llvm::User *user : inst.users()) {
      if (llvm::cast<Instruction>(user)->getParent() != l.body) return std::nullopt;
    }
  }
  return l;
}

// The instructions of the body that `value` is computed from, in the body's order;
// false where that reaches a phi other than w (a value carried from the iteration
// before cannot be computed at another iteration).
bool slice_of(const FusedLoop &l, Value *value, std::vector<Instruction *> &slice) {
  std::set<Instruction *> seen;
  std::vector<Instruction *> work;
  auto visit = [&](Value *v) {
    auto *inst = llvm::dyn_cast<Instruction>(v);
    if (inst && inst->getParent() == l.body && inst != l.w && seen.insert(inst).second)
      work.push_back(inst);
  };
  visit(value);
  while (!work.empty()) {
    Instruction *inst = work.back();
    work.pop_back();
    if (llvm::isa<PHINode>(inst)) return false;
    for (Value *op : inst->operands()) visit(op);
  }
  for (Instruction &inst : *l.body) {
    if (seen.count(&inst)) slice.push_back(&inst);
  }
  return true;
}

// What an i64 slot carries: pointers, integers up to 64 bits, doubles and floats.
bool fits_a_slot(const llvm::Type *type) {
  return type->isPointerTy() || type->isDoubleTy() || type->isFloatTy() ||
         (type->isIntegerTy() && type->getIntegerBitWidth() <= 64);
}

// A captured value (fits_a_slot) in an i64 slot, and back.
Value *to_slot(llvm::IRBuilder<> &b, Value *v) {
  llvm::Type *type = v->getType();
  llvm::Type *i64 = b.getInt64Ty();
  if (type->isPointerTy()) return b.CreatePtrToInt(v, i64);
  if (type->isIntegerTy()) return b.CreateZExt(v, i64);
  if (type->isDoubleTy()) return b.CreateBitCast(v, i64);
  return b.CreateZExt(b.CreateBitCast(v, b.getInt32Ty()), i64);
}

Value *from_slot(llvm::IRBuilder<> &b, Value *slot, llvm::Type *type) {
  if (type->isPointerTy()) return b.CreateIntToPtr(slot, type);
  if (type->isIntegerTy()) return b.CreateTrunc(slot, type);
  if (type->isDoubleTy()) return b.CreateBitCast(slot, type);
  return b.CreateBitCast(b.CreateTrunc(slot, b.getInt32Ty()), type);
}

// Clones `insts` at `b`, operands mapped through `map` (which then maps each to its
// copy).
void clone_into(llvm::IRBuilder<> &b, const std::vector<Instruction *> &insts,
                llvm::ValueToValueMapTy &map) {
  std::vector<Instruction *> copies;
  for (Instruction *inst : insts) {
    Instruction *copy = inst->clone();
    b.Insert(copy, inst->getName());
    map[inst] = copy;
    copies.push_back(copy);
  }
  for (Instruction *copy : copies) {
    llvm::RemapInstruction(copy, map,
                           llvm::RF_NoModuleLevelChanges | llvm::RF_IgnoreMissingLocals);
  }
}

// The loop's iterations [first, last] as a function `i32 (i64* slots, i64 first,
// i64 last, i8** exception)` (parfor_runner.h's ParforChunk), the captured values
// read from the slots in `captures`' order. Returns 0.
llvm::Function *chunk_function(const FusedLoop &l, const std::vector<Value *> &captures,
                               const std::vector<std::vector<Instruction *>> &sources) {
  llvm::Function &fn = *l.body->getParent();
  llvm::LLVMContext &context = fn.getContext();
  llvm::Type *i64 = llvm::Type::getInt64Ty(context);
  auto *type = llvm::FunctionType::get(
      llvm::Type::getInt32Ty(context),
      {i64->getPointerTo(), i64, i64, llvm::Type::getInt8PtrTy(context)->getPointerTo()},
      false);
  llvm::Function *chunk = llvm::Function::Create(type, llvm::GlobalValue::InternalLinkage,
                                                 fn.getName() + ".fused", fn.getParent());
  for (const llvm::Attribute &attribute : fn.getAttributes().getFnAttrs()) {
    if (attribute.isStringAttribute() || attribute.getKindAsEnum() != llvm::Attribute::NoInline)
      chunk->addFnAttr(attribute);
  }
  chunk->addFnAttr(llvm::Attribute::NoUnwind);
  BasicBlock *entry = BasicBlock::Create(context, "entry", chunk);
  BasicBlock *loop = BasicBlock::Create(context, l.body->getName(), chunk);
  BasicBlock *done = BasicBlock::Create(context, "done", chunk);
  llvm::IRBuilder<> b(entry);
  llvm::Value *slots = chunk->getArg(0), *first = chunk->getArg(1), *last = chunk->getArg(2);
  llvm::ValueToValueMapTy map;
  for (size_t k = 0; k < captures.size(); ++k) {
    Value *slot = b.CreateLoad(i64, b.CreateConstInBoundsGEP1_64(i64, slots, k));
    map[captures[k]] = from_slot(b, slot, captures[k]->getType());
  }
  // Each carried load at iteration `first`: its source computed at first - 1.
  std::vector<Value *> initial;
  Value *before = b.CreateSub(first, b.getInt64(1));
  for (size_t q = 0; q < l.carried.size(); ++q) {
    llvm::ValueToValueMapTy at_before;
    for (const auto &[from, to] : map) at_before[from] = to;
    at_before[l.w] = before;
    clone_into(b, sources[q], at_before);
    initial.push_back(at_before[l.carried[q]->getIncomingValueForBlock(l.body)]);
  }
  Value *end = b.CreateAdd(last, b.getInt64(1));
  b.CreateBr(loop);

  b.SetInsertPoint(loop);
  PHINode *w = b.CreatePHI(i64, 2, "w");
  map[l.w] = w;
  std::vector<PHINode *> carried;
  for (PHINode *phi : l.carried) {
    carried.push_back(b.CreatePHI(phi->getType(), 2, phi->getName()));
    map[phi] = carried.back();
  }
  std::vector<Instruction *> body;
  for (Instruction &inst : *l.body) {
    if (!llvm::isa<PHINode>(inst) && &inst != l.done && !inst.isTerminator() && !is_zero(inst))
      body.push_back(&inst);
  }
  clone_into(b, body, map);
  w->addIncoming(first, entry);
  w->addIncoming(map[l.next], loop);
  for (size_t q = 0; q < carried.size(); ++q) {
    carried[q]->addIncoming(initial[q], entry);
    carried[q]->addIncoming(map[l.carried[q]->getIncomingValueForBlock(l.body)], loop);
  }
  b.CreateCondBr(b.CreateICmpEQ(map[l.next], end), done, loop);
  b.SetInsertPoint(done);
  b.CreateRet(b.getInt32(0));
  return chunk;
}

// What set_fused_workers put in `module`, else 0.
int64_t workers_of(const llvm::Module &module) {
  llvm::NamedMDNode *limit = module.getNamedMetadata(kFusedWorkers);
  if (!limit || limit->getNumOperands() != 1 || limit->getOperand(0)->getNumOperands() != 1)
    return 0;
  auto *n = llvm::mdconst::dyn_extract<llvm::ConstantInt>(limit->getOperand(0)->getOperand(0));
  return n ? n->getSExtValue() : 0;
}

// Where the loop has two shares of kFusedGrain iterations or more, a call of kFusedRun
// with its own function instead; false where it does not fit (left as it is).
bool thread_loop(const FusedLoop &l) {
  std::vector<std::vector<Instruction *>> sources;
  for (PHINode *phi : l.carried) {
    sources.emplace_back();
    if (!slice_of(l, phi->getIncomingValueForBlock(l.body), sources.back())) return false;
  }
  // The zeros' stores, each with what its address needs (from w alone).
  std::vector<Instruction *> zeroing;
  for (llvm::StoreInst *store : l.zeroes) {
    if (llvm::isa<Instruction>(store->getValueOperand()) &&
        llvm::cast<Instruction>(store->getValueOperand())->getParent() == l.body)
      return false;
    if (!slice_of(l, store->getPointerOperand(), zeroing)) return false;
    zeroing.push_back(store);
  }
  // What the body reads from outside it, in a fixed order.
  std::vector<Value *> captures;
  std::set<Value *> captured;
  for (Instruction &inst : *l.body) {
    if (&inst == l.done || inst.isTerminator()) continue;
    // A phi's first value is not read: the chunk computes its own.
    if (llvm::isa<PHINode>(inst)) continue;
    for (Value *op : inst.operands()) {
      auto *def = llvm::dyn_cast<Instruction>(op);
      const bool outside = (def && def->getParent() != l.body) || llvm::isa<llvm::Argument>(op);
      if (outside && captured.insert(op).second) captures.push_back(op);
    }
  }
  if (!std::all_of(captures.begin(), captures.end(),
                   [](Value *v) { return fits_a_slot(v->getType()); }))
    return false;
  llvm::Function &fn = *l.body->getParent();
  llvm::Module &module = *fn.getParent();
  llvm::LLVMContext &context = fn.getContext();
  llvm::Function *chunk = chunk_function(l, captures, sources);

  llvm::IRBuilder<> at_entry(&*fn.getEntryBlock().getFirstInsertionPt());
  llvm::Type *i64 = at_entry.getInt64Ty();
  llvm::AllocaInst *slots = at_entry.CreateAlloca(
      i64, at_entry.getInt64(std::max<size_t>(1, captures.size())), "fused.slots");
  // Loops shorter than the runtime's threshold run as they are, in place.
  BasicBlock *threaded =
      BasicBlock::Create(context, l.body->getName() + ".threaded", &fn, l.exit);
  l.preheader->getTerminator()->eraseFromParent();
  llvm::IRBuilder<> b(l.preheader);
  b.CreateCondBr(b.CreateICmpSGE(l.count, b.getInt64(2 * kFusedGrain)), threaded, l.body);
  b.SetInsertPoint(threaded);
  for (size_t k = 0; k < captures.size(); ++k) {
    b.CreateStore(to_slot(b, captures[k]), b.CreateConstInBoundsGEP1_64(i64, slots, k));
  }
  Value *workers = b.getInt64(workers_of(module));
  llvm::Type *i8p = llvm::Type::getInt8PtrTy(context);
  llvm::FunctionCallee run = module.getOrInsertFunction(
      kFusedRun, llvm::FunctionType::get(llvm::Type::getVoidTy(context),
                                         {i8p, i64->getPointerTo(), i64, i64}, false));
  b.CreateCall(run, {b.CreateBitCast(chunk, i8p), slots, l.count, workers});
  if (l.zeroes.empty()) {
    b.CreateBr(l.exit);
  } else {
    // The zeros, once every thread has read what they zero: a loop of their own.
    BasicBlock *zeroes = BasicBlock::Create(context, l.body->getName() + ".zeroes", &fn, l.exit);
    b.CreateBr(zeroes);
    b.SetInsertPoint(zeroes);
    PHINode *w = b.CreatePHI(i64, 2, "w");
    w->addIncoming(b.getInt64(0), threaded);
    llvm::ValueToValueMapTy map;
    map[l.w] = w;
    std::set<Instruction *> copied;  // slices may share instructions
    std::vector<Instruction *> once;
    for (Instruction *inst : zeroing)
      if (copied.insert(inst).second) once.push_back(inst);
    std::sort(once.begin(), once.end(),
              [](Instruction *x, Instruction *y) { return x->comesBefore(y); });
    clone_into(b, once, map);
    for (Instruction *inst : once)
      llvm::cast<Instruction>(map[inst])->setMetadata(kFusedZeroMark, nullptr);
    Value *next = b.CreateAdd(w, b.getInt64(1));
    w->addIncoming(next, zeroes);
    b.CreateCondBr(b.CreateICmpEQ(next, l.count), l.exit, zeroes);
  }
  // Done: a later run of the pass leaves the loop in place alone.
  l.body->getTerminator()->setMetadata(kFusedLoopMark, nullptr);
  return true;
}

}  // namespace

void set_fused_workers(LLVMModuleRef mod, int64_t workers) {
  llvm::Module &module = *llvm::unwrap(mod);
  llvm::LLVMContext &context = module.getContext();
  llvm::NamedMDNode *limit = module.getOrInsertNamedMetadata(kFusedWorkers);
  limit->clearOperands();
  limit->addOperand(llvm::MDNode::get(
      context, {llvm::ConstantAsMetadata::get(
                   llvm::ConstantInt::get(llvm::Type::getInt64Ty(context), workers))}));
}

llvm::PreservedAnalyses ThreadFusedLoops::run(llvm::Function &fn,
                                              llvm::FunctionAnalysisManager &) {
  if (workers_of(*fn.getParent()) == 1) return llvm::PreservedAnalyses::all();
  const unsigned mark = fn.getContext().getMDKindID(kFusedLoopMark);
  std::vector<FusedLoop> loops;
  for (BasicBlock &block : fn) {
    auto *latch = llvm::dyn_cast<llvm::BranchInst>(block.getTerminator());
    if (!latch || !latch->getMetadata(mark)) continue;
    if (auto loop = fused_loop(latch)) loops.push_back(*loop);
  }
  bool changed = false;
  for (const FusedLoop &l : loops) changed |= thread_loop(l);
  return changed ? llvm::PreservedAnalyses::none() : llvm::PreservedAnalyses::all();
}

}  // namespace enzyme_py
