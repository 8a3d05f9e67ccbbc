"""The PTX toolchain: the GPU entry around a per-index body, the PTX target for a
GPU's architecture, CUDA's libdevice (math functions) and ptxas (PTX to a cubin)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from enzyme_py import _state
from enzyme_py.offload._devices import Device

GPU_KERNEL = "__enzyme_py_kernel"
_SREGS = ("tid.x", "ntid.x", "ctaid.x")


def gpu_entry(body: Any) -> str:
    """``__enzyme_py_kernel(i64 n, *rest)``: one index per GPU thread, body(i, *rest)."""
    info = next(i for i in body.module.functions() if i["name"] == body.name)
    types = info["params"]
    rest = [f"{t} %p{k}" for k, t in enumerate(types[1:], start=1)]
    text = body.module.ir()
    declarations = [
        f"declare i32 @llvm.nvvm.read.ptx.sreg.{r}()"
        for r in _SREGS
        if f"@llvm.nvvm.read.ptx.sreg.{r}(" not in text
    ]
    call_args = ", ".join(["i64 %i", *(f"{t} %p{k}" for k, t in enumerate(types[1:], start=1))])
    return "\n".join(
        [
            *declarations,
            f"define void @{GPU_KERNEL}(i64 %n{''.join(', ' + r for r in rest)}) {{",
            "entry:",
            "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
            "  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()",
            "  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
            "  %tid64 = zext i32 %tid to i64",
            "  %ntid64 = zext i32 %ntid to i64",
            "  %ctaid64 = zext i32 %ctaid to i64",
            "  %base = mul i64 %ctaid64, %ntid64",
            "  %i = add i64 %base, %tid64",
            "  %inside = icmp slt i64 %i, %n",
            "  br i1 %inside, label %run, label %done",
            "run:",
            f"  call {info['ret']} @{body.name}({call_args})",
            "  br label %done",
            "done:",
            "  ret void",
            "}",
        ]
    )


def gpu_arch(device: Device) -> str:
    """The ptxas target for launches on ``device``: ENZYME_PY_GPU_ARCH when set, else
    the architecture the driver reports, else sm_90 (H100/H200)."""
    return os.environ.get("ENZYME_PY_GPU_ARCH") or device.arch or "sm_90"


#: The newest target LLVM 15's NVPTX backend knows; ptxas and the driver take its PTX
#: to newer GPUs.
NEWEST_PTX_TARGET = 86


def ptx_target(arch: str) -> str:
    """The PTX target for a GPU of ``arch``: the GPU's own, up to what LLVM 15 knows."""
    try:
        number = int(arch.removeprefix("sm_"))
    except ValueError:
        return arch  # not a number: let ptxas name the problem
    return f"sm_{min(number, NEWEST_PTX_TARGET)}"


def _from_nvcc_wheel(relative: str) -> str:
    """A file of NVIDIA's ``nvidia-cuda-nvcc-cu12`` wheel (ptxas, libdevice: the
    ``cuda`` extra), or "" when it is not installed."""
    from importlib import metadata

    try:
        found = metadata.distribution("nvidia-cuda-nvcc-cu12").locate_file(
            f"nvidia/cuda_nvcc/{relative}"
        )
    except metadata.PackageNotFoundError:
        return ""
    return str(found) if os.path.isfile(str(found)) else ""


def libdevice() -> str:
    """CUDA's libdevice bitcode (math functions for the GPU), or "" if not found."""
    candidates = [os.environ.get("ENZYME_PY_LIBDEVICE", "")]
    candidates += [
        "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc",
        "/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc",
        _from_nvcc_wheel("nvvm/libdevice/libdevice.10.bc"),
    ]
    return next((c for c in candidates if c and os.path.isfile(c)), "")


def ptxas() -> str:
    found = (
        shutil.which("ptxas")
        or ("/usr/local/cuda/bin/ptxas" if os.path.isfile("/usr/local/cuda/bin/ptxas") else "")
        or _from_nvcc_wheel("bin/ptxas")
    )
    if not found:
        raise RuntimeError(
            "CUDA's ptxas is needed to assemble PTX and was not found (install the CUDA "
            "toolkit, or enzyme_py's cuda extra: pip install 'enzyme_py[cuda]')"
        )
    return found


def emit(per_index: Any, arch: str) -> str:
    """PTX of ``__enzyme_py_kernel(n, *args)`` around ``per_index`` (what runs per
    index), for the PTX target of ``arch``."""
    text = per_index.module.ir() + "\n" + gpu_entry(per_index) + "\n"
    # LLVM 15 knows architectures up to sm_86; PTX for it runs on newer GPUs.
    target = ptx_target(arch)
    return str(_state.native.emit_ptx(text, GPU_KERNEL, libdevice(), target))


def assemble(ptx: str, arch: str, name: str) -> bytes:
    """``ptx`` assembled by CUDA's ptxas for ``arch``; its errors name kernel ``name``."""
    found = ptxas()
    with tempfile.TemporaryDirectory(prefix="enzyme_py_ptx_") as tmp:
        source = os.path.join(tmp, "kernel.ptx")
        target = os.path.join(tmp, "kernel.cubin")
        with open(source, "w") as f:
            f.write(ptx)
        proc = subprocess.run(
            [found, f"-arch={arch}", "-o", target, source],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ptxas failed for {name}:\n{proc.stderr.strip()}")
        with open(target, "rb") as f:
            return f.read()
