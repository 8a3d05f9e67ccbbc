#include "numba_rewrites.h"

#include "scratch_forwarding.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <llvm-c/IRReader.h>
#include <llvm-c/Linker.h>

#include "arena.h"
#include "index_signs.h"
#include "jit.h"
#include "numba_blas_ir.inc"
#include "strided_addresses.h"

namespace enzyme_py {

bool is_numba_allocator(const std::string &name) {
  return name == "NRT_MemInfo_alloc" || name == "NRT_MemInfo_alloc_safe" ||
         name == "NRT_MemInfo_alloc_aligned" || name == "NRT_MemInfo_alloc_safe_aligned" ||
         name == "enzyme_py.inactive.NRT_MemInfo_alloc_aligned";
}

namespace {

// visit(call, callee's name) for every call of a named function in `mod` (calls
// through pointers left out). visit may insert instructions after the call.
template <typename Visit>
void for_each_direct_call(LLVMModuleRef mod, Visit visit) {
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
      for (LLVMValueRef call = LLVMGetFirstInstruction(bb); call;
           call = LLVMGetNextInstruction(call)) {
        if (!LLVMIsACallInst(call)) continue;
        LLVMValueRef callee = LLVMGetCalledValue(call);
        if (!callee || !LLVMIsAFunction(callee)) continue;
        size_t length = 0;
        const char *chars = LLVMGetValueName2(callee, &length);
        visit(call, std::string(chars, length));
      }
    }
  }
}

// Numba reads a temporary's data pointer from its header, so LLVM (and Enzyme,
// which asks LLVM) cannot tell two temporaries apart: a store to one may change
// any other, and Enzyme caches every value read from them, even loop-invariant
// ones. Here the header comes from enzyme_py's arena (nrt_data_offset).
void compute_nrt_data_pointers(LLVMModuleRef mod) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMTypeRef i8 = LLVMInt8TypeInContext(ctx);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx);
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
  std::vector<LLVMValueRef> dead;
  for_each_direct_call(mod, [&](LLVMValueRef call, const std::string &name) {
    size_t align = 0;
    if (name == "NRT_MemInfo_alloc" || name == "NRT_MemInfo_alloc_safe") {
      align = 16;
    } else if (name == "NRT_MemInfo_alloc_aligned" || name == "NRT_MemInfo_alloc_safe_aligned") {
      LLVMValueRef a = LLVMGetOperand(call, 1);
      if (!LLVMIsAConstantInt(a)) return;
      align = static_cast<size_t>(LLVMConstIntGetZExtValue(a));
    } else {
      return;
    }
    const size_t offset = nrt_data_offset(align);
    if (!offset) return;
    for (LLVMUseRef u = LLVMGetFirstUse(call); u; u = LLVMGetNextUse(u)) {
      LLVMValueRef gep = LLVMGetUser(u);
      if (!LLVMIsAGetElementPtrInst(gep) || LLVMGetNumOperands(gep) != 2 ||
          LLVMGetOperand(gep, 0) != call || LLVMGetGEPSourceElementType(gep) != i8) {
        continue;
      }
      LLVMValueRef index = LLVMGetOperand(gep, 1);
      if (!LLVMIsAConstantInt(index) || LLVMConstIntGetZExtValue(index) != kMemInfoDataField) {
        continue;
      }
      for (LLVMUseRef gu = LLVMGetFirstUse(gep); gu; gu = LLVMGetNextUse(gu)) {
        LLVMValueRef cast = LLVMGetUser(gu);
        if (!LLVMIsABitCastInst(cast)) continue;
        for (LLVMUseRef cu = LLVMGetFirstUse(cast); cu; cu = LLVMGetNextUse(cu)) {
          LLVMValueRef load = LLVMGetUser(cu);
          if (!LLVMIsALoadInst(load) || LLVMGetVolatile(load) ||
              LLVMGetTypeKind(LLVMTypeOf(load)) != LLVMPointerTypeKind) {
            continue;
          }
          LLVMPositionBuilderBefore(b, load);
          LLVMValueRef at = LLVMConstInt(i64, offset, 0);
          LLVMValueRef data = LLVMBuildInBoundsGEP2(b, i8, call, &at, 1, "nrt.data");
          LLVMReplaceAllUsesWith(load, LLVMBuildBitCast(b, data, LLVMTypeOf(load), ""));
          dead.push_back(load);
        }
      }
    }
  });
  for (LLVMValueRef load : dead) LLVMInstructionEraseFromParent(load);
  LLVMDisposeBuilder(b);
}

