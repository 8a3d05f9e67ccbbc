#include "tape_scopes.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalValue.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Operator.h>

#include "arena.h"
#include "numba_rewrites.h"

namespace enzyme_py {
namespace {

using llvm::Instruction;
using llvm::Value;

// Enzyme's mark of a cache's loads and stores, one group per cache.
constexpr unsigned kGroup = llvm::LLVMContext::MD_invariant_group;

// What the values a pointer is made of are: bits of a set.
enum Roots : unsigned {
  kNone = 0,
  kTape = 1,     // a tape allocation (an Enzyme cache)
  kOutside = 2,  // memory that is not the tape's
  kUnknown = 4,  // anything else: a pointer loaded from memory, a call's result...
};

bool body_writes(const llvm::Function &fn, int depth);

// Whether `call` may write memory (intrinsics that only mark or assume, the tape's and
// Numba's allocators, and functions whose bodies write nothing do not; memset writes
// bytes, never a pointer to the tape).
bool may_write(const llvm::CallBase &call, int depth = 0) {
  if (!call.mayWriteToMemory()) return false;
  const llvm::Function *callee = call.getCalledFunction();
  if (!callee) return true;
  const std::string name = callee->getName().str();
  if (name == kTapeAlloc || name == kTapeRealloc || name == kTapeFree) return false;
  if (is_numba_allocator(name)) return false;
  if (callee->isIntrinsic()) {
    switch (callee->getIntrinsicID()) {
      case llvm::Intrinsic::assume:
      case llvm::Intrinsic::lifetime_start:
      case llvm::Intrinsic::lifetime_end:
      case llvm::Intrinsic::experimental_noalias_scope_decl:
      case llvm::Intrinsic::memset:
        return false;
      default:
        return true;
    }
  }
  // Enzyme's derivatives of Numba's emptied reference counting: empty bodies.
  return callee->isDeclaration() || body_writes(*callee, depth + 1);
}

bool body_writes(const llvm::Function &fn, int depth) {
  if (depth > 3 || fn.isDeclaration()) return true;
  for (const llvm::BasicBlock &block : fn) {
    for (const Instruction &inst : block) {
      if (const auto *call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
        if (may_write(*call, depth)) return true;
      } else if (inst.mayWriteToMemory()) {
        return true;
      }
    }
  }
  return false;
}

// The roots of the pointers the derivative makes and reads. Memory is told apart by
// the roots of its address: the tape's (Enzyme's caches, read through their
// !invariant.group), and the rest, whose contents start as the caller's (never a
// pointer to this call's tape). What the function writes adds to what either may
// hold: a fixed point over `foreign_` (pointers written into the tape other than by
// a cache's own group) and `outside_` (pointers written into the rest).
class Provenance {
 public:
  explicit Provenance(llvm::Function &fn) {
    for (llvm::BasicBlock &block : fn) {
      for (Instruction &inst : block) {
        if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
          if (llvm::MDNode *g = store->getMetadata(kGroup)) {
            stored_[g].push_back(store->getValueOperand());
          }
          stores_.push_back(store);
        } else if (auto *call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
          if (may_write(*call)) calls_.push_back(call);
        }
      }
    }
    for (;;) {  // each step adds bits: at most a few
      const unsigned foreign = foreign_, outside = outside_;
      for (llvm::StoreInst *store : stores_) {
        const unsigned what = stored_roots(store->getValueOperand());
        if (what == kNone) continue;
        const unsigned where = of(store->getPointerOperand());
        if (where & (kTape | kUnknown) && !store->getMetadata(kGroup)) foreign_ |= what;
        if (where & (kOutside | kUnknown)) outside_ |= what;
      }
      for (llvm::CallBase *call : calls_) written_by(*call);
      done_.clear();
      if (foreign == foreign_ && outside == outside_) break;
    }
  }

