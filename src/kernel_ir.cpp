#include "kernel_ir.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <llvm-c/IRReader.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalAlias.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/InstrTypes.h>
#include <llvm/IR/Module.h>

namespace enzyme_py {

void parse_kernel(LLVMContextRef ctx, const std::string &ir_text, ModuleOwner &owner) {
  char *error = nullptr;
  LLVMMemoryBufferRef buffer =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(ir_text.data(), ir_text.size(), "kernel");
  if (LLVMParseIRInContext(ctx, buffer, &owner.mod, &error)) {  // consumes the buffer
    std::string message = error ? error : "";
    LLVMDisposeMessage(error);
    throw std::runtime_error("kernel IR does not parse: " + message);
  }
}

void run_passes(LLVMModuleRef mod, const char *passes, LLVMTargetMachineRef machine,
                const char *what) {
  LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
  LLVMErrorRef err = LLVMRunPasses(mod, passes, machine, options);
  LLVMDisposePassBuilderOptions(options);
  if (err) {
    char *msg = LLVMGetErrorMessage(err);
    std::string text = msg;
    LLVMDisposeErrorMessage(msg);
    throw std::runtime_error(std::string(what) + ": " + text);
  }
}

LLVMValueRef defined_function(LLVMModuleRef mod, const std::string &name) {
  LLVMValueRef fn = LLVMGetNamedFunction(mod, name.c_str());
  if (!fn || LLVMIsDeclaration(fn)) {
    throw std::runtime_error("no function named '" + name + "' in the module");
  }
  return fn;
}

namespace {

// coef * i + offset, for the kernel's index i.
struct Linear {
  int64_t coef = 0;
  int64_t offset = 0;
};

bool scaled(const Linear &a, int64_t by, Linear &out) {
  return !__builtin_mul_overflow(a.coef, by, &out.coef) &&
         !__builtin_mul_overflow(a.offset, by, &out.offset);
}

bool summed(const Linear &a, const Linear &b, int64_t sign, Linear &out) {
  Linear b2;
  return scaled(b, sign, b2) && !__builtin_add_overflow(a.coef, b2.coef, &out.coef) &&
         !__builtin_add_overflow(a.offset, b2.offset, &out.offset);
}

// `v` as a linear function of the index, if it is one.
std::optional<Linear> linear(LLVMValueRef v, LLVMValueRef index, int depth = 0) {
  if (v == index) return Linear{1, 0};
  if (LLVMIsAConstantInt(v)) return Linear{0, LLVMConstIntGetSExtValue(v)};
  if (depth > 16 || !LLVMIsAInstruction(v)) return std::nullopt;
  const LLVMOpcode op = LLVMGetInstructionOpcode(v);
  if (op == LLVMSExt) return linear(LLVMGetOperand(v, 0), index, depth + 1);  // same value
  if (op != LLVMAdd && op != LLVMSub && op != LLVMMul && op != LLVMShl) return std::nullopt;
  auto a = linear(LLVMGetOperand(v, 0), index, depth + 1);
  auto b = linear(LLVMGetOperand(v, 1), index, depth + 1);
  if (!a || !b) return std::nullopt;
  Linear out;
  switch (op) {
    case LLVMAdd:
      if (summed(*a, *b, 1, out)) return out;
      break;
    case LLVMSub:
      if (summed(*a, *b, -1, out)) return out;
      break;
    case LLVMMul:
      if (a->coef == 0 && scaled(*b, a->offset, out)) return out;
      if (b->coef == 0 && scaled(*a, b->offset, out)) return out;
      break;
    default:  // shl by a constant
      if (b->coef == 0 && b->offset >= 0 && b->offset < 62 &&
          scaled(*a, int64_t{1} << b->offset, out)) {
        return out;
      }
      break;
  }
  return std::nullopt;
}

// The bytes one parameter's accesses touch: stride * i + [low, high].
struct Reach {
  int64_t stride = 0;
  int64_t low = 0;
  int64_t high = -1;  // high < low: nothing touched yet
  bool known = true;
  std::set<LLVMValueRef> merges;  // the phis and selects already followed