// Numba checks each allocation for null and returns a MemoryError from there: in a
// loop that allocates (a temporary per prange iteration), one of the exits whose
// count no analysis computes, so Enzyme grows its caches of that loop by
// reallocation, a copy per doubling (GMM's prange body: 15% of its gradient's time
// in memmove; the size checks, the other exits, are moved out by unswitching).
// enzyme_py's allocators never return null to the code they serve: every call of
// generated code runs inside call_entry or a parfor worker's guard, where a failed
// allocation jumps out of the call (arena.h). The calls say so; the checks fold.
void allocations_never_null(LLVMModuleRef mod) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  const unsigned kind = LLVMGetEnumAttributeKindForName("nonnull", 7);
  LLVMAttributeRef nonnull = LLVMCreateEnumAttribute(ctx, kind, 0);
  for_each_direct_call(mod, [&](LLVMValueRef call, const std::string &name) {
    if (is_numba_allocator(name)) LLVMAddCallSiteAttribute(call, LLVMAttributeReturnIndex, nonnull);
  });
}

}  // namespace

const char *const kSimplifyPasses =
    "always-inline,"
    "function(sroa,early-cse<memssa>,simplifycfg,instcombine,loop(loop-rotate),"
    "loop-mssa(licm),jump-threading,loop-mssa(simple-loop-unswitch),"
    "enzyme-py-hoist-invariant-exits,gvn<no-load-pre>,instcombine,simplifycfg,"
    "loop(indvars,loop-deletion,loop-unroll-full),"
    "loop-mssa(licm),gvn<no-load-pre>,enzyme-py-fold-index-signs,instcombine,simplifycfg)";

namespace {

std::string name_of(LLVMValueRef value) {
  size_t length = 0;
  const char *chars = LLVMGetValueName2(value, &length);
  return std::string(chars, length);
}

// Whether `value`, its pointer casts and GEPs looked through, is the result of a
// Numba allocation call of this module (a temporary the function made).
bool is_temporary(LLVMValueRef value) {
  while (value && (LLVMIsABitCastInst(value) || LLVMIsAGetElementPtrInst(value) ||
                   (LLVMIsAConstantExpr(value) && LLVMGetConstOpcode(value) == LLVMBitCast))) {
    value = LLVMGetOperand(value, 0);
  }
  if (!value || !LLVMIsACallInst(value)) return false;
  LLVMValueRef callee = LLVMGetCalledValue(value);
  return callee && LLVMIsAFunction(callee) && is_numba_allocator(name_of(callee));
}

void add_string_attribute(LLVMValueRef fn, const char *attr) {
  LLVMContextRef ctx = LLVMGetModuleContext(LLVMGetGlobalParent(fn));
  LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                          LLVMCreateStringAttribute(ctx, attr, static_cast<unsigned>(std::strlen(attr)),
                                                    "", 0));
}

const char kUnwrap[] = "__excinfo_unwrap_args";

// The operand of `inst` at `k` if it is (a constant cast of) a function
// Numba made to unwrap an exception's run-time arguments, else null.
LLVMValueRef unwrap_function_at(LLVMValueRef inst, unsigned k) {
  LLVMValueRef op = LLVMGetOperand(inst, k);
  while (op && LLVMIsAConstantExpr(op) && LLVMGetNumOperands(op) > 0) op = LLVMGetOperand(op, 0);
  return op && LLVMIsAFunction(op) && name_of(op).rfind(kUnwrap, 0) == 0 ? op : nullptr;
}