  // The roots of `pointer` (through GEPs, casts, phis, selects and loads).
  unsigned of(Value *pointer) {
    pointer = pointer->stripPointerCasts();
    auto found = done_.find(pointer);
    if (found != done_.end()) return found->second;
    if (visiting_.count(pointer)) {
      // A cycle: what it joins is counted where it entered; nothing below this
      // visit is remembered (its roots are the whole cycle's).
      in_cycle_ = true;
      return kNone;
    }
    if (++steps_ > kBudget) return kUnknown;
    visiting_.insert(pointer);
    const unsigned roots = compute(pointer);
    visiting_.erase(pointer);
    if (!in_cycle_) done_[pointer] = roots;
    if (visiting_.empty()) in_cycle_ = false;
    return roots;
  }

 private:
  static constexpr unsigned kBudget = 200000;  // values visited in all, then unknown

  // What memory at `where` may hold: a cache's group's stores (`group`, where
  // known), whatever else was written there.
  unsigned contents(unsigned where, llvm::MDNode *group) {
    unsigned held = kNone;
    if (where & kTape) {
      auto stores = group ? stored_.find(group) : stored_.end();
      if (stores == stored_.end()) return kUnknown;
      for (Value *stored : stores->second) {
        held |= stored->getType()->isPointerTy() ? of(stored) : kUnknown;
      }
      held |= foreign_;
    }
    if (where & kOutside) held |= outside_;
    if (where & kUnknown) held |= kUnknown;
    return held;
  }

  // The roots of the pointers a store writes: its value's, where it is a pointer;
  // unknown where it is an aggregate or vector holding pointers, or an integer made
  // from a pointer; none for other values.
  unsigned stored_roots(Value *value) {
    llvm::Type *type = value->getType();
    if (type->isPointerTy()) return of(value);
    if (holds_pointer(type)) return kUnknown;
    auto from_pointer = [](Value *v) { return llvm::isa<llvm::PtrToIntOperator>(v); };
    if (from_pointer(value)) return kUnknown;
    if (auto *op = llvm::dyn_cast<llvm::BinaryOperator>(value)) {
      if (from_pointer(op->getOperand(0)) || from_pointer(op->getOperand(1))) return kUnknown;
    }
    return kNone;
  }

  static bool holds_pointer(llvm::Type *type) {
    if (type->isPointerTy()) return true;
    if (auto *vector = llvm::dyn_cast<llvm::VectorType>(type)) {
      return holds_pointer(vector->getElementType());
    }
    if (auto *array = llvm::dyn_cast<llvm::ArrayType>(type)) {
      return holds_pointer(array->getElementType());
    }
    if (auto *structure = llvm::dyn_cast<llvm::StructType>(type)) {
      for (llvm::Type *element : structure->elements()) {
        if (holds_pointer(element)) return true;
      }
    }
    return false;
  }

  void written_by(llvm::CallBase &call) {
    if (auto *transfer = llvm::dyn_cast<llvm::AnyMemTransferInst>(&call)) {
      // memcpy, memmove: the source's contents (any cache's, where it is the tape).
      const unsigned from = of(transfer->getRawSource());
      unsigned held = from & kTape ? kUnknown : kNone;
      held |= contents(from & ~kTape, nullptr);
      const unsigned to = of(transfer->getRawDest());
      if (to & (kTape | kUnknown)) foreign_ |= held;
      if (to & (kOutside | kUnknown)) outside_ |= held;
      return;
    }
    // Any other call may store what its pointers reach where they point: harmless
    // while it can reach memory outside the tape only (given outside memory, it
    // reaches what that memory holds too).
    unsigned given = kNone;
    for (Value *arg : call.args()) {
      if (arg->getType()->isPointerTy()) given |= of(arg);
    }
    if (given & kOutside) given |= outside_;
    if (given & (kTape | kUnknown)) {
      foreign_ |= kUnknown;
      outside_ |= kUnknown;
    }
  }

