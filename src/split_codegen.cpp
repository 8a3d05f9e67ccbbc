#include "split_codegen.h"

#include "llvm_util.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <llvm-c/BitReader.h>
#include <llvm-c/BitWriter.h>
#include <llvm-c/Core.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Transforms/Utils/ValueMapper.h>

namespace enzyme_py {

size_t instruction_count(const llvm::Function &fn) {
  size_t count = 0;
  for (const llvm::BasicBlock &block : fn) count += block.size();
  return count;
}

// The vectoriser's libmvec functions: never code or data.
bool keeps_alive(const llvm::GlobalValue &value) {
  return value.getName() == "llvm.used" || value.getName() == "llvm.compiler.used";
}

bool splittable(const llvm::Module &mod) {
  if (!mod.alias_empty() || !mod.ifunc_empty()) return false;
  for (const llvm::GlobalVariable &var : mod.globals()) {
    if (keeps_alive(var)) continue;
    if (var.hasAppendingLinkage() || var.isThreadLocal() || var.hasComdat()) return false;
  }
  for (const llvm::Function &fn : mod) {
    if (fn.hasComdat()) return false;
    // A block's address (computed goto) names its function: one module only.
    for (const llvm::BasicBlock &block : fn) {
      if (block.hasAddressTaken()) return false;
    }
  }
  return true;
}

void declare_elsewhere(llvm::Module &mod, const std::set<std::string> &renamed) {
  for (const std::string &name : renamed) {
    llvm::GlobalValue *value = mod.getNamedValue(name);
    if (value && value->isDeclaration()) value->setDSOLocal(false);
  }
}

std::string module_bitcode(llvm::Module &mod) {
  LLVMMemoryBufferRef buffer = LLVMWriteBitcodeToMemoryBuffer(llvm::wrap(&mod));
  std::string bytes(LLVMGetBufferStart(buffer), LLVMGetBufferSize(buffer));
  LLVMDisposeMemoryBuffer(buffer);
  return bytes;
}

LLVMModuleRef read_bitcode(const std::string &code, LLVMContextRef context) {
  LLVMModuleRef mod = nullptr;
  LLVMMemoryBufferRef buffer =
      LLVMCreateMemoryBufferWithMemoryRange(code.data(), code.size(), "part", 0);
  const bool failed = LLVMParseBitcodeInContext2(context, buffer, &mod);
  LLVMDisposeMemoryBuffer(buffer);
  if (failed) throw std::runtime_error("a split part of the derivative did not read back");
  return mod;
}

namespace {

constexpr char kBundleMagic[8] = {'\x7f', 'E', 'Z', 'P', 'Y', 'O', 'B', 'J'};

// The part of each defined function (0 .. parts-1), or an empty map where no split
// into two or more parts of kMinPartInstructions each exists.
std::unordered_map<const llvm::Function *, unsigned> deal(const llvm::Module &mod,
                                                          unsigned threads) {
  std::vector<std::pair<size_t, const llvm::Function *>> sized;
  for (const llvm::Function &fn : mod) {
    if (!fn.isDeclaration()) sized.emplace_back(instruction_count(fn), &fn);
  }
  std::stable_sort(sized.begin(), sized.end(),
                   [](const auto &a, const auto &b) { return a.first > b.first; });
  for (unsigned parts = std::min<size_t>(threads, sized.size()); parts >= 2; --parts) {
    std::vector<size_t> load(parts, 0);
    std::unordered_map<const llvm::Function *, unsigned> part;
    for (const auto &[size, fn] : sized) {
      const auto least = static_cast<unsigned>(
          std::min_element(load.begin(), load.end()) - load.begin());
      load[least] += size;
      part[fn] = least;
    }
    if (*std::min_element(load.begin(), load.end()) >= kMinPartInstructions) return part;
  }
  return {};
}

// Internal symbols made external (and unique in the JIT): the parts reach each other's.
std::set<std::string> externalize(llvm::Module &mod, const std::string &unique) {
  std::set<std::string> renamed;
  auto make_external = [&](llvm::GlobalValue &value) {
    if (value.isDeclaration() || !value.hasLocalLinkage()) return;
    const std::string base = value.hasName() ? value.getName().str() : "__enzyme_py_unnamed";
    value.setName(base + "." + unique);  // LLVM appends a number if taken
    value.setLinkage(llvm::GlobalValue::ExternalLinkage);
    value.setVisibility(llvm::GlobalValue::DefaultVisibility);
    renamed.insert(value.getName().str());
  };
  for (llvm::Function &fn : mod) make_external(fn);
  for (llvm::GlobalVariable &var : mod.globals()) make_external(var);
  return renamed;
}

// One part's object, in a context and with a target machine of its own (each
// disposed on every way out; the module, owned inside the context, before it).
std::string emit_part(const std::string &code, const EmitObject &emit,
                      const MakeMachine &make_machine) {
  const ContextOwner context(LLVMContextCreate(), LLVMContextDispose);
  ModuleOwner part(read_bitcode(code, context.get()));
  const MachineOwner machine(make_machine(), LLVMDisposeTargetMachine);
  return emit(part.mod, machine.get());
}

void put_u64(std::string &out, uint64_t value) {
  char bytes[8];
  std::memcpy(bytes, &value, sizeof bytes);
  out.append(bytes, sizeof bytes);
}

}  // namespace

std::string bundle_objects(const std::vector<std::string> &objects) {
  std::string out(kBundleMagic, sizeof kBundleMagic);
  put_u64(out, objects.size());
  for (const std::string &object : objects) {
    put_u64(out, object.size());
    out += object;
  }
  return out;
}

std::string emit_split(LLVMModuleRef mod_ref, LLVMTargetMachineRef machine, unsigned threads,
                       const std::string &unique, const EmitObject &emit,
                       const MakeMachine &make_machine) {
  llvm::Module &mod = *llvm::unwrap(mod_ref);
  const auto part = threads >= 2 && splittable(mod)
                        ? deal(mod, threads)
                        : std::unordered_map<const llvm::Function *, unsigned>{};
  if (part.empty()) return emit(mod_ref, machine);
  unsigned parts = 0;
  for (const auto &entry : part) parts = std::max(parts, entry.second + 1);
  // Names, not pointers, across the clones.
  const std::set<std::string> renamed = externalize(mod, unique);
  std::unordered_map<std::string, unsigned> part_of;
  for (const auto &[fn, index] : part) part_of[fn->getName().str()] = index;
  auto in_part = [&](const llvm::GlobalValue *value, unsigned index) {
    const auto *fn = llvm::dyn_cast<llvm::Function>(value);
    if (!fn) return index == 0 || keeps_alive(*value);  // variables: the first part
    const auto found = part_of.find(fn->getName().str());
    return found != part_of.end() && found->second == index;
  };
  std::vector<std::string> codes;
  for (unsigned index = 1; index < parts; ++index) {
    llvm::ValueToValueMapTy map;
    std::unique_ptr<llvm::Module> clone = llvm::CloneModule(
        mod, map, [&](const llvm::GlobalValue *value) { return in_part(value, index); });
    declare_elsewhere(*clone, renamed);
    codes.push_back(module_bitcode(*clone));
  }
  for (llvm::Function &fn : mod) {
    if (!fn.isDeclaration() && !in_part(&fn, 0)) fn.deleteBody();
  }
  declare_elsewhere(mod, renamed);

  std::vector<std::string> objects(parts);
  on_every_part(parts, [&](size_t index) {
    objects[index] = index == 0 ? emit(mod_ref, machine)
                                : emit_part(codes[index - 1], emit, make_machine);
  });
  return bundle_objects(objects);
}

std::vector<std::string_view> bundled_objects(const std::string &object) {
  if (object.size() < sizeof kBundleMagic ||
      std::memcmp(object.data(), kBundleMagic, sizeof kBundleMagic) != 0) {
    return {std::string_view(object)};
  }
  size_t at = sizeof kBundleMagic;
  auto take_u64 = [&]() {
    if (object.size() - at < 8) throw std::runtime_error("a damaged object bundle");
    uint64_t value = 0;
    std::memcpy(&value, object.data() + at, 8);
    at += 8;
    return value;
  };
  const uint64_t count = take_u64();
  std::vector<std::string_view> objects;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t size = take_u64();
    if (object.size() - at < size) throw std::runtime_error("a damaged object bundle");
    objects.emplace_back(object.data() + at, size);
    at += size;
  }
  if (at != object.size() || objects.empty()) {
    throw std::runtime_error("a damaged object bundle");
  }
  return objects;
}

}  // namespace enzyme_py
