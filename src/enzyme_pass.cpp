#include "enzyme_pass.h"

#include <stdexcept>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/PassPlugin.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include "enzyme_plugin.h"
#include "isolation.h"
#include "rewrites.h"
#include "split_codegen.h"

namespace enzyme_py {
namespace {

// `__attribute__((annotate("enzyme_inactive")))` on a function (clang without
// Enzyme's clang plugin has no enzyme_inactive attribute): the string function
// attribute "enzyme_inactive" Enzyme reads, and noinline, as Enzyme's
// preserve-nvvm pass gives the functions an __enzyme_inactivefn global names.
void annotations_to_attributes(llvm::Module &mod) {
  llvm::GlobalVariable *annotations = mod.getGlobalVariable("llvm.global.annotations");
  if (!annotations || !annotations->hasInitializer()) return;
  auto *entries = llvm::dyn_cast<llvm::ConstantArray>(annotations->getInitializer());
  if (!entries) return;
  for (const llvm::Use &use : entries->operands()) {
    auto *entry = llvm::dyn_cast<llvm::ConstantStruct>(use.get());
    if (!entry || entry->getNumOperands() < 2) continue;
    auto *fn = llvm::dyn_cast<llvm::Function>(entry->getOperand(0)->stripPointerCasts());
    auto *text = llvm::dyn_cast<llvm::GlobalVariable>(entry->getOperand(1)->stripPointerCasts());
    if (!fn || !text || !text->hasInitializer()) continue;
    auto *data = llvm::dyn_cast<llvm::ConstantDataArray>(text->getInitializer());
    if (!data || !data->isCString() || data->getAsCString() != "enzyme_inactive") continue;
    fn->addFnAttr("enzyme_inactive");
    fn->removeFnAttr(llvm::Attribute::AlwaysInline);
    fn->addFnAttr(llvm::Attribute::NoInline);
  }
}

// In the child: the plugin's passes on `mod`, checked. Any failure is a message on
// stderr and a non-zero exit.
void run_plugin_passes(const std::string &plugin_path, llvm::Module &mod,
                       const std::string &passes) {
  llvm::Expected<llvm::PassPlugin> plugin = llvm::PassPlugin::Load(plugin_path);
  if (!plugin) throw std::runtime_error(llvm::toString(plugin.takeError()));
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb;
  plugin->registerPassBuilderCallbacks(pb);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  if (llvm::Error err = pb.parsePassPipeline(mpm, passes)) {
    throw std::runtime_error("the plugin cannot run -passes=" + passes + ": " +
                             llvm::toString(std::move(err)));
  }
  annotations_to_attributes(mod);
  prepare_for_enzyme(llvm::wrap(&mod), /*runtime_too=*/false);  // see rewrites.h
  mpm.run(mod, mam);
  drop_unsigned_wrap_of_negative_adds(llvm::wrap(&mod));  // see rewrites.h
  std::string verify;
  llvm::raw_string_ostream verify_os(verify);
  if (llvm::verifyModule(mod, &verify_os)) {
    throw std::runtime_error("Enzyme's pass left invalid IR: " + verify_os.str());
  }
}

// In the child: parse, run the passes, print.
std::string transform(const std::string &plugin_path, const std::string &ir_text,
                      const std::string &passes) {
  llvm::LLVMContext ctx;
  ctx.setOpaquePointers(false);
  llvm::SMDiagnostic diag;
  std::unique_ptr<llvm::Module> mod =
      llvm::parseIR(llvm::MemoryBufferRef(ir_text, "source"), diag, ctx);
  if (!mod) throw std::runtime_error("the IR does not parse: " + diag.getMessage().str());
  run_plugin_passes(plugin_path, *mod, passes);
  std::string out;
  llvm::raw_string_ostream os(out);
  mod->print(os, nullptr);
  return os.str();
}

// Enzyme's own reporting: an error it would hand to enzyme_py's handler (and
// carry on past) ends the child instead.
void report_in_child() {
  if (enzyme_loaded()) *enzyme_api().CustomErrorHandler = nullptr;
}

}  // namespace

std::string run_enzyme_pass(const std::string &plugin_path, const std::string &ir_text,
                            const std::string &passes) {
  auto build = [&] {
    Artifact art;
    art.optimized_ir = transform(plugin_path, ir_text, passes);
    return art;
  };
  try {
    return build_in_child("the module's Enzyme markers (-passes=" + passes + ")",
                          report_in_child, build, nullptr, nullptr)
        .optimized_ir;
  } catch (const std::exception &e) {
    // EnzymeFailure and BuildCrashed included: one kind for the caller.
    throw std::runtime_error(std::string("Enzyme's pass failed on the module: ") + e.what());
  }
}

LLVMModuleRef run_enzyme_pass_on(const std::string &plugin_path, LLVMModuleRef mod,
                                 const std::string &passes,
                                 const std::function<std::shared_ptr<void>()> &while_waiting) {
  // The child's copy of `mod` is its own: changed in place, sent back as bitcode.
  auto build = [&] {
    Artifact art;
    run_plugin_passes(plugin_path, *llvm::unwrap(mod), passes);
    art.optimized_ir = module_bitcode(*llvm::unwrap(mod));
    return art;
  };
  std::string code;
  try {
    // Never interrupted, as run_enzyme_pass.
    code = build_in_child("the module's Enzyme markers (-passes=" + passes + ")",
                          report_in_child, build, nullptr, while_waiting)
               .optimized_ir;
  } catch (const std::exception &e) {
    throw std::runtime_error(std::string("Enzyme's pass failed on the module: ") + e.what());
  }
  return read_bitcode(code, LLVMGetModuleContext(mod));
}

}  // namespace enzyme_py
