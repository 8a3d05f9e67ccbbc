// The entry ABI: every derivative is compiled behind `void entry(uint64_t *slots)`.
// Each scalar value or pointer the derivative takes occupies one 8-byte slot, in
// parameter order, and each value it returns one slot after those; aggregates
// (structs, arrays) are flattened. A slot code names the type of each slot.
//
// This is the one C++ statement of that convention (the slot codes, EntryBuilder,
// add_entry_point); the fast caller (caller.h) fills and reads slots by these codes.
// Python states the same convention in python/enzyme_py/_convention.py (SlotCode,
// StepKind, ResultShape): the letters below are shared with it.
#pragma once

#include <cstdint>
#include <string>

#include <llvm-c/Core.h>

namespace enzyme_py {

namespace slot {
constexpr char kDouble = 'd';
constexpr char kFloat = 'f';
constexpr char kI64 = 'q';
constexpr char kI32 = 'i';
constexpr char kI16 = 'h';
constexpr char kI8 = 'b';
constexpr char kBool = '?';
constexpr char kPointer = 'p';
}  // namespace slot

// The slot code of a scalar LLVM type, or 0 if it has none.
char slot_code(LLVMTypeRef type);

// Builds the body of `void entry(i8* slots)`: loads each parameter of the
// derivative from its slots and stores its result into the slots after them,
// recording the slot codes it used.
class EntryBuilder {
 public:
  EntryBuilder(LLVMContextRef ctx, LLVMBuilderRef b, LLVMValueRef slots)
      : ctx_(ctx), b_(b), slots_(slots) {}

  // A value of `type` from the next slots; appends their codes to `codes`.
  LLVMValueRef load(LLVMTypeRef type, std::string &codes);
  // `value` of `type` into the next slots; appends their codes to `codes`.
  void store(LLVMValueRef value, LLVMTypeRef type, std::string &codes);

 private:
  LLVMValueRef slot(LLVMTypeRef type, std::string &codes);

  LLVMContextRef ctx_;
  LLVMBuilderRef b_;
  LLVMValueRef slots_;
  uint64_t next_ = 0;
};

// Adds the entry point `void entry_name(i8* slots)` to `mod`: it loads each parameter
// of `derivative` from the slots, calls it, and stores its result into the slots after
// them; appends the codes of the input slots to `in_slots` and of the output slots to
// `out_slots`. Every other definition of `mod` becomes internal: only the entry stays
// visible (the rest may be inlined and dropped, and the objects of several
// derivatives never clash in the JIT). Throws std::runtime_error for a parameter or
// result without a slot code.
void add_entry_point(LLVMModuleRef mod, LLVMValueRef derivative, const std::string &entry_name,
                     std::string &in_slots, std::string &out_slots);

}  // namespace enzyme_py
