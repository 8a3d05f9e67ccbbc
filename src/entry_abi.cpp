#include "entry_abi.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "llvm_util.h"

namespace enzyme_py {
namespace {

bool is_aggregate(LLVMTypeRef type) {
  LLVMTypeKind kind = LLVMGetTypeKind(type);
  return kind == LLVMArrayTypeKind || kind == LLVMStructTypeKind;
}

unsigned members(LLVMTypeRef type) {
  return LLVMGetTypeKind(type) == LLVMArrayTypeKind ? LLVMGetArrayLength(type)
                                                    : LLVMCountStructElementTypes(type);
}

LLVMTypeRef member(LLVMTypeRef type, unsigned i) {
  return LLVMGetTypeKind(type) == LLVMArrayTypeKind ? LLVMGetElementType(type)
                                                    : LLVMStructGetTypeAtIndex(type, i);
}

}  // namespace

char slot_code(LLVMTypeRef type) {
  switch (LLVMGetTypeKind(type)) {
    case LLVMDoubleTypeKind: return slot::kDouble;
    case LLVMFloatTypeKind: return slot::kFloat;
    case LLVMPointerTypeKind: return slot::kPointer;
    case LLVMIntegerTypeKind:
      switch (LLVMGetIntTypeWidth(type)) {
        case 64: return slot::kI64;
        case 32: return slot::kI32;
        case 16: return slot::kI16;
        case 8: return slot::kI8;
        case 1: return slot::kBool;
        default: break;
      }
      break;
    default: break;
  }
  return 0;
}

LLVMValueRef EntryBuilder::load(LLVMTypeRef type, std::string &codes) {
  if (is_aggregate(type)) {
    LLVMValueRef agg = LLVMGetUndef(type);
    for (unsigned i = 0, n = members(type); i < n; ++i) {
      agg = LLVMBuildInsertValue(b_, agg, load(member(type, i), codes), i, "");
    }
    return agg;
  }
  return LLVMBuildLoad2(b_, type, slot(type, codes), "");
}

void EntryBuilder::store(LLVMValueRef value, LLVMTypeRef type, std::string &codes) {
  if (is_aggregate(type)) {
    for (unsigned i = 0, n = members(type); i < n; ++i) {
      store(LLVMBuildExtractValue(b_, value, i, ""), member(type, i), codes);
    }
    return;
  }
  LLVMBuildStore(b_, value, slot(type, codes));
}

LLVMValueRef EntryBuilder::slot(LLVMTypeRef type, std::string &codes) {
  char code = slot_code(type);
  if (!code) {
    throw std::runtime_error("parameter or result of unsupported LLVM type " + print_type(type));
  }
  codes.push_back(code);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx_);
  LLVMValueRef index = LLVMConstInt(i64, next_++, 0);
  LLVMValueRef at = LLVMBuildGEP2(b_, i64, slots_, &index, 1, "");
  return LLVMBuildBitCast(b_, at, LLVMPointerType(type, 0), "");
}

void add_entry_point(LLVMModuleRef mod, LLVMValueRef derivative, const std::string &entry_name,
                     std::string &in_slots, std::string &out_slots) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  // Only the entry stays visible; everything else may be inlined and dropped,
  // and objects of several derivatives never clash in the JIT.
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    if (!LLVMIsDeclaration(f)) LLVMSetLinkage(f, LLVMInternalLinkage);
  }
  for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g)) {
    size_t length = 0;
    const char *name = LLVMGetValueName2(g, &length);
    // LLVM's own (llvm.compiler.used, from an earlier vectorisation) keep theirs.
    if (length >= 5 && std::strncmp(name, "llvm.", 5) == 0) continue;
    if (!LLVMIsDeclaration(g)) LLVMSetLinkage(g, LLVMInternalLinkage);
  }
  LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(ctx), 0);
  LLVMTypeRef entry_type = LLVMFunctionType(LLVMVoidTypeInContext(ctx), &i8p, 1, 0);
  LLVMValueRef entry = LLVMAddFunction(mod, entry_name.c_str(), entry_type);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, entry, "entry"));
  LLVMValueRef slots = LLVMBuildBitCast(
      b, LLVMGetParam(entry, 0), LLVMPointerType(LLVMInt64TypeInContext(ctx), 0), "");
  EntryBuilder slots_io(ctx, b, slots);
  LLVMTypeRef dtype = LLVMGlobalGetValueType(derivative);
  std::vector<LLVMValueRef> call_args;
  try {
    for (unsigned i = 0, n = LLVMCountParams(derivative); i < n; ++i) {
      call_args.push_back(slots_io.load(LLVMTypeOf(LLVMGetParam(derivative, i)), in_slots));
    }
    LLVMValueRef result = LLVMBuildCall2(b, dtype, derivative, call_args.data(),
                                         call_args.size(), "");
    LLVMTypeRef rtype = LLVMGetReturnType(dtype);
    if (LLVMGetTypeKind(rtype) != LLVMVoidTypeKind) slots_io.store(result, rtype, out_slots);
    LLVMBuildRetVoid(b);
  } catch (...) {
    LLVMDisposeBuilder(b);
    throw;
  }
  LLVMDisposeBuilder(b);
}

}  // namespace enzyme_py