// Whether a function of Numba's makes an exception only: it returns none (its
// return pointer is an i8**), takes integers besides its excinfo, and stores
// a Numba exception whose arguments are known at run time (a pointer to an
// __excinfo_unwrap_args function). ol_raise_with_shape_context, behind every
// slice and fancy-index assignment, is one.
bool only_raises(LLVMValueRef fn) {
  const unsigned n = LLVMCountParams(fn);
  if (n < 2) return false;
  LLVMTypeRef ret = LLVMTypeOf(LLVMGetParam(fn, 0));
  if (LLVMGetTypeKind(ret) != LLVMPointerTypeKind) return false;
  LLVMTypeRef inner = LLVMGetElementType(ret);
  if (LLVMGetTypeKind(inner) != LLVMPointerTypeKind ||
      LLVMGetTypeKind(LLVMGetElementType(inner)) != LLVMIntegerTypeKind) {
    return false;
  }
  for (unsigned k = 2; k < n; ++k) {
    if (LLVMGetTypeKind(LLVMTypeOf(LLVMGetParam(fn, k))) != LLVMIntegerTypeKind) return false;
  }
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst;
         inst = LLVMGetNextInstruction(inst)) {
      for (int k = 0, m = LLVMGetNumOperands(inst); k < m; ++k) {
        if (unwrap_function_at(inst, static_cast<unsigned>(k))) return true;
      }
    }
  }
  return false;
}

// The exception `fn` makes without its unwrap function (a null pointer): the
// exception's class and constant arguments stay (enzyme_py reads only those:
// raise_numba_error in frontends/numba.py), and Enzyme has no
// function pointer to make a shadow of (that function calls the variadic
// PyTuple_Pack).
void drop_unwrap_functions(LLVMValueRef fn) {
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
    for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst;
         inst = LLVMGetNextInstruction(inst)) {
      if (LLVMIsACallInst(inst)) continue;
      for (int k = 0, m = LLVMGetNumOperands(inst); k < m; ++k) {
        const unsigned at = static_cast<unsigned>(k);
        if (unwrap_function_at(inst, at)) {
          LLVMSetOperand(inst, at, LLVMConstNull(LLVMTypeOf(LLVMGetOperand(inst, at))));
        }
      }
    }
  }
}

// Whether `fn` is defined and returns at once (NRT_decref, emptied: the frontend's
// _without_reference_counting).
bool does_nothing(LLVMValueRef fn) {
  LLVMBasicBlockRef entry = LLVMGetFirstBasicBlock(fn);
  if (!entry || LLVMGetNextBasicBlock(entry)) return false;
  LLVMValueRef first = LLVMGetFirstInstruction(entry);
  return first && LLVMIsAReturnInst(first) && LLVMGetNumOperands(first) == 0;
}

// Calls of an emptied NRT_decref on the temporaries a function allocates are
// erased: Enzyme must assume such a call writes the temporary's memory after every
// read of it, so each value read from a table made before a loop (GMM's exp of the
// log-diagonal) was cached once per iteration instead of read again in the reverse
// pass (+19 MiB of tape). Their memory lives in enzyme_py's arena until the
// derivative call ends. Releases of other arrays stay: erasing them all made
// Enzyme v0.0.289 refuse np.linalg.solve used twice ("illegal type analysis").
void drop_releases_of_temporaries(LLVMModuleRef mod) {
  std::vector<LLVMValueRef> dead;
  for_each_direct_call(mod, [&](LLVMValueRef call, const std::string &name) {
    // does_nothing: a release that frees (outside derivatives) stays.
    if (name == "NRT_decref" && does_nothing(LLVMGetCalledValue(call)) &&
        is_temporary(LLVMGetOperand(call, 0))) {
      dead.push_back(call);
    }
  });
  for (LLVMValueRef call : dead) LLVMInstructionEraseFromParent(call);
}

}  // namespace

