#include "rewrites.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "arena.h"

namespace enzyme_py {
namespace {

bool starts_with(const char *text, size_t length, const char *prefix) {
  size_t n = std::strlen(prefix);
  return length >= n && std::memcmp(text, prefix, n) == 0;
}

// Whether `bb` is part of Enzyme's __enzyme_exponentialallocation: the
// function itself, or the block of it that Enzyme inlined (it branches to
// "__enzyme_exponentialallocation.exit").
bool grows_enzyme_cache(LLVMValueRef fn, LLVMBasicBlockRef bb) {
  static const char kGrow[] = "__enzyme_exponentialallocation";
  size_t length = 0;
  const char *name = LLVMGetValueName2(fn, &length);
  if (starts_with(name, length, kGrow)) return true;
  LLVMValueRef term = LLVMGetBasicBlockTerminator(bb);
  if (!term) return false;
  for (unsigned i = 0, n = LLVMGetNumSuccessors(term); i < n; ++i) {
    const char *next = LLVMGetBasicBlockName(LLVMGetSuccessor(term, i));
    if (next && starts_with(next, std::strlen(next), "__enzyme_exponentialallocation.exit")) {
      return true;
    }
  }
  return false;
}

}  // namespace

// On loops that cache a few values per iteration (one malloc per iteration),
// malloc and free took more time than the derivative itself. Every free is
// routed: the tape's free hands blocks it does not own to free().
void route_tape_to_arena(LLVMModuleRef mod, bool every_malloc) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  static const char kCacheAlloc[] = "enzyme_cache_alloc";
  const unsigned cache_alloc =
      LLVMGetMDKindIDInContext(ctx, kCacheAlloc, sizeof kCacheAlloc - 1);
  LLVMValueRef malloc_fn = LLVMGetNamedFunction(mod, "malloc");
  LLVMValueRef free_fn = LLVMGetNamedFunction(mod, "free");
  LLVMValueRef realloc_fn = LLVMGetNamedFunction(mod, "realloc");
  auto replacement = [mod, ctx](LLVMValueRef original, const char *name) {
    LLVMValueRef f = LLVMGetNamedFunction(mod, name);
    if (f) return f;
    f = LLVMAddFunction(mod, name, LLVMGlobalGetValueType(original));
    // What malloc's declaration tells the optimizer, and what lets it hoist
    // loads of cached pointers out of loops that write through them: a block
    // is a new object, its address is never kept, and these functions touch
    // only memory the program cannot reach (block headers, chunk lists).
    auto add = [ctx](LLVMValueRef fn, LLVMAttributeIndex at, const char *attr) {
      unsigned kind = LLVMGetEnumAttributeKindForName(attr, std::strlen(attr));
      LLVMAddAttributeAtIndex(fn, at, LLVMCreateEnumAttribute(ctx, kind, 0));
    };
    add(f, LLVMAttributeFunctionIndex, "nounwind");
    add(f, LLVMAttributeFunctionIndex, "willreturn");
    if (std::strcmp(name, kTapeAlloc) == 0) {
      add(f, LLVMAttributeReturnIndex, "noalias");
      add(f, LLVMAttributeFunctionIndex, "inaccessiblememonly");
    } else {
      add(f, 1, "nocapture");
      add(f, LLVMAttributeFunctionIndex, "inaccessiblemem_or_argmemonly");
      if (std::strcmp(name, kTapeRealloc) == 0) add(f, LLVMAttributeReturnIndex, "noalias");
    }
    return f;
  };
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    if (LLVMIsDeclaration(fn)) continue;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
      for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst;
           inst = LLVMGetNextInstruction(inst)) {
        if (!LLVMIsACallInst(inst)) continue;
        LLVMValueRef callee = LLVMGetCalledValue(inst);
        const char *to = nullptr;
        if (callee == malloc_fn && malloc_fn && (every_malloc || LLVMGetMetadata(inst, cache_alloc))) {
          to = kTapeAlloc;
        } else if (callee == free_fn && free_fn) {
          to = kTapeFree;
        } else if (callee == realloc_fn && realloc_fn && grows_enzyme_cache(fn, bb)) {
          to = kTapeRealloc;
        }
        if (to) {
          LLVMSetOperand(inst, LLVMGetNumOperands(inst) - 1, replacement(callee, to));
        }
      }
    }
  }
}