  unsigned compute(Value *v) {
    // An undefined value may be taken as any other (a phi's incoming one on a path
    // where the value is never used): it adds no root.
    if (llvm::isa<llvm::UndefValue>(v)) return kNone;
    if (llvm::isa<llvm::Argument, llvm::AllocaInst, llvm::GlobalValue,
                  llvm::ConstantPointerNull>(v)) {
      return kOutside;
    }
    if (auto *gep = llvm::dyn_cast<llvm::GEPOperator>(v)) return of(gep->getPointerOperand());
    if (auto *cast = llvm::dyn_cast<llvm::BitCastOperator>(v)) return of(cast->getOperand(0));
    if (auto *phi = llvm::dyn_cast<llvm::PHINode>(v)) {
      unsigned roots = kNone;
      for (Value *in : phi->incoming_values()) roots |= of(in);
      return roots;
    }
    if (auto *select = llvm::dyn_cast<llvm::SelectInst>(v)) {
      return of(select->getTrueValue()) | of(select->getFalseValue());
    }
    if (auto *call = llvm::dyn_cast<llvm::CallBase>(v)) {
      const llvm::Function *callee = call->getCalledFunction();
      if (!callee) return kUnknown;
      const std::string name = callee->getName().str();
      if (name == kTapeAlloc || name == kTapeRealloc) return kTape;
      if (name == "malloc" || name == "calloc" || is_numba_allocator(name)) return kOutside;
      return kUnknown;
    }
    if (auto *load = llvm::dyn_cast<llvm::LoadInst>(v)) {
      return contents(of(load->getPointerOperand()), load->getMetadata(kGroup));
    }
    return kUnknown;
  }

  std::map<llvm::MDNode *, std::vector<Value *>> stored_;  // by cache group
  std::vector<llvm::StoreInst *> stores_;
  std::vector<llvm::CallBase *> calls_;  // those that may write memory
  unsigned foreign_ = kNone;
  unsigned outside_ = kOutside;  // the caller's memory holds no pointer to the tape
  std::map<Value *, unsigned> done_;
  std::set<Value *> visiting_;
  bool in_cycle_ = false;
  size_t steps_ = 0;
};

// `node`'s scope list with `scope` added.
llvm::MDNode *with_scope(llvm::MDNode *node, llvm::MDNode *scope) {
  return llvm::MDNode::concatenate(node, llvm::MDNode::get(scope->getContext(), {scope}));
}

}  // namespace

llvm::PreservedAnalyses ScopeTapeLoads::run(llvm::Function &fn, llvm::FunctionAnalysisManager &) {
  if (fn.isDeclaration() || !fn.hasFnAttribute(kScopeTapeAttribute)) {
    return llvm::PreservedAnalyses::all();
  }
  Provenance provenance(fn);
  std::vector<llvm::LoadInst *> cache_loads;
  std::vector<Instruction *> outside_writes;
  for (llvm::BasicBlock &block : fn) {
    for (Instruction &inst : block) {
      if (auto *load = llvm::dyn_cast<llvm::LoadInst>(&inst)) {
        if (load->getMetadata(kGroup) && provenance.of(load->getPointerOperand()) == kTape) {
          cache_loads.push_back(load);
        }
      } else if (auto *store = llvm::dyn_cast<llvm::StoreInst>(&inst)) {
        if (provenance.of(store->getPointerOperand()) == kOutside) outside_writes.push_back(store);
      } else if (auto *intrinsic = llvm::dyn_cast<llvm::AnyMemIntrinsic>(&inst)) {
        // memset, memcpy, memmove: what they write is their destination.
        if (provenance.of(intrinsic->getRawDest()) == kOutside) outside_writes.push_back(&inst);
      }
    }
  }
  if (cache_loads.empty() || outside_writes.empty()) return llvm::PreservedAnalyses::all();
  llvm::MDBuilder md(fn.getContext());
  llvm::MDNode *domain = md.createAnonymousAliasScopeDomain("enzyme_py tape");
  llvm::MDNode *scope = md.createAnonymousAliasScope(domain, "enzyme_py cache");
  for (llvm::LoadInst *load : cache_loads) {
    load->setMetadata(llvm::LLVMContext::MD_alias_scope,
                      with_scope(load->getMetadata(llvm::LLVMContext::MD_alias_scope), scope));
  }
  for (Instruction *write : outside_writes) {
    write->setMetadata(llvm::LLVMContext::MD_noalias,
                       with_scope(write->getMetadata(llvm::LLVMContext::MD_noalias), scope));
  }
  llvm::PreservedAnalyses kept;
  kept.preserveSet<llvm::CFGAnalyses>();
  return kept;
}

}  // namespace enzyme_py
