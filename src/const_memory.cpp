#include "const_memory.h"

#include <stdexcept>

#include <llvm/ADT/DenseMap.h>
#include <llvm/ADT/DenseSet.h>
#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SetVector.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Operator.h>

#include "enzyme_capi.h"

namespace enzyme_py {
namespace {

using namespace llvm;

// Classes of memory, unified as pointers are found to meet (Steensgaard's analysis):
// each pointer value belongs to the class of what it points into, and each class has
// one class for the pointers kept in its memory.
class MemoryClasses {
 public:
  int of(const Value *pointer) {
    auto [at, fresh] = class_of_.try_emplace(pointer, 0);
    if (fresh) at->second = fresh_class();
    return find(at->second);
  }

  // The class of the pointers kept in the memory of class `c`.
  int contents(int c) {
    c = find(c);
    if (contents_[c] < 0) {
      const int made = fresh_class();
      contents_[find(c)] = made;
    }
    return find(contents_[find(c)]);
  }

  int find(int c) {
    while (parent_[c] != c) c = parent_[c] = parent_[parent_[c]];
    return c;
  }

  void join(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    parent_[b] = a;
    const int kept_a = contents_[a], kept_b = contents_[b];
    if (kept_a < 0) {
      contents_[a] = kept_b;
    } else if (kept_b >= 0) {
      join(kept_a, kept_b);  // what both kept may now meet too
    }
  }

  void join(const Value *a, const Value *b) { join(of(a), of(b)); }

 private:
  int fresh_class() {
    parent_.push_back(static_cast<int>(parent_.size()));
    contents_.push_back(-1);
    return parent_.back();
  }