  void touch(const Linear &at, uint64_t bytes) {
    if (at.coef <= 0 || (high >= low && at.coef != stride)) {
      known = false;  // the same bytes for every index, or two strides
      return;
    }
    const int64_t last = at.offset + static_cast<int64_t>(bytes) - 1;
    if (high < low) {
      stride = at.coef, low = at.offset, high = last;
    } else {
      low = std::min(low, at.offset), high = std::max(high, last);
    }
  }
};

// The bytes a GEP adds to its base pointer, if linear in the index.
std::optional<Linear> gep_offset(LLVMValueRef gep, LLVMValueRef index, LLVMTargetDataRef layout) {
  LLVMTypeRef type = LLVMGetGEPSourceElementType(gep);
  Linear offset;
  const unsigned operands = static_cast<unsigned>(LLVMGetNumOperands(gep));
  for (unsigned k = 1; k < operands; ++k) {
    LLVMValueRef index_value = LLVMGetOperand(gep, k);
    if (k > 1 && LLVMGetTypeKind(type) == LLVMStructTypeKind) {
      const auto field = static_cast<unsigned>(LLVMConstIntGetZExtValue(index_value));
      offset.offset += static_cast<int64_t>(LLVMOffsetOfElement(layout, type, field));
      type = LLVMStructGetTypeAtIndex(type, field);
      continue;
    }
    if (k > 1) type = LLVMGetElementType(type);  // into an array or vector
    auto step = linear(index_value, index);
    Linear bytes;
    if (!step || !scaled(*step, static_cast<int64_t>(LLVMABISizeOfType(layout, type)), bytes) ||
        !summed(offset, bytes, 1, offset)) {
      return std::nullopt;
    }
  }
  return offset;
}

// Where the pointer `ptr` points, as bytes from the parameter `param`, when it
// provably points there (a phi or select only when all its values agree).
std::optional<Linear> bytes_from(LLVMValueRef ptr, LLVMValueRef param, LLVMValueRef index,
                                 LLVMTargetDataRef layout, int depth = 0) {
  if (ptr == param) return Linear{};
  if (depth > 16) return std::nullopt;
  if (LLVMIsAGetElementPtrInst(ptr)) {
    auto base = bytes_from(LLVMGetOperand(ptr, 0), param, index, layout, depth + 1);
    auto offset = gep_offset(ptr, index, layout);
    Linear sum;
    if (base && offset && summed(*base, *offset, 1, sum)) return sum;
    return std::nullopt;
  }
  if (LLVMIsABitCastInst(ptr) || LLVMIsAAddrSpaceCastInst(ptr)) {
    return bytes_from(LLVMGetOperand(ptr, 0), param, index, layout, depth + 1);
  }
  std::vector<LLVMValueRef> values;
  if (LLVMIsAPHINode(ptr)) {
    for (unsigned k = 0, n = LLVMCountIncoming(ptr); k < n; ++k) {
      values.push_back(LLVMGetIncomingValue(ptr, k));
    }
  } else if (LLVMIsASelectInst(ptr)) {
    values = {LLVMGetOperand(ptr, 1), LLVMGetOperand(ptr, 2)};
  } else {
    return std::nullopt;
  }
  std::optional<Linear> agreed;
  for (LLVMValueRef value : values) {
    auto at = bytes_from(value, param, index, layout, depth + 1);
    if (!at || (agreed && (at->coef != agreed->coef || at->offset != agreed->offset))) {
      return std::nullopt;
    }
    agreed = at;
  }
  return agreed;
}

// Follows every use of the pointer `ptr` (at bytes `at` from the parameter
// `param`) to the loads and stores it feeds; anything else makes the reach
// unknown.
void follow(LLVMValueRef ptr, const Linear &at, LLVMValueRef param, LLVMValueRef index,
            LLVMTargetDataRef layout, Reach &reach, int depth = 0) {
  if (depth > 32) reach.known = false;
  for (LLVMUseRef use = LLVMGetFirstUse(ptr); use && reach.known; use = LLVMGetNextUse(use)) {
    LLVMValueRef user = LLVMGetUser(use);
    if (LLVMIsAGetElementPtrInst(user) && LLVMGetOperand(user, 0) == ptr) {
      auto offset = gep_offset(user, index, layout);
      Linear sum;
      if (offset && summed(at, *offset, 1, sum)) {
        follow(user, sum, param, index, layout, reach, depth + 1);
      } else {
        reach.known = false;
      }
    } else if (LLVMIsABitCastInst(user) || LLVMIsAAddrSpaceCastInst(user)) {
      follow(user, at, param, index, layout, reach, depth + 1);
    } else if (LLVMIsAPHINode(user) ||
               (LLVMIsASelectInst(user) && LLVMGetOperand(user, 0) != ptr)) {
      // Reached once per incoming value: followed once, if all values agree.
      auto merged = bytes_from(user, param, index, layout);
      if (!merged) {
        reach.known = false;
      } else if (reach.merges.insert(user).second) {
        follow(user, *merged, param, index, layout, reach, depth + 1);
      }
    } else if (LLVMIsALoadInst(user)) {
      reach.touch(at, LLVMABISizeOfType(layout, LLVMTypeOf(user)));
    } else if (LLVMIsAStoreInst(user) || LLVMIsAAtomicRMWInst(user)) {
      LLVMValueRef value = LLVMGetOperand(user, LLVMIsAStoreInst(user) ? 0 : 1);
      if (value == ptr) {
        reach.known = false;  // the pointer itself stored: it may be used anywhere
      } else {
        reach.touch(at, LLVMABISizeOfType(layout, LLVMTypeOf(value)));
      }
    } else if (!LLVMIsAICmpInst(user)) {
      reach.known = false;  // passed on, stored, converted: not followed
    }
  }
}

}  // namespace

namespace {

// Every function of `mod` but those of `kept` made a declaration (of external
// linkage: what deleteBody leaves).
void delete_bodies_except(llvm::Module &mod, const std::set<llvm::Function *> &kept) {
  for (llvm::Function &fn : mod) {
    if (fn.isDeclaration() || kept.count(&fn)) continue;
    fn.deleteBody();
    fn.setComdat(nullptr);
  }
}

}  // namespace

void keep_reached(LLVMModuleRef mod, const std::vector<LLVMValueRef> &roots) {
  std::set<llvm::Function *> reached;
  for (LLVMValueRef root : roots) {
    llvm::Function *fn = llvm::unwrap<llvm::Function>(root);
    // LLVM's call-graph passes (function-attrs) visit no internal function that
    // nothing refers to, as a root may be once its callers lose their bodies.
    if (fn->hasLocalLinkage()) fn->setLinkage(llvm::GlobalValue::ExternalLinkage);
    reached.insert(fn);
  }
  std::vector<llvm::Function *> pending(reached.begin(), reached.end());
  while (!pending.empty()) {
    llvm::Function *fn = pending.back();
    pending.pop_back();
    for (llvm::Instruction &inst : llvm::instructions(*fn)) {
      auto *call = llvm::dyn_cast<llvm::CallBase>(&inst);
      if (!call) continue;
      // Typed pointers: a callee of another type is called through a bitcast.
      auto *callee = llvm::dyn_cast<llvm::Function>(
          call->getCalledOperand()->stripPointerCastsAndAliases());
      if (callee && !callee->isDeclaration() && reached.insert(callee).second) {
        pending.push_back(callee);
      }
    }
  }
  for (llvm::GlobalAlias &alias : llvm::unwrap(mod)->aliases()) {
    if (auto *aliased = llvm::dyn_cast<llvm::Function>(alias.getAliaseeObject())) {
      reached.insert(aliased);  // an alias must name a definition
    }
  }
  delete_bodies_except(*llvm::unwrap(mod), reached);
}

void drop_param_memory_attributes(LLVMModuleRef mod) {
  for (llvm::Function &fn : *llvm::unwrap(mod)) {
    if (fn.isDeclaration()) continue;
    for (unsigned k = 0; k < fn.arg_size(); ++k) {
      for (const llvm::Attribute::AttrKind kind :
           {llvm::Attribute::ReadOnly, llvm::Attribute::ReadNone, llvm::Attribute::WriteOnly}) {
        fn.removeParamAttr(k, kind);
      }
    }
  }
}

void settle_flags(LLVMModuleRef mod, const std::vector<std::pair<std::string, bool>> &flags) {
  for (const auto &[name, value] : flags) {
    llvm::GlobalVariable *flag = llvm::unwrap(mod)->getGlobalVariable(name, true);
    if (!flag || flag->isDeclaration() || !flag->getValueType()->isIntegerTy(1)) {
      throw std::runtime_error("no i1 variable named '" + name + "' is defined");
    }
    flag->setInitializer(llvm::ConstantInt::getBool(flag->getContext(), value));
    flag->setConstant(true);
    flag->setLinkage(llvm::GlobalValue::InternalLinkage);
  }
}

std::vector<bool> read_only_params(LLVMModuleRef mod, const std::string &function) {
  LLVMValueRef fn = defined_function(mod, function);
  // What the function's parameters are inferred from: its body and its callees'.
  keep_reached(mod, {fn});
  run_passes(mod, "function(sroa,early-cse),cgscc(function-attrs)", nullptr,
             "inferring the kernel's attributes");
  const unsigned readonly = LLVMGetEnumAttributeKindForName("readonly", 8);
  const unsigned readnone = LLVMGetEnumAttributeKindForName("readnone", 8);
  std::vector<bool> result;
  for (unsigned k = 0, n = LLVMCountParams(fn); k < n; ++k) {
    const unsigned index = k + 1;  // attribute index 0 is the return value
    result.push_back(LLVMGetEnumAttributeAtIndex(fn, index, readonly) != nullptr ||
                     LLVMGetEnumAttributeAtIndex(fn, index, readnone) != nullptr);
  }
  return result;
}

std::vector<bool> read_only_params(LLVMContextRef ctx, const std::string &ir_text,
                                   const std::string &function) {
  ModuleOwner work;
  parse_kernel(ctx, ir_text, work);
  return read_only_params(work.mod, function);
}

std::vector<std::vector<std::optional<int64_t>>> index_reaches(
    LLVMContextRef ctx, const std::string &ir_text, const std::vector<ReachQuery> &queries) {
  ModuleOwner work;
  parse_kernel(ctx, ir_text, work);
  LLVMContextRef context = LLVMGetModuleContext(work.mod);
  LLVMTypeRef i1 = LLVMInt1TypeInContext(context);
  LLVMTypeRef assume_type = LLVMFunctionType(LLVMVoidTypeInContext(context), &i1, 1, 0);
  LLVMValueRef assume = LLVMGetNamedFunction(work.mod, "llvm.assume");
  if (!assume) assume = LLVMAddFunction(work.mod, "llvm.assume", assume_type);
  std::vector<LLVMValueRef> fns;
  std::set<llvm::Function *> asked;
  for (const ReachQuery &query : queries) {
    LLVMValueRef fn = defined_function(work.mod, query.function);
    if (query.index >= LLVMCountParams(fn)) throw std::runtime_error("no such index parameter");
    for (const auto &[param, value] : query.constants) {  // e.g. array shapes, known at launch
      if (param >= LLVMCountParams(fn) || param == query.index) {
        throw std::runtime_error("no such parameter to hold constant");
      }
      LLVMValueRef p = LLVMGetParam(fn, param);
      if (LLVMGetTypeKind(LLVMTypeOf(p)) != LLVMIntegerTypeKind) {
        throw std::runtime_error("only integer parameters can be held constant");
      }
      LLVMReplaceAllUsesWith(p, LLVMConstInt(LLVMTypeOf(p), static_cast<uint64_t>(value), 1));
    }
    // Indices are never negative: that lets LLVM drop the branches of negative-index
    // wraparound (Numba's), whose addresses are not linear in the index.
    LLVMBuilderRef b = LLVMCreateBuilderInContext(context);
    LLVMPositionBuilderBefore(b, LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(fn)));
    LLVMValueRef i = LLVMGetParam(fn, query.index);
    LLVMValueRef not_negative =
        LLVMBuildICmp(b, LLVMIntSGE, i, LLVMConstNull(LLVMTypeOf(i)), "");
    LLVMBuildCall2(b, assume_type, assume, &not_negative, 1, "");
    LLVMDisposeBuilder(b);
    fns.push_back(fn);
    asked.insert(llvm::unwrap<llvm::Function>(fn));
  }
  // Only the functions asked about are simplified: the passes inline nothing, so a
  // call is the same opaque call whether its callee has a body or not (a prange
  // body's module also holds the function, its wrapper and every copy of the body:
  // GMM's four analyses took 46 ms, most of it simplifying those, and as many parses).
  delete_bodies_except(*llvm::unwrap(work.mod), asked);
  run_passes(work.mod,
             "function(instcombine,correlated-propagation,simplifycfg,instcombine,"
             "jump-threading,correlated-propagation,gvn,instcombine,correlated-propagation)",
             nullptr, "simplifying the kernel's addresses");
  LLVMTargetDataRef layout = LLVMCreateTargetData(LLVMGetDataLayoutStr(work.mod));
  std::vector<std::vector<std::optional<int64_t>>> results;
  for (size_t q = 0; q < queries.size(); ++q) {
    LLVMValueRef fn = fns[q];
    std::vector<std::optional<int64_t>> result;
    for (unsigned p : queries[q].params) {
      if (p >= LLVMCountParams(fn)) {
        LLVMDisposeTargetData(layout);
        throw std::runtime_error("no such parameter");
      }
      Reach reach;
      LLVMValueRef param = LLVMGetParam(fn, p);
      follow(param, Linear{}, param, LLVMGetParam(fn, queries[q].index), layout, reach);
      if (!reach.known) {
        result.emplace_back(std::nullopt);
      } else if (reach.high < reach.low) {
        result.emplace_back(0);  // never touched
      } else {
        result.emplace_back((reach.high - reach.low) / reach.stride);
      }
    }
    results.push_back(std::move(result));
  }
  LLVMDisposeTargetData(layout);
  return results;
}

std::vector<std::optional<int64_t>> index_reach(
    LLVMContextRef ctx, const std::string &ir_text, const std::string &function, unsigned index,
    const std::vector<unsigned> &params,
    const std::vector<std::pair<unsigned, int64_t>> &constants) {
  return index_reaches(ctx, ir_text, {ReachQuery{function, index, params, constants}}).front();
}

}  // namespace enzyme_py