void strip_memory_attributes_of_declarations(LLVMModuleRef mod, bool runtime_too) {
  static const char *kinds[] = {"readnone", "readonly", "writeonly", "argmemonly",
                                "inaccessiblememonly",
                                "inaccessiblemem_or_argmemonly"};
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    // Intrinsics keep theirs: LLVM defines them, and without readnone Enzyme takes
    // llvm.minnum (fmin) for a call that may write memory, and aborts ("getting
    // diffe of constant value") where its result only feeds a comparison.
    if (!LLVMIsDeclaration(fn) || LLVMGetIntrinsicID(fn) != 0) continue;
    size_t length = 0;
    const char *name = LLVMGetValueName2(fn, &length);
    if (!runtime_too && llvm::StringRef(name, length).startswith("__enzyme_py_")) continue;
    for (const char *name : kinds) {
      unsigned kind = LLVMGetEnumAttributeKindForName(name, std::strlen(name));
      if (kind) LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, kind);
    }
  }
}

void prepare_for_enzyme(LLVMModuleRef mod, bool runtime_too) {
  strip_memory_attributes_of_declarations(mod, runtime_too);
  strip_scoped_noalias(mod);
  compare_without_fabs(mod);
  freeze_values_entering_loops(mod);
  freeze_phi_dividends(mod);
  freeze_running_extrema(mod);
}

int strip_scoped_noalias(LLVMModuleRef mod) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  const unsigned scope = LLVMGetMDKindIDInContext(ctx, "alias.scope", 11);
  const unsigned noalias = LLVMGetMDKindIDInContext(ctx, "noalias", 7);
  std::vector<LLVMValueRef> declarations;
  int stripped = 0;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
      for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst;
           inst = LLVMGetNextInstruction(inst)) {
        if (LLVMGetMetadata(inst, scope) || LLVMGetMetadata(inst, noalias)) {
          LLVMSetMetadata(inst, scope, nullptr);
          LLVMSetMetadata(inst, noalias, nullptr);
          ++stripped;
        }
        if (LLVMIsACallInst(inst)) {
          LLVMValueRef callee = LLVMGetCalledValue(inst);
          size_t len = 0;
          const char *name = callee ? LLVMGetValueName2(callee, &len) : nullptr;
          if (name && std::string(name, len) == "llvm.experimental.noalias.scope.decl") {
            declarations.push_back(inst);
          }
        }
      }
    }
  }
  for (LLVMValueRef call : declarations) LLVMInstructionEraseFromParent(call);
  return stripped;
}

namespace {

// The parameter `address` is based on, through GEPs and casts; -1 if none.
int based_on_param(LLVMValueRef address) {
  for (int steps = 0; address && steps < 64; ++steps) {
    if (LLVMIsAArgument(address)) {
      LLVMValueRef fn = LLVMGetParamParent(address);
      for (unsigned k = 0, n = LLVMCountParams(fn); k < n; ++k) {
        if (LLVMGetParam(fn, k) == address) return static_cast<int>(k);
      }
      return -1;
    }
    const bool through = LLVMIsAGetElementPtrInst(address) || LLVMIsABitCastInst(address) ||
                         LLVMIsAAddrSpaceCastInst(address) ||
                         (LLVMIsAConstantExpr(address) &&
                          (LLVMGetConstOpcode(address) == LLVMGetElementPtr ||
                           LLVMGetConstOpcode(address) == LLVMBitCast));
    if (!through) return -1;
    address = LLVMGetOperand(address, 0);
  }
  return -1;
}

}  // namespace

