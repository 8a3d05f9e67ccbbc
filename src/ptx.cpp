#include "ptx.h"

#include "kernel_ir.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <llvm-c/BitReader.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

extern "C" {
// NVPTX's target initialisers, exported by libLLVM (not in llvm-c/Target.h's
// all-targets macros when a build is configured per target).
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace enzyme_py {
namespace {

const char *const kTriple = "nvptx64-nvidia-cuda";

// LLVM intrinsics NVPTX cannot lower -> libdevice. (sqrt, fabs, fma, floor, ceil,
// trunc, rint, minnum and maxnum it lowers to instructions.)
struct MathName {
  const char *from;
  const char *to;
};
const MathName kIntrinsics[] = {
    {"llvm.sin.f64", "__nv_sin"},   {"llvm.cos.f64", "__nv_cos"},
    {"llvm.exp.f64", "__nv_exp"},   {"llvm.log.f64", "__nv_log"},
    {"llvm.pow.f64", "__nv_pow"},   {"llvm.log10.f64", "__nv_log10"},
    {"llvm.log2.f64", "__nv_log2"}, {"llvm.exp2.f64", "__nv_exp2"},
    {"llvm.round.f64", "__nv_round"},
    {"llvm.sin.f32", "__nv_sinf"},  {"llvm.cos.f32", "__nv_cosf"},
    {"llvm.exp.f32", "__nv_expf"},  {"llvm.log.f32", "__nv_logf"},
    {"llvm.pow.f32", "__nv_powf"},  {"llvm.log10.f32", "__nv_log10f"},
    {"llvm.log2.f32", "__nv_log2f"}, {"llvm.exp2.f32", "__nv_exp2f"},
    {"llvm.round.f32", "__nv_roundf"},
};

std::string take(char *msg) {
  std::string s = msg ? msg : "";
  LLVMDisposeMessage(msg);
  return s;
}

void strip_host_attributes(LLVMModuleRef mod) {
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    for (const char *name : {"target-cpu", "target-features", "tune-cpu"}) {
      LLVMRemoveStringAttributeAtIndex(fn, LLVMAttributeFunctionIndex, name,
                                       static_cast<unsigned>(std::strlen(name)));
    }
  }
}

void redirect(LLVMModuleRef mod, LLVMValueRef fn, const std::string &to) {
  LLVMValueRef target = LLVMGetNamedFunction(mod, to.c_str());
  if (!target) target = LLVMAddFunction(mod, to.c_str(), LLVMGlobalGetValueType(fn));
  LLVMReplaceAllUsesWith(fn, target);
}

// Math the kernel calls -> libdevice: the intrinsics above, and every C library
// function libdevice implements as __nv_<name> (sqrt, fabs, exp, sinf, ...).
void route_math_to_libdevice(LLVMModuleRef mod, LLVMModuleRef libdevice) {
  for (const MathName &m : kIntrinsics) {
    LLVMValueRef fn = LLVMGetNamedFunction(mod, m.from);
    if (fn && LLVMIsDeclaration(fn)) redirect(mod, fn, m.to);
  }
  std::vector<std::pair<LLVMValueRef, std::string>> found;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    size_t len = 0;
    const char *name = LLVMGetValueName2(fn, &len);
    std::string n(name, len);
    if (!LLVMIsDeclaration(fn) || n.rfind("llvm.", 0) == 0 || n.rfind("__nv_", 0) == 0) {
      continue;
    }
    LLVMValueRef device = LLVMGetNamedFunction(libdevice, ("__nv_" + n).c_str());
    if (device && !LLVMIsDeclaration(device)) found.emplace_back(fn, "__nv_" + n);
  }
  for (const auto &[fn, to] : found) redirect(mod, fn, to);
}

// CUDA's device heap has malloc and free but no realloc, with which Enzyme grows
// the tape of a loop whose trip count is not known on entry (Numba's range loops
// with a run-time bound, while loops). Where realloc is called, every block of
// the kernel gets a header with its size, so that realloc knows what to copy.
const char kSizedHeap[] = R"(
declare i8* @malloc(i64)
declare void @free(i8*)
declare void @llvm.memcpy.p0i8.p0i8.i64(i8*, i8*, i64, i1)

define i8* @__enzyme_py_device_malloc(i64 %n) {
entry:
  %total = add i64 %n, 16
  %block = call i8* @malloc(i64 %total)
  %failed = icmp eq i8* %block, null
  br i1 %failed, label %done, label %record
record:
  %size = bitcast i8* %block to i64*
  store i64 %n, i64* %size
  %data = getelementptr i8, i8* %block, i64 16
  br label %done
done:
  %result = phi i8* [ null, %entry ], [ %data, %record ]
  ret i8* %result
}

define void @__enzyme_py_device_free(i8* %p) {
entry:
  %none = icmp eq i8* %p, null
  br i1 %none, label %done, label %release
release:
  %block = getelementptr i8, i8* %p, i64 -16
  call void @free(i8* %block)
  br label %done
done:
  ret void
}

define i8* @__enzyme_py_device_realloc(i8* %p, i64 %n) {
entry:
  %fresh = call i8* @__enzyme_py_device_malloc(i64 %n)
  %none = icmp eq i8* %p, null
  %failed = icmp eq i8* %fresh, null
  %nothing = or i1 %none, %failed
  br i1 %nothing, label %done, label %move
move:
  %block = getelementptr i8, i8* %p, i64 -16
  %size = bitcast i8* %block to i64*
  %old = load i64, i64* %size
  %shrinks = icmp ult i64 %n, %old
  %count = select i1 %shrinks, i64 %n, i64 %old
  call void @llvm.memcpy.p0i8.p0i8.i64(i8* %fresh, i8* %p, i64 %count, i1 false)
  call void @__enzyme_py_device_free(i8* %p)
  br label %done
done:
  ret i8* %fresh
}
)";