int keep_exception_helpers_inactive(LLVMModuleRef mod) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  const unsigned never = LLVMGetEnumAttributeKindForName("noinline", 8);
  const unsigned nofree = LLVMGetEnumAttributeKindForName("nofree", 6);
  int count = 0;
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    if (LLVMIsDeclaration(fn) || LLVMGetLinkage(fn) != LLVMLinkOnceODRLinkage) continue;
    if (!only_raises(fn)) continue;
    // nofree too: otherwise Enzyme asks for a "nofree" twin of every function the
    // helper calls, which it cannot make of a variadic declaration.
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, never, 0));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, nofree, 0));
    add_string_attribute(fn, "enzyme_inactive");
    drop_unwrap_functions(fn);
    ++count;
  }
  // The scratch copy Numba makes of an assignment's source when it may overlap the
  // destination, and an exception's run-time arguments: malloc and free, which
  // Enzyme knows (their shadows), instead of Numba's NRT_Allocate and NRT_Free
  // (the same functions, with statistics).
  LLVMValueRef nrt_allocate = LLVMGetNamedFunction(mod, "NRT_Allocate");
  LLVMValueRef nrt_free = LLVMGetNamedFunction(mod, "NRT_Free");
  if (!nrt_allocate && !nrt_free) return count;
  LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(ctx), 0);
  LLVMTypeRef i64 = LLVMInt64TypeInContext(ctx);
  auto declare = [mod](const char *name, LLVMTypeRef type) {
    LLVMValueRef f = LLVMGetNamedFunction(mod, name);
    return f ? f : LLVMAddFunction(mod, name, type);
  };
  LLVMValueRef malloc_fn = nullptr;
  LLVMValueRef free_fn = nullptr;
  LLVMTypeRef malloc_type = LLVMFunctionType(i8p, &i64, 1, 0);
  LLVMTypeRef free_type = LLVMFunctionType(LLVMVoidTypeInContext(ctx), &i8p, 1, 0);
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    if (LLVMIsDeclaration(fn)) continue;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
      for (LLVMValueRef call = LLVMGetFirstInstruction(bb); call;
           call = LLVMGetNextInstruction(call)) {
        if (!LLVMIsACallInst(call)) continue;
        LLVMValueRef callee = LLVMGetCalledValue(call);
        const unsigned last = static_cast<unsigned>(LLVMGetNumOperands(call) - 1);
        if (callee && callee == nrt_allocate &&
            LLVMGlobalGetValueType(callee) == malloc_type) {
          if (!malloc_fn) malloc_fn = declare("malloc", malloc_type);
          LLVMSetOperand(call, last, malloc_fn);
        } else if (callee && callee == nrt_free && LLVMGlobalGetValueType(callee) == free_type) {
          if (!free_fn) free_fn = declare("free", free_type);
          LLVMSetOperand(call, last, free_fn);
        }
      }
    }
  }
  return count;
}