  DenseMap<const Value *, int> class_of_;
  std::vector<int> parent_;
  std::vector<int> contents_;
};

bool is_pointer(const Value *v) { return v->getType()->isPtrOrPtrVectorTy(); }

// The function a call runs, when it is a direct call to a definition.
const Function *defined_callee(const CallBase &call) {
  const Function *callee = call.getCalledFunction();
  return callee && !callee->isDeclaration() ? callee : nullptr;
}

// A definition whose address a call to a function without a body is given (a prange
// launch's chunk, given to __enzyme_py_parfor_run; an OpenMP region), or null.
const Function *callback_of(const CallBase &call, const Use &arg) {
  if (defined_callee(call)) return nullptr;
  const auto *fn = dyn_cast<Function>(arg.get()->stripPointerCasts());
  return fn && !fn->isDeclaration() ? fn : nullptr;
}

// `function` and every definition it reaches by direct calls and callbacks.
SetVector<const Function *> reached_from(const Function &function) {
  SetVector<const Function *> reached;
  reached.insert(&function);
  for (size_t i = 0; i < reached.size(); ++i) {
    for (const Instruction &inst : instructions(*reached[i])) {
      const auto *call = dyn_cast<CallBase>(&inst);
      if (!call) continue;
      if (const Function *callee = defined_callee(*call)) reached.insert(callee);
      for (const Use &arg : call->args()) {
        if (const Function *callback = callback_of(*call, arg)) reached.insert(callback);
      }
    }
  }
  return reached;
}

// What each function returns (its `ret` operands), gathered once for every call of it.
using Returns = DenseMap<const Function *, SmallVector<const Value *, 2>>;

Returns returned_values(const SetVector<const Function *> &functions) {
  Returns returns;
  for (const Function *fn : functions) {
    auto &values = returns[fn];
    for (const Instruction &inst : instructions(*fn)) {
      if (const auto *ret = dyn_cast<ReturnInst>(&inst)) {
        if (ret->getReturnValue()) values.push_back(ret->getReturnValue());
      }
    }
  }
  return returns;
}

// Pointers passed as integers through an array of 64-bit slots at constant offsets,
// as enzyme_py's prange launches pass their arguments to each chunk
// (python/enzyme_py/frontends/_numba_parfor_ir.py): `store i64 (ptrtoint p), slots+k`
// in the launch, `inttoptr (load i64, slots+k)` in the chunk.
struct Slots {
  struct Stored {
    const Value *base;
    int64_t offset;
    const Value *pointer;
  };
  struct Loaded {
    const Value *base;
    int64_t offset;
    const Value *pointer;  // the inttoptr
  };
  std::vector<Stored> stored;
  std::vector<Loaded> loaded;
};

// The object `address` points into and its constant byte offset there.
std::pair<const Value *, int64_t> base_and_offset(const Value *address, const DataLayout &layout) {
  APInt offset(layout.getIndexTypeSizeInBits(address->getType()), 0);
  const Value *base = address->stripAndAccumulateConstantOffsets(layout, offset, true);
  return {base, offset.getSExtValue()};
}

void note_slots(const Instruction &inst, const DataLayout &layout, Slots &slots) {
  if (const auto *store = dyn_cast<StoreInst>(&inst)) {
    if (const auto *cast = dyn_cast<PtrToIntOperator>(store->getValueOperand())) {
      auto [base, offset] = base_and_offset(store->getPointerOperand(), layout);
      slots.stored.push_back({base, offset, cast->getPointerOperand()});
    }
  } else if (const auto *load = dyn_cast<LoadInst>(&inst)) {
    if (!load->getType()->isIntegerTy(64)) return;
    for (const User *user : load->users()) {
      if (isa<IntToPtrInst>(user)) {
        auto [base, offset] = base_and_offset(load->getPointerOperand(), layout);
        slots.loaded.push_back({base, offset, user});
      }
    }
  }
}

// Each pointer loaded from a slot joined with those stored in that slot of the same
// class of memory, until nothing more joins.
void join_slots(const Slots &slots, MemoryClasses &classes) {
  for (bool joined = true; joined;) {
    joined = false;
    for (const Slots::Loaded &load : slots.loaded) {
      for (const Slots::Stored &store : slots.stored) {
        if (store.offset != load.offset) continue;
        if (classes.of(store.base) != classes.of(load.base)) continue;
        if (classes.of(store.pointer) == classes.of(load.pointer)) continue;
        classes.join(store.pointer, load.pointer);
        joined = true;
      }
    }
  }
}

// The pointer an integer was made from, through offsets and masks (Numba aligns
// addresses as integers), or null.
const Value *pointer_behind(const Value *v) {
  for (int depth = 0; depth < 8; ++depth) {
    if (const auto *cast = dyn_cast<PtrToIntOperator>(v)) return cast->getPointerOperand();
    const auto *op = dyn_cast<BinaryOperator>(v);
    if (!op) return nullptr;
    switch (op->getOpcode()) {
      case Instruction::Add:
      case Instruction::Sub:
      case Instruction::And:
      case Instruction::Or:
        v = op->getOperand(0);
        if (!isa<PtrToIntOperator>(v) && !isa<BinaryOperator>(v)) v = op->getOperand(1);
        break;
      default:
        return nullptr;
    }
  }
  return nullptr;
}

void unify_pointers(const SetVector<const Function *> &functions, const Returns &returns,
                    MemoryClasses &classes) {
  Slots slots;
  for (const Function *fn : functions) {
    const DataLayout &layout = fn->getParent()->getDataLayout();
    for (const Instruction &inst : instructions(*fn)) {
      note_slots(inst, layout, slots);
      if (const auto *load = dyn_cast<LoadInst>(&inst)) {
        if (is_pointer(load))
          classes.join(classes.of(load), classes.contents(classes.of(load->getPointerOperand())));
      } else if (const auto *store = dyn_cast<StoreInst>(&inst)) {
        const Value *stored = store->getValueOperand();
        if (is_pointer(stored)) {
          classes.join(classes.of(stored),
                       classes.contents(classes.of(store->getPointerOperand())));
        }
      } else if (const auto *copy = dyn_cast<MemTransferInst>(&inst)) {
        classes.join(classes.contents(classes.of(copy->getRawDest())),
                     classes.contents(classes.of(copy->getRawSource())));
      } else if (const auto *call = dyn_cast<CallBase>(&inst)) {
        // A callback's pointer parameters may be given any pointer argument of its type.
        for (const Use &arg : call->args()) {
          const Function *callback = callback_of(*call, arg);
          if (!callback) continue;
          for (const Argument &param : callback->args()) {
            if (!is_pointer(&param)) continue;
            for (const Use &other : call->args()) {
              if (other.get()->getType() == param.getType()) classes.join(other.get(), &param);
            }
          }
        }
        const Function *callee = defined_callee(*call);
        if (!callee) continue;
        for (unsigned i = 0; i < call->arg_size() && i < callee->arg_size(); ++i) {
          if (is_pointer(call->getArgOperand(i))) classes.join(call->getArgOperand(i), callee->getArg(i));
        }
        if (!is_pointer(call)) continue;
        for (const Value *returned : returns.lookup(callee)) classes.join(call, returned);
      } else if (is_pointer(&inst)) {
        if (isa<GetElementPtrInst>(inst) || isa<CastInst>(inst)) {
          if (isa<IntToPtrInst>(inst)) {
            if (const Value *behind = pointer_behind(inst.getOperand(0))) classes.join(&inst, behind);
          } else if (is_pointer(inst.getOperand(0))) {
            classes.join(&inst, inst.getOperand(0));
          }
        } else if (const auto *phi = dyn_cast<PHINode>(&inst)) {
          for (const Value *in : phi->incoming_values()) classes.join(&inst, in);
        } else if (const auto *select = dyn_cast<SelectInst>(&inst)) {
          classes.join(&inst, select->getTrueValue());
          classes.join(&inst, select->getFalseValue());
        }
      }
    }
  }
  join_slots(slots, classes);
}

// Which values depend on a differentiated argument, and which classes of memory hold
// such values, to a fixed point.
struct Activity {
  DenseSet<const Value *> values;
  DenseSet<int> memory;        // classes holding values that carry a derivative
  DenseSet<int> stored_into;   // classes such a value was stored into
};

bool carries_derivative(const Instruction &inst, const Activity &active) {
  if (isa<CmpInst>(inst)) return false;
  if (const auto *select = dyn_cast<SelectInst>(&inst)) {
    return active.values.count(select->getTrueValue()) ||
           active.values.count(select->getFalseValue());
  }
  for (const Value *operand : inst.operands()) {
    if (active.values.count(operand)) return true;
  }
  return false;
}

// Marks `c` as holding derivative-carrying values; whether it is new.
bool hold(Activity &active, int c) {
  active.stored_into.insert(c);
  return active.memory.insert(c).second;
}

void propagate(const SetVector<const Function *> &functions, const Returns &returns,
               MemoryClasses &classes, Activity &active) {
  for (bool changed = true; changed;) {
    changed = false;
    for (const Function *fn : functions) {
      for (const Instruction &inst : instructions(*fn)) {
        if (const auto *load = dyn_cast<LoadInst>(&inst)) {
          if (!is_pointer(load) && active.memory.count(classes.of(load->getPointerOperand())))
            changed |= active.values.insert(load).second;
        } else if (const auto *store = dyn_cast<StoreInst>(&inst)) {
          if (active.values.count(store->getValueOperand()))
            changed |= hold(active, classes.of(store->getPointerOperand()));
        } else if (const auto *copy = dyn_cast<MemTransferInst>(&inst)) {
          if (active.memory.count(classes.of(copy->getRawSource())))
            changed |= hold(active, classes.of(copy->getRawDest()));
        } else if (const auto *call = dyn_cast<CallBase>(&inst)) {
          if (const Function *callee = defined_callee(*call)) {
            for (unsigned i = 0; i < call->arg_size() && i < callee->arg_size(); ++i) {
              if (active.values.count(call->getArgOperand(i)))
                changed |= active.values.insert(callee->getArg(i)).second;
            }
            if (is_pointer(call) || call->getType()->isVoidTy()) continue;
            for (const Value *returned : returns.lookup(callee)) {
              if (active.values.count(returned)) changed |= active.values.insert(call).second;
            }
            continue;
          }
          if (isa<MemSetInst>(call)) {
            if (active.values.count(call->getArgOperand(1)))
              changed |= hold(active, classes.of(call->getArgOperand(0)));
            continue;
          }
          // Without a body: what it computes from carries the derivative on.
          bool in = false;
          for (const Use &arg : call->args()) {
            const Value *v = arg.get();
            in |= active.values.count(v) ||
                  (is_pointer(v) && active.memory.count(classes.of(v)));
          }
          if (!in) continue;
          if (!is_pointer(call) && !call->getType()->isVoidTy())
            changed |= active.values.insert(call).second;
          for (unsigned i = 0; i < call->arg_size(); ++i) {
            const Value *v = call->getArgOperand(i);
            if (is_pointer(v) && !call->onlyReadsMemory(i) && !call->onlyReadsMemory())
              changed |= hold(active, classes.of(v));
          }
        } else if (!is_pointer(&inst) && !inst.getType()->isVoidTy() &&
                   carries_derivative(inst, active)) {
          changed |= active.values.insert(&inst).second;
        }
      }
    }
  }
}

// Whether a value loaded from class `c` may carry a derivative anywhere but back into
// `c`: through what carries one (arithmetic, casts, phis, a select's values, calls to
// intrinsics and functions without pointer arguments) to a store elsewhere, a return,
// or another call. Compares, branch conditions and addresses carry none. An array
// only accumulated into (`out[i] += x[i]`, a histogram) loses nothing the function's
// results need. False too where nothing of 32 bits or more (not a pointer) is loaded
// from `c`.
bool read_back_matters(const SetVector<const Function *> &functions, MemoryClasses &classes,
                       int c) {
  SmallVector<const Value *, 32> work;
  DenseSet<const Value *> seen;
  bool wide = false;
  for (const Function *fn : functions) {
    for (const Instruction &inst : instructions(*fn)) {
      if (const auto *load = dyn_cast<LoadInst>(&inst)) {
        if (!is_pointer(load) && classes.of(load->getPointerOperand()) == c) {
          wide |= load->getType()->getScalarSizeInBits() >= 32;
          work.push_back(load);
          seen.insert(load);
        }
      } else if (const auto *copy = dyn_cast<MemTransferInst>(&inst)) {
        if (classes.of(copy->getRawSource()) == c) return true;  // copied out
      }
    }
  }
  if (!wide) return false;
  while (!work.empty()) {
    const Value *value = work.pop_back_val();
    for (const User *user : value->users()) {
      if (const auto *store = dyn_cast<StoreInst>(user)) {
        if (store->getValueOperand() != value) continue;  // an address
        if (classes.of(store->getPointerOperand()) != c) return true;
        continue;
      }
      if (isa<CmpInst>(user) || isa<BranchInst>(user) || isa<SwitchInst>(user) ||
          isa<GetElementPtrInst>(user) || isa<FPToSIInst>(user) || isa<FPToUIInst>(user))
        continue;
      if (isa<ReturnInst>(user) || isa<IntToPtrInst>(user)) return true;
      if (const auto *select = dyn_cast<SelectInst>(user)) {
        if (select->getCondition() == value && select->getTrueValue() != value &&
            select->getFalseValue() != value)
          continue;
      } else if (const auto *call = dyn_cast<CallBase>(user)) {
        const bool plain = !call->getType()->isVoidTy() && !is_pointer(call) &&
                           none_of(call->args(), [](const Use &a) { return is_pointer(a.get()); });
        if (!plain || defined_callee(*call)) return true;
      }
      if (seen.insert(user).second) work.push_back(user);
    }
  }
  return false;
}

}  // namespace

std::vector<unsigned> const_params_carrying_derivatives(LLVMModuleRef mod,
                                                         const std::string &function,
                                                         const std::vector<int> &activities,
                                                         const std::vector<bool> &float_pointee) {
  const Function *fn = unwrap(mod)->getFunction(function);
  if (!fn || fn->isDeclaration())
    throw std::invalid_argument("no function named '" + function + "' is defined in the module");
  if (activities.size() != fn->arg_size() || float_pointee.size() != fn->arg_size()) {
    throw std::invalid_argument("'" + function + "' has " + std::to_string(fn->arg_size()) +
                                " parameters; " + std::to_string(activities.size()) +
                                " activities and " + std::to_string(float_pointee.size()) +
                                " pointee flags were given");
  }
  const SetVector<const Function *> functions = reached_from(*fn);
  MemoryClasses classes;
  const Returns returns = returned_values(functions);
  unify_pointers(functions, returns, classes);

  Activity active;
  std::vector<unsigned> candidates;
  for (unsigned i = 0; i < fn->arg_size(); ++i) {
    const Argument *arg = fn->getArg(i);
    if (activities[i] == capi::DFT_CONSTANT) {
      if (is_pointer(arg) && float_pointee[i]) candidates.push_back(i);
    } else if (is_pointer(arg)) {
      active.memory.insert(classes.of(arg));
    } else {
      active.values.insert(arg);
    }
  }
  if (candidates.empty()) return {};
  // A Const array in one class with a shadowed one: pointers that may reach both (`in`
  // is x, then the state) are left to Enzyme, which refuses what it cannot tell apart
  // ("mixed activity", with advice); the class would hold the shadowed array's writes.
  const DenseSet<int> shadowed = active.memory;
  propagate(functions, returns, classes, active);
  // Classes were final before propagation: every index above is a class's root.
  std::vector<unsigned> found;
  for (unsigned i : candidates) {
    const int c = classes.of(fn->getArg(i));
    if (active.stored_into.count(c) && !shadowed.count(c) &&
        read_back_matters(functions, classes, c))
      found.push_back(i);
  }
  return found;
}

}  // namespace enzyme_py