void give_device_heap_realloc(LLVMContextRef ctx, LLVMModuleRef mod, const char *triple,
                              const std::string &layout) {
  LLVMValueRef realloc_fn = LLVMGetNamedFunction(mod, "realloc");
  if (!realloc_fn || !LLVMGetFirstUse(realloc_fn)) return;
  for (const char *name : {"malloc", "free", "realloc"}) {
    LLVMValueRef original = LLVMGetNamedFunction(mod, name);
    if (!original || !LLVMGetFirstUse(original)) continue;
    const std::string sized = std::string("__enzyme_py_device_") + name;
    LLVMValueRef replacement =
        LLVMAddFunction(mod, sized.c_str(), LLVMGlobalGetValueType(original));
    LLVMReplaceAllUsesWith(original, replacement);
  }
  LLVMMemoryBufferRef buffer =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(kSizedHeap, sizeof kSizedHeap - 1, "heap");
  LLVMModuleRef heap = nullptr;
  char *error = nullptr;
  if (LLVMParseIRInContext(ctx, buffer, &heap, &error)) {  // consumes the buffer
    throw std::runtime_error("the device heap's realloc does not parse: " + take(error));
  }
  LLVMSetTarget(heap, triple);
  LLVMSetDataLayout(heap, layout.c_str());
  if (LLVMLinkModules2(mod, heap)) {  // consumes heap
    throw std::runtime_error("linking the device heap's realloc failed");
  }
}

void mark_kernel(LLVMContextRef ctx, LLVMModuleRef mod, LLVMValueRef kernel) {
  LLVMValueRef ops[] = {
      kernel,
      LLVMMDStringInContext(ctx, "kernel", 6),
      LLVMConstInt(LLVMInt32TypeInContext(ctx), 1, 0),
  };
  LLVMAddNamedMetadataOperand(mod, "nvvm.annotations", LLVMMDNodeInContext(ctx, ops, 3));
}

}  // namespace