int define_numba_blas(LLVMModuleRef mod) {
  static const char *const kHelpers[] = {"numba_xxdot", "numba_xxgemv", "numba_xxgemm",
                                         "numba_xxnrm2"};
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMBuilderRef b = nullptr;
  int count = 0;
  for (const char *helper : kHelpers) {
    LLVMValueRef decl = LLVMGetNamedFunction(mod, helper);
    if (!decl || !LLVMIsDeclaration(decl)) continue;
    // Only direct calls for real kinds ('d', 's'): complex ones keep Numba's helper
    // (and Enzyme's error).
    std::vector<LLVMValueRef> calls;
    bool all = true;
    for (LLVMUseRef u = LLVMGetFirstUse(decl); u; u = LLVMGetNextUse(u)) {
      LLVMValueRef call = LLVMGetUser(u);
      if (!LLVMIsACallInst(call) || LLVMGetCalledValue(call) != decl) {
        all = false;
        break;
      }
      LLVMValueRef kind = LLVMGetOperand(call, 0);
      const unsigned long long k =
          LLVMIsAConstantInt(kind) ? LLVMConstIntGetZExtValue(kind) : 0;
      if (k != 'd' && k != 's') {
        all = false;
        break;
      }
      calls.push_back(call);
    }
    if (!all || calls.empty()) continue;
    const std::string name = std::string("enzyme_py_") + helper;
    LLVMValueRef def = LLVMGetNamedFunction(mod, name.c_str());
    if (!def || LLVMIsDeclaration(def)) {
      LLVMMemoryBufferRef buffer = LLVMCreateMemoryBufferWithMemoryRange(
          kNumbaBlasIR, sizeof kNumbaBlasIR - 1, "numba_blas", 0);
      LLVMModuleRef blas = nullptr;
      char *error = nullptr;
      if (LLVMParseIRInContext(ctx, buffer, &blas, &error)) {
        std::string text = error ? error : "";
        LLVMDisposeMessage(error);
        throw std::runtime_error("enzyme_py's BLAS loops do not parse: " + text);
      }
      LLVMSetTarget(blas, LLVMGetTarget(mod));
      LLVMSetDataLayout(blas, LLVMGetDataLayoutStr(mod));
      if (LLVMLinkModules2(mod, blas)) {
        throw std::runtime_error("enzyme_py's BLAS loops do not link with Numba's module");
      }
      // Defined with external linkage, so that the linker takes them all; then
      // linkonce_odr, as what Numba links in: inlined, and private to this module.
      for (const char *h : kHelpers) {
        LLVMValueRef f = LLVMGetNamedFunction(mod, (std::string("enzyme_py_") + h).c_str());
        if (f) LLVMSetLinkage(f, LLVMLinkOnceODRLinkage);
      }
      def = LLVMGetNamedFunction(mod, name.c_str());
      if (!def) throw std::runtime_error("no " + name + " after linking");
    }
    LLVMTypeRef type = LLVMGlobalGetValueType(def);
    const unsigned n = LLVMCountParamTypes(type);
    std::vector<LLVMTypeRef> params(n);
    LLVMGetParamTypes(type, params.data());
    if (!b) b = LLVMCreateBuilderInContext(ctx);
    for (LLVMValueRef call : calls) {
      if (static_cast<unsigned>(LLVMGetNumArgOperands(call)) != n) continue;
      LLVMPositionBuilderBefore(b, call);
      std::vector<LLVMValueRef> args(n);
      for (unsigned k = 0; k < n; ++k) {
        LLVMValueRef arg = LLVMGetOperand(call, k);
        if (LLVMTypeOf(arg) != params[k]) arg = LLVMBuildPointerCast(b, arg, params[k], "");
        args[k] = arg;
      }
      LLVMValueRef now = LLVMBuildCall2(b, type, def, args.data(), n, "");
      LLVMReplaceAllUsesWith(call, now);
      LLVMInstructionEraseFromParent(call);
      ++count;
    }
  }
  if (b) LLVMDisposeBuilder(b);
  return count;
}

void simplify_for_enzyme(LLVMModuleRef mod, const HostJit &jit) {
  keep_exception_helpers_inactive(mod);
  assume_signs_in_callees(*llvm::unwrap(mod));
  define_numba_blas(mod);
  compute_nrt_data_pointers(mod);
  allocations_never_null(mod);
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  const unsigned always = LLVMGetEnumAttributeKindForName("alwaysinline", 12);
  const unsigned never = LLVMGetEnumAttributeKindForName("noinline", 8);
  // Only definitions are inlined; custom rules (attached later, by the engine)
  // are for the external functions these call, which stay calls.
  for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
    if (LLVMIsDeclaration(fn) || LLVMGetLinkage(fn) != LLVMLinkOnceODRLinkage) continue;
    if (LLVMGetEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, never)) continue;
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(ctx, always, 0));
  }
  jit.prepare(mod);
  jit.optimize(mod, kSimplifyPasses);
  addresses_from_pointers(mod);
  drop_releases_of_temporaries(mod);
  jit.optimize(mod, std::string("function(loop-simplify,") + kForwardScratchStores + ")");
}

}  // namespace enzyme_py