int make_adds_plain(LLVMModuleRef mod, const std::string &function,
                    const std::vector<unsigned> &params) {
  LLVMValueRef fn = LLVMGetNamedFunction(mod, function.c_str());
  if (!fn || LLVMIsDeclaration(fn)) {
    throw std::runtime_error("no function named '" + function + "' in the module");
  }
  std::vector<LLVMValueRef> atomics;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst;
         inst = LLVMGetNextInstruction(inst)) {
      if (!LLVMIsAAtomicRMWInst(inst)) continue;
      const LLVMAtomicRMWBinOp op = LLVMGetAtomicRMWBinOp(inst);
      if (op != LLVMAtomicRMWBinOpFAdd && op != LLVMAtomicRMWBinOpFSub) continue;
      const int param = based_on_param(LLVMGetOperand(inst, 0));
      for (unsigned p : params) {
        if (param == static_cast<int>(p)) atomics.push_back(inst);
      }
    }
  }
  LLVMBuilderRef b = LLVMCreateBuilderInContext(LLVMGetModuleContext(mod));
  for (LLVMValueRef atomic : atomics) {
    LLVMValueRef address = LLVMGetOperand(atomic, 0);
    LLVMValueRef value = LLVMGetOperand(atomic, 1);
    const unsigned align = LLVMGetAlignment(atomic);
    LLVMPositionBuilderBefore(b, atomic);
    LLVMValueRef old = LLVMBuildLoad2(b, LLVMTypeOf(value), address, "");
    LLVMSetAlignment(old, align);
    LLVMValueRef updated = LLVMGetAtomicRMWBinOp(atomic) == LLVMAtomicRMWBinOpFAdd
                               ? LLVMBuildFAdd(b, old, value, "")
                               : LLVMBuildFSub(b, old, value, "");
    LLVMSetAlignment(LLVMBuildStore(b, updated, address), align);
    LLVMReplaceAllUsesWith(atomic, old);  // an atomicrmw yields the value it replaced
    LLVMInstructionEraseFromParent(atomic);
  }
  LLVMDisposeBuilder(b);
  return static_cast<int>(atomics.size());
}

bool reaches_recursion(LLVMModuleRef mod, const std::string &function) {
  LLVMValueRef root = LLVMGetNamedFunction(mod, function.c_str());
  if (!root || LLVMIsDeclaration(root)) return false;
  // Depth-first over direct calls: a call to a function still on the path closes a cycle.
  enum Mark { kOnPath, kDone };
  std::map<LLVMValueRef, Mark> marks;
  std::function<bool(LLVMValueRef)> visit = [&](LLVMValueRef fn) {
    auto [at, fresh] = marks.emplace(fn, kOnPath);
    if (!fresh) return at->second == kOnPath;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
      for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst;
           inst = LLVMGetNextInstruction(inst)) {
        if (!LLVMIsACallInst(inst) && !LLVMIsAInvokeInst(inst)) continue;
        LLVMValueRef callee = LLVMGetCalledValue(inst);
        if (!callee || !LLVMIsAFunction(callee) || LLVMIsDeclaration(callee)) continue;
        if (visit(callee)) return true;
      }
    }
    marks[fn] = kDone;
    return false;
  };
  return visit(root);
}

int freeze_values_entering_loops(LLVMModuleRef mod) {
  int frozen = 0;
  for (llvm::Function &fn : *llvm::unwrap(mod)) {
    if (fn.isDeclaration()) continue;
    llvm::DominatorTree dominators(fn);
    llvm::LoopInfo loops(dominators);
    // One freeze per value: a PHI lists a predecessor once per edge, with one value.
    std::map<llvm::Instruction *, llvm::Value *> freezes;
    for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
      for (llvm::PHINode &phi : loop->getHeader()->phis()) {
        if (!phi.getType()->isFPOrFPVectorTy()) continue;
        for (unsigned k = 0, n = phi.getNumIncomingValues(); k < n; ++k) {
          auto *value = llvm::dyn_cast<llvm::Instruction>(phi.getIncomingValue(k));
          if (!value || !(llvm::isa<llvm::LoadInst>(value) || llvm::isa<llvm::PHINode>(value)) ||
              loop->contains(phi.getIncomingBlock(k))) {
            continue;
          }
          llvm::Value *&freeze = freezes[value];
          if (!freeze) {
            llvm::IRBuilder<> after(value->getParent(),
                                    value->getParent()->getFirstInsertionPt());
            if (!llvm::isa<llvm::PHINode>(value)) after.SetInsertPoint(value->getNextNode());
            freeze = after.CreateFreeze(value, value->getName() + ".entering");
            ++frozen;
          }
          phi.setIncomingValue(k, freeze);
        }
      }
    }
  }
  return frozen;
}

