#include "entry_abi.h"

#include <stdexcept>

namespace enzyme_py {
namespace {

std::string type_name(LLVMTypeRef type) {
  char *text = LLVMPrintTypeToString(type);
  std::string result = text;
  LLVMDisposeMessage(text);
  return result;
}

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
    throw std::runtime_error("parameter or result of unsupported LLVM type " + type_name(type));
  }
  codes.push_back(code);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx_);
  LLVMValueRef index = LLVMConstInt(i64, next_++, 0);
  LLVMValueRef at = LLVMBuildGEP2(b_, i64, slots_, &index, 1, "");
  return LLVMBuildBitCast(b_, at, LLVMPointerType(type, 0), "");
}

}  // namespace enzyme_py
