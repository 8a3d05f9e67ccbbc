#include "split_build.h"

#include "enzyme_hooks.h"
#include "llvm_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include <llvm-c/Core.h>
#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/InstrTypes.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Transforms/Utils/ValueMapper.h>

namespace enzyme_py {

namespace {

using llvm::Function;
using llvm::GlobalVariable;
using FunctionSet = std::set<const Function *>;

// The functions whose code uses `value`, through constants and variables'
// initializers too.
FunctionSet functions_using(const llvm::Value &value) {
  FunctionSet found;
  llvm::SmallVector<const llvm::Value *, 8> work{&value};
  llvm::SmallPtrSet<const llvm::Value *, 16> seen;
  while (!work.empty()) {
    const llvm::Value *next = work.pop_back_val();
    if (!seen.insert(next).second) continue;
    for (const llvm::User *user : next->users()) {
      if (const auto *inst = llvm::dyn_cast<llvm::Instruction>(user)) {
        found.insert(inst->getFunction());
      } else {
        work.push_back(user);  // a constant, or a variable it initializes
      }
    }
  }
  return found;
}

// What each part holds: its functions' definitions (the root's and those they call).
struct Plan {
  std::vector<FunctionSet> parts;            // the entry's first
  std::vector<const Function *> roots;       // reached only through their address
  std::map<const GlobalVariable *, size_t> home;  // a variable's part (not copied)
  std::set<const GlobalVariable *> shared;        // one such used by several parts
};

// A function's callees defined in the module, transitively, and itself.
FunctionSet called_from(const Function &root) {
  FunctionSet reached{&root};
  std::vector<const Function *> work{&root};
  while (!work.empty()) {
    const Function *fn = work.back();
    work.pop_back();
    for (const llvm::BasicBlock &block : *fn) {
      for (const llvm::Instruction &inst : block) {
        const auto *call = llvm::dyn_cast<llvm::CallBase>(&inst);
        const Function *callee = call ? call->getCalledFunction() : nullptr;
        if (callee && !callee->isDeclaration() && reached.insert(callee).second) {
          work.push_back(callee);
        }
      }
    }
  }
  return reached;
}

// Constants local to the module, and LLVM's lists: a copy in every part (unused ones
// dropped by its pipeline). Other variables live in one part.
bool copied_everywhere(const GlobalVariable &var) {
  return keeps_alive(var) || (var.isConstant() && var.hasLocalLinkage());
}

size_t size_of(const FunctionSet &functions) {
  size_t total = 0;
  for (const Function *fn : functions) total += instruction_count(*fn);
  return total;
}

std::optional<Plan> plan(const llvm::Module &mod, const Function &entry, unsigned threads) {
  Plan plan;
  for (const Function &fn : mod) {
    if (fn.isDeclaration() || &fn == &entry || fn.use_empty()) continue;
    bool called = false;
    bool taken = false;
    for (const llvm::Use &use : fn.uses()) {
      const auto *call = llvm::dyn_cast<llvm::CallBase>(use.getUser());
      (call && call->isCallee(&use) ? called : taken) = true;
    }
    // Copied into its callers' parts, it would also be defined in its own.
    if (called && taken) return std::nullopt;
    if (taken) plan.roots.push_back(&fn);
  }
  for (const GlobalVariable &var : mod.globals()) {
    if (!keeps_alive(var) || !var.hasInitializer()) continue;
    // llvm.used naming a definition would name it in every part.
    llvm::SmallVector<const llvm::Value *, 8> work{var.getInitializer()};
    while (!work.empty()) {
      const llvm::Value *next = work.pop_back_val();
      if (const auto *fn = llvm::dyn_cast<Function>(next)) {
        if (!fn->isDeclaration()) return std::nullopt;
      } else if (const auto *constant = llvm::dyn_cast<llvm::Constant>(next)) {
        for (const llvm::Value *operand : constant->operands()) work.push_back(operand);
      }
    }
  }
  if (plan.roots.empty()) return std::nullopt;
  std::vector<std::pair<size_t, FunctionSet>> rooted;
  for (const Function *root : plan.roots) {
    FunctionSet part = called_from(*root);
    rooted.emplace_back(size_of(part), std::move(part));
  }
  std::stable_sort(rooted.begin(), rooted.end(),
                   [](const auto &a, const auto &b) { return a.first > b.first; });
  const FunctionSet entry_part = called_from(entry);
  const size_t entry_size = size_of(entry_part);
  // As many parts as threads allow where each holds kMinPartInstructions: the roots'
  // parts dealt largest first to the least loaded, the entry's part fixed first.
  for (size_t count = std::min<size_t>(threads, rooted.size() + 1); count >= 2; --count) {
    std::vector<size_t> load(count, 0);
    std::vector<FunctionSet> parts(count);
    load[0] = entry_size;
    parts[0] = entry_part;
    for (const auto &[size, functions] : rooted) {
      auto least =
          static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      // Once the other parts are large enough, a small root joins the entry's part,
      // beside the launch that calls it, which `after` may drop: GMM prange's forward
      // chunk (545 instructions; ez.grad reads nothing of that launch) had made the
      // reverse chunk's part the longer, 155 against 100 ms of pipelines; now 125
      // against 130, the first call 630-635 -> 598-615 ms (2-core AMD EPYC).
      const bool filled = std::all_of(load.begin() + 1, load.end(),
                                      [](size_t l) { return l >= kMinPartInstructions; });
      if (filled && size < kMinPartInstructions) least = 0;
      load[least] += size;
      parts[least].insert(functions.begin(), functions.end());
    }
    if (*std::min_element(load.begin(), load.end()) >= kMinPartInstructions) {
      plan.parts = std::move(parts);
      break;
    }
  }
  if (plan.parts.empty()) return std::nullopt;
  // A function copied into two parts must be local to each (never two definitions
  // of one symbol in the JIT).
  std::map<const Function *, size_t> copies;
  for (const FunctionSet &part : plan.parts) {
    for (const Function *fn : part) {
      if (++copies[fn] > 1 && !fn->hasLocalLinkage()) return std::nullopt;
    }
  }
  for (const GlobalVariable &var : mod.globals()) {
    if (var.isDeclaration() || copied_everywhere(var)) continue;
    std::set<size_t> users;
    for (const Function *fn : functions_using(var)) {
      for (size_t index = 0; index < plan.parts.size(); ++index) {
        if (plan.parts[index].count(fn)) users.insert(index);
      }
    }
    plan.home[&var] = users.size() == 1 ? *users.begin() : 0;
    if (users.size() > 1) plan.shared.insert(&var);
  }
  return plan;
}

// Whether the part `index` of `plan` holds the definition of `value`.
bool defines(const Plan &plan, size_t index, const llvm::GlobalValue &value) {
  if (const auto *fn = llvm::dyn_cast<Function>(&value)) return plan.parts[index].count(fn) > 0;
  const auto *var = llvm::dyn_cast<GlobalVariable>(&value);
  if (!var || copied_everywhere(*var)) return true;
  const auto found = plan.home.find(var);
  return found == plan.home.end() || found->second == index;
}

// Internal functions and variables nothing uses, erased until none is left.
void erase_unused_internals(llvm::Module &mod) {
  for (bool erased = true; erased;) {
    erased = false;
    for (Function &fn : llvm::make_early_inc_range(mod)) {
      fn.removeDeadConstantUsers();
      if (fn.hasLocalLinkage() && fn.use_empty()) {
        fn.eraseFromParent();
        erased = true;
      }
    }
    for (GlobalVariable &var : llvm::make_early_inc_range(mod.globals())) {
      var.removeDeadConstantUsers();
      if (var.hasLocalLinkage() && var.use_empty()) {
        var.eraseFromParent();
        erased = true;
      }
    }
  }
}

// Whether a part still defines anything (a function, or a variable another part uses).
bool defines_anything(const llvm::Module &mod) {
  const auto defined = [](const llvm::GlobalValue &value) {
    return !value.isDeclaration() && !keeps_alive(value);
  };
  return std::any_of(mod.begin(), mod.end(), defined) ||
         std::any_of(mod.global_begin(), mod.global_end(), defined);
}

// One part on a thread of its own: its context, module and target machine.
struct Part {
  ContextOwner context{nullptr, LLVMContextDispose};
  ModuleOwner owner;
  MachineOwner machine{nullptr, LLVMDisposeTargetMachine};
  std::string code;  // bitcode until read back on its thread
  bool dropped = false;
  size_t instructions = 0;  // before the pipelines
  double pipelines_ms = 0;  // its own time in them, and in code generation (the log)
  double codegen_ms = 0;
};

double ms_between(std::chrono::steady_clock::time_point from,
                  std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// What each part cost (ENZYME_PY_LOG): the longest is the build's critical path.
void log_parts(const std::vector<Part> &parts) {
  std::string line = "[enzyme_py] split build:";
  for (size_t index = 0; index < parts.size(); ++index) {
    char text[160];
    std::snprintf(text, sizeof text, "%s part %zu (%zu instructions): pipelines %.1f ms, %s",
                  index ? ";" : "", index, parts[index].instructions, parts[index].pipelines_ms,
                  parts[index].dropped ? "dropped" : "code generation");
    line += text;
    if (!parts[index].dropped) {
      std::snprintf(text, sizeof text, " %.1f ms", parts[index].codegen_ms);
      line += text;
    }
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

std::optional<BuiltParts> build_in_parts(LLVMModuleRef mod_ref, LLVMTargetMachineRef machine,
                                         const std::string &entry_name, unsigned threads,
                                         const std::string &unique, const PartPipelines &how) {
  llvm::Module &mod = *llvm::unwrap(mod_ref);
  const Function *entry = mod.getFunction(entry_name);
  if (threads < 2 || !entry || !splittable(mod)) return std::nullopt;
  const std::optional<Plan> found = plan(mod, *entry, threads);
  if (!found) return std::nullopt;
  const Plan &plan = *found;
  const size_t count = plan.parts.size();

  // What the parts share keeps its name until code generation renames it.
  std::set<std::string> shared;
  for (const Function *root : plan.roots) {
    auto *fn = const_cast<Function *>(root);
    fn->setLinkage(llvm::GlobalValue::ExternalLinkage);
    fn->setVisibility(llvm::GlobalValue::DefaultVisibility);
    shared.insert(fn->getName().str());
  }
  for (const GlobalVariable *var : plan.shared) {
    auto *value = const_cast<GlobalVariable *>(var);
    value->setLinkage(llvm::GlobalValue::ExternalLinkage);
    value->setVisibility(llvm::GlobalValue::DefaultVisibility);
    shared.insert(value->getName().str());
  }
  std::vector<Part> parts(count);
  for (size_t index = 0; index < count; ++index) {
    parts[index].instructions = size_of(plan.parts[index]);
  }
  for (size_t index = 1; index < count; ++index) {
    llvm::ValueToValueMapTy map;
    std::unique_ptr<llvm::Module> clone =
        llvm::CloneModule(mod, map, [&](const llvm::GlobalValue *value) {
          return defines(plan, index, *value);
        });
    declare_elsewhere(*clone, shared);
    parts[index].code = module_bitcode(*clone);
  }
  for (Function &fn : mod) {
    if (!fn.isDeclaration() && !defines(plan, 0, fn)) fn.deleteBody();
  }
  for (GlobalVariable &var : mod.globals()) {
    if (var.isDeclaration() || defines(plan, 0, var)) continue;
    var.setInitializer(nullptr);
    var.setLinkage(llvm::GlobalValue::ExternalLinkage);
  }
  declare_elsewhere(mod, shared);
  auto module_of = [&](size_t index) {
    return index == 0 ? mod_ref : parts[index].owner.mod;
  };
  auto machine_of = [&](size_t index) {
    return index == 0 ? machine : parts[index].machine.get();
  };

  for (size_t pipeline = 0; pipeline < how.count; ++pipeline) {
    const std::shared_ptr<void> settings = how.settings(pipeline);
    on_every_part(count, [&](size_t index) {
      Part &part = parts[index];
      if (index > 0 && !part.context) {
        part.context.reset(LLVMContextCreate());
        part.owner.mod = read_bitcode(part.code, part.context.get());
        part.code.clear();
        part.machine.reset(how.make_machine());
      }
      const auto start = std::chrono::steady_clock::now();
      how.run(module_of(index), machine_of(index), pipeline);
      part.pipelines_ms += ms_between(start, std::chrono::steady_clock::now());
    });
  }
  how.after(mod_ref);

  // Roots that no part reaches any more (a launch `after` dropped: its chunks), and
  // what only they used, gone; a part left defining nothing is not compiled.
  for (bool pruned = true; pruned;) {
    pruned = false;
    for (size_t index = 0; index < count; ++index) {
      if (parts[index].dropped) continue;
      erase_unused_internals(*llvm::unwrap(module_of(index)));
    }
    std::set<std::string> reached;
    for (size_t index = 0; index < count; ++index) {
      if (parts[index].dropped) continue;
      for (const llvm::GlobalValue &value : llvm::unwrap(module_of(index))->global_values()) {
        if (value.isDeclaration() && !value.use_empty()) reached.insert(value.getName().str());
      }
    }
    for (size_t index = 0; index < count; ++index) {
      if (parts[index].dropped) continue;
      llvm::Module &part = *llvm::unwrap(module_of(index));
      for (const std::string &name : shared) {
        llvm::GlobalValue *value = part.getNamedValue(name);
        if (value && !value->isDeclaration() && !value->hasLocalLinkage() &&
            !reached.count(name)) {
          value->setLinkage(llvm::GlobalValue::InternalLinkage);
          pruned = true;
        }
      }
      if (index > 0 && !defines_anything(part)) parts[index].dropped = true;
    }
  }

  BuiltParts built;
  std::vector<size_t> kept;
  for (size_t index = 0; index < count; ++index) {
    if (!parts[index].dropped) kept.push_back(index);
  }
  // Each part's optimised IR printed (before code generation changes it) on the
  // thread that compiles it: not one after the other before any compiles.
  std::vector<std::string> texts(kept.size());
  const auto start = std::chrono::steady_clock::now();
  if (kept.size() == 1) {
    texts[0] = print_module(module_of(kept[0]));
    built.object = how.emit_alone(mod_ref);
  } else {
    std::vector<std::string> objects(kept.size());
    on_every_part(kept.size(), [&](size_t at) {
      const auto part_start = std::chrono::steady_clock::now();
      texts[at] = print_module(module_of(kept[at]));
      llvm::Module &part = *llvm::unwrap(module_of(kept[at]));
      for (const std::string &name : shared) {
        if (llvm::GlobalValue *value = part.getNamedValue(name)) {
          value->setName(name + "." + unique);
        }
      }
      objects[at] = how.emit(module_of(kept[at]), machine_of(kept[at]));
      parts[kept[at]].codegen_ms = ms_between(part_start, std::chrono::steady_clock::now());
    });
    built.object = bundle_objects(objects);
  }
  for (const std::string &text : texts) {
    if (!built.optimized_ir.empty()) built.optimized_ir += "\n";
    built.optimized_ir += text;
  }
  built.codegen_ms = ms_between(start, std::chrono::steady_clock::now());
  if (kept.size() == 1) parts[kept[0]].codegen_ms = built.codegen_ms;
  if (log_enabled()) log_parts(parts);
  return built;
}

}  // namespace enzyme_py