int freeze_phi_dividends(LLVMModuleRef mod) {
  int frozen = 0;
  for (llvm::Function &fn : *llvm::unwrap(mod)) {
    std::map<llvm::PHINode *, llvm::Value *> freezes;  // one freeze per PHI
    for (llvm::BasicBlock &block : fn) {
      for (llvm::Instruction &inst : block) {
        if (inst.getOpcode() != llvm::Instruction::FDiv) continue;
        auto *phi = llvm::dyn_cast<llvm::PHINode>(inst.getOperand(0));
        if (!phi) continue;
        llvm::Value *&freeze = freezes[phi];
        if (!freeze) {
          llvm::IRBuilder<> after(phi->getParent(), phi->getParent()->getFirstInsertionPt());
          freeze = after.CreateFreeze(phi, phi->getName() + ".dividend");
        }
        inst.setOperand(0, freeze);
        ++frozen;
      }
    }
  }
  return frozen;
}

int freeze_running_extrema(LLVMModuleRef mod) {
  int frozen = 0;
  for (llvm::Function &fn : *llvm::unwrap(mod)) {
    if (fn.isDeclaration()) continue;
    llvm::DominatorTree dominators(fn);
    llvm::LoopInfo loops(dominators);
    for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
      for (llvm::PHINode &phi : loop->getHeader()->phis()) {
        if (!phi.getType()->isFPOrFPVectorTy()) continue;
        // The selections the running value goes through (an unrolled loop chains
        // them), and whether any of them, or the PHI, has another user in the loop.
        std::vector<llvm::Value *> chain{&phi};
        std::vector<llvm::SelectInst *> reading_phi;
        bool used_in_loop = false;
        for (size_t k = 0; k < chain.size() && !used_in_loop; ++k) {
          for (llvm::User *user : chain[k]->users()) {
            auto *inst = llvm::dyn_cast<llvm::Instruction>(user);
            if (!inst || !loop->contains(inst) || user == &phi ||
                llvm::isa<llvm::CmpInst>(inst)) {
              continue;
            }
            auto *select = llvm::dyn_cast<llvm::SelectInst>(inst);
            if (!select || select->getCondition() == chain[k]) {
              used_in_loop = true;
              break;
            }
            if (std::find(chain.begin(), chain.end(), select) == chain.end()) {
              chain.push_back(select);
              if (k == 0) reading_phi.push_back(select);
            }
          }
        }
        if (!used_in_loop || reading_phi.empty()) continue;
        llvm::IRBuilder<> after(phi.getParent(), phi.getParent()->getFirstInsertionPt());
        llvm::Value *freeze = after.CreateFreeze(&phi, phi.getName() + ".selected");
        for (llvm::SelectInst *select : reading_phi) {
          for (unsigned operand : {1u, 2u}) {
            if (select->getOperand(operand) == &phi) select->setOperand(operand, freeze);
          }
          ++frozen;
        }
      }
    }
  }
  return frozen;
}

int reorder_loop_sums(LLVMModuleRef mod, const std::string &function) {
  llvm::Function *fn = llvm::unwrap(mod)->getFunction(function);
  if (!fn || fn->isDeclaration()) {
    throw std::runtime_error("no function named '" + function + "' in the module");
  }
  llvm::DominatorTree dominators(*fn);
  llvm::LoopInfo loops(dominators);
  auto used_elsewhere = [](llvm::Loop *loop, llvm::Value *value, llvm::Value *partner) {
    for (llvm::User *user : value->users()) {
      auto *inst = llvm::dyn_cast<llvm::Instruction>(user);
      if (user != partner && (!inst || loop->contains(inst))) return true;
    }
    return false;
  };
  int reordered = 0;
  for (llvm::Loop *loop : loops) {  // the outermost loops only
    llvm::BasicBlock *latch = loop->getLoopLatch();
    if (!latch) continue;
    for (llvm::PHINode &phi : loop->getHeader()->phis()) {
      if (!phi.getType()->isFloatingPointTy()) continue;
      auto *sum = llvm::dyn_cast<llvm::BinaryOperator>(phi.getIncomingValueForBlock(latch));
      if (!sum || !loop->contains(sum)) continue;
      const bool add = sum->getOpcode() == llvm::Instruction::FAdd &&
                       (sum->getOperand(0) == &phi || sum->getOperand(1) == &phi);
      const bool subtract =
          sum->getOpcode() == llvm::Instruction::FSub && sum->getOperand(0) == &phi;
      if (!add && !subtract) continue;
      if (used_elsewhere(loop, &phi, sum) || used_elsewhere(loop, sum, &phi)) continue;
      sum->setHasAllowReassoc(true);
      ++reordered;
    }
  }
  return reordered;
}