std::string emit_ptx(LLVMContextRef ctx, const std::string &ir_text, const std::string &kernel,
                     const std::string &libdevice_path, const std::string &cpu) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();

  ModuleOwner work;
  parse_kernel(ctx, ir_text, work);
  LLVMModuleRef mod = work.mod;
  char *error = nullptr;

  LLVMTargetRef target = nullptr;
  if (LLVMGetTargetFromTriple(kTriple, &target, &error)) {
    throw std::runtime_error("this LLVM has no NVPTX target: " + take(error));
  }
  LLVMTargetMachineRef machine =
      LLVMCreateTargetMachine(target, kTriple, cpu.c_str(), "", LLVMCodeGenLevelAggressive,
                              LLVMRelocDefault, LLVMCodeModelDefault);
  struct MachineOwner {
    LLVMTargetMachineRef tm;
    ~MachineOwner() { LLVMDisposeTargetMachine(tm); }
  } machine_owner{machine};
  LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(machine);
  std::string layout_text = take(LLVMCopyStringRepOfTargetData(layout));
  LLVMDisposeTargetData(layout);
  LLVMSetTarget(mod, kTriple);
  LLVMSetDataLayout(mod, layout_text.c_str());
  strip_host_attributes(mod);

  if (!libdevice_path.empty()) {
    LLVMMemoryBufferRef bc = nullptr;
    if (LLVMCreateMemoryBufferWithContentsOfFile(libdevice_path.c_str(), &bc, &error)) {
      throw std::runtime_error("cannot read libdevice " + libdevice_path + ": " + take(error));
    }
    ModuleOwner libdevice;
    bool failed = LLVMParseBitcodeInContext2(ctx, bc, &libdevice.mod);
    LLVMDisposeMemoryBuffer(bc);
    if (failed) throw std::runtime_error("libdevice does not parse: " + libdevice_path);
    LLVMSetTarget(libdevice.mod, kTriple);
    LLVMSetDataLayout(libdevice.mod, layout_text.c_str());
    route_math_to_libdevice(mod, libdevice.mod);
    LLVMModuleRef linked = libdevice.mod;
    libdevice.mod = nullptr;  // the linker consumes it
    if (LLVMLinkModules2(mod, linked)) throw std::runtime_error("linking libdevice failed");
  }

  give_device_heap_realloc(ctx, mod, kTriple, layout_text);

  LLVMValueRef entry = LLVMGetNamedFunction(mod, kernel.c_str());
  if (!entry || LLVMIsDeclaration(entry)) {
    throw std::runtime_error("no kernel named '" + kernel + "' in the module");
  }
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    if (!LLVMIsDeclaration(fn) && fn != entry) LLVMSetLinkage(fn, LLVMInternalLinkage);
  }
  for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g)) {
    if (!LLVMIsDeclaration(g)) LLVMSetLinkage(g, LLVMInternalLinkage);
  }
  mark_kernel(ctx, mod, entry);

  run_passes(mod, "function(nvvm-reflect),default<O2>", machine,
             "optimizing the kernel for NVPTX");
  // Anything still external and undefined cannot run on the device, except
  // the device heap of CUDA's runtime: what Enzyme's tape of a derivative
  // whose body has a loop is allocated from (ptxas resolves malloc and free;
  // realloc is enzyme_py's, above).
  std::vector<std::string> missing;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    size_t len = 0;
    const char *name = LLVMGetValueName2(fn, &len);
    std::string n(name, len);
    if (n == "malloc" || n == "free") continue;
    if (LLVMIsDeclaration(fn) && LLVMGetFirstUse(fn) && n.rfind("llvm.", 0) != 0) {
      missing.push_back(n);
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto &m : missing) list += (list.empty() ? "" : ", ") + m;
    throw std::runtime_error("the kernel calls functions that do not exist on the GPU: " + list);
  }
  LLVMMemoryBufferRef out = nullptr;
  if (LLVMTargetMachineEmitToMemoryBuffer(machine, mod, LLVMAssemblyFile, &error, &out)) {
    throw std::runtime_error("PTX code generation failed: " + take(error));
  }
  std::string ptx(LLVMGetBufferStart(out), LLVMGetBufferSize(out));
  LLVMDisposeMemoryBuffer(out);
  return ptx;
}

}  // namespace enzyme_py