int compare_without_fabs(LLVMModuleRef mod) {
  std::vector<LLVMValueRef> calls;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    size_t len = 0;
    const char *name = LLVMGetValueName2(fn, &len);
    if (std::string(name, len).rfind("llvm.fabs.f", 0) != 0) continue;  // scalars only
    for (LLVMUseRef u = LLVMGetFirstUse(fn); u; u = LLVMGetNextUse(u)) {
      LLVMValueRef call = LLVMGetUser(u);
      if (LLVMIsACallInst(call) && LLVMGetCalledValue(call) == fn) calls.push_back(call);
    }
  }
  auto rewritable = [](LLVMValueRef call) {
    for (LLVMUseRef u = LLVMGetFirstUse(call); u; u = LLVMGetNextUse(u)) {
      LLVMValueRef cmp = LLVMGetUser(u);
      if (!LLVMIsAFCmpInst(cmp) || LLVMGetOperand(cmp, 0) == LLVMGetOperand(cmp, 1)) return false;
      switch (LLVMGetFCmpPredicate(cmp)) {
        case LLVMRealOGT: case LLVMRealOGE: case LLVMRealOLT: case LLVMRealOLE: break;
        default: return false;
      }
    }
    return LLVMGetFirstUse(call) != nullptr;
  };
  auto swapped = [](LLVMRealPredicate p) {
    switch (p) {
      case LLVMRealOGT: return LLVMRealOLT;
      case LLVMRealOGE: return LLVMRealOLE;
      case LLVMRealOLT: return LLVMRealOGT;
      default: return LLVMRealOGE;  // OLE
    }
  };
  LLVMBuilderRef b = LLVMCreateBuilderInContext(LLVMGetModuleContext(mod));
  int rewritten = 0;
  for (LLVMValueRef call : calls) {
    if (!rewritable(call)) continue;
    LLVMValueRef x = LLVMGetOperand(call, 0);
    std::vector<LLVMValueRef> compares;
    for (LLVMUseRef u = LLVMGetFirstUse(call); u; u = LLVMGetNextUse(u)) {
      compares.push_back(LLVMGetUser(u));
    }
    for (LLVMValueRef cmp : compares) {
      const bool left = LLVMGetOperand(cmp, 0) == call;
      LLVMValueRef r = LLVMGetOperand(cmp, left ? 1 : 0);
      LLVMRealPredicate p = LLVMGetFCmpPredicate(cmp);
      if (!left) p = swapped(p);  // r ? |x|  is  |x| ?' r
      LLVMPositionBuilderBefore(b, cmp);
      LLVMValueRef minus_r = LLVMBuildFNeg(b, r, "");
      LLVMValueRef joined = nullptr;
      switch (p) {
        case LLVMRealOGT:  // |x| > r: x > r or x < -r
          joined = LLVMBuildOr(b, LLVMBuildFCmp(b, LLVMRealOGT, x, r, ""),
                               LLVMBuildFCmp(b, LLVMRealOLT, x, minus_r, ""), "");
          break;
        case LLVMRealOGE:
          joined = LLVMBuildOr(b, LLVMBuildFCmp(b, LLVMRealOGE, x, r, ""),
                               LLVMBuildFCmp(b, LLVMRealOLE, x, minus_r, ""), "");
          break;
        case LLVMRealOLT:  // |x| < r: x < r and x > -r
          joined = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealOLT, x, r, ""),
                                LLVMBuildFCmp(b, LLVMRealOGT, x, minus_r, ""), "");
          break;
        default:  // OLE
          joined = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealOLE, x, r, ""),
                                LLVMBuildFCmp(b, LLVMRealOGE, x, minus_r, ""), "");
          break;
      }
      LLVMReplaceAllUsesWith(cmp, joined);
      LLVMInstructionEraseFromParent(cmp);
    }
    LLVMInstructionEraseFromParent(call);
    ++rewritten;
  }
  LLVMDisposeBuilder(b);
  return rewritten;
}

int divide_by_squares_in_steps(LLVMModuleRef mod) {
  std::vector<llvm::BinaryOperator *> found;
  for (llvm::Function &fn : *llvm::unwrap(mod)) {
    for (llvm::Instruction &inst : llvm::instructions(fn)) {
      auto *div = llvm::dyn_cast<llvm::BinaryOperator>(&inst);
      if (!div || div->getOpcode() != llvm::Instruction::FDiv) continue;
      auto *square = llvm::dyn_cast<llvm::BinaryOperator>(div->getOperand(1));
      if (!square || square->getOpcode() != llvm::Instruction::FMul ||
          square->getOperand(0) != square->getOperand(1))
        continue;
      if (!div->hasAllowReassoc() || !div->hasAllowReciprocal() ||
          !square->hasAllowReassoc())
        continue;
      found.push_back(div);
    }
  }
  for (llvm::BinaryOperator *div : found) {
    llvm::Value *y = llvm::cast<llvm::BinaryOperator>(div->getOperand(1))->getOperand(0);
    llvm::FastMathFlags flags = div->getFastMathFlags();
    flags.setAllowReassoc(false);
    flags.setAllowReciprocal(false);
    llvm::IRBuilder<> b(div);
    b.setFastMathFlags(flags);
    // One division, as before (a second one cost the n-body JVP 40%).
    llvm::Value *inverse = b.CreateFDiv(llvm::ConstantFP::get(y->getType(), 1.0), y);
    llvm::Value *once = b.CreateFMul(div->getOperand(0), inverse);
    llvm::Value *twice = b.CreateFMul(once, inverse);
    twice->takeName(div);
    div->replaceAllUsesWith(twice);
    div->eraseFromParent();
  }
  return static_cast<int>(found.size());
}

int drop_unsigned_wrap_of_negative_adds(LLVMModuleRef mod) {
  int dropped = 0;
  for (llvm::Function &fn : *llvm::unwrap(mod)) {
    for (llvm::Instruction &inst : llvm::instructions(fn)) {
      auto *add = llvm::dyn_cast<llvm::BinaryOperator>(&inst);
      if (!add || add->getOpcode() != llvm::Instruction::Add || !add->hasNoUnsignedWrap())
        continue;
      for (llvm::Value *operand : add->operands()) {
        auto *constant = llvm::dyn_cast<llvm::Constant>(operand);
        if (!constant) continue;
        auto *value = llvm::dyn_cast_or_null<llvm::ConstantInt>(
            constant->getType()->isVectorTy() ? constant->getSplatValue() : constant);
        if (value && value->isNegative()) {
          add->setHasNoUnsignedWrap(false);
          ++dropped;
          break;
        }
      }
    }
  }
  return dropped;
}

int erase_type_marks(LLVMModuleRef mod) {
  int erased = 0;
  llvm::Module &module = *llvm::unwrap(mod);
  for (const char *name : {"__enzyme_integer", "__enzyme_float", "__enzyme_double",
                           "__enzyme_pointer"}) {
    llvm::Function *mark = module.getFunction(name);
    if (!mark) continue;
    std::vector<llvm::CallBase *> calls;
    for (llvm::User *user : mark->users()) {
      if (auto *call = llvm::dyn_cast<llvm::CallBase>(user)) calls.push_back(call);
    }
    for (llvm::CallBase *call : calls) {
      if (!call->use_empty()) continue;  // returns nothing: never used
      call->eraseFromParent();
      ++erased;
    }
    if (mark->use_empty()) mark->eraseFromParent();
  }
  return erased;
}

}  // namespace enzyme_py
