"""What builds the kernels and reads them back: the include path (asynccopy's headers, CCCL, the CUDA
runtime headers), the NVRTC version and the archs it supports, the toolchain's versions, and SASS by
cuobjdump (no GPU needed)."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from . import device
from .device import parse_arch
from .errors import ArgumentError, CompileError


def kernel_dir() -> Path:
    return Path(str(resources.files("asynccopy") / "kernels"))


def read_kernel(name: str | Path) -> str:
    """The text of a kernel file: a name in ``asynccopy/kernels`` (``"stream.cu"``) or a path of your own."""
    path = Path(name)
    return (path if path.is_absolute() else kernel_dir() / path).read_text()


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """asynccopy's headers, then CCCL (libcu++), then the CUDA runtime headers (cooperative_groups)."""
    import cuda.pathfinder as pathfinder

    found = [str(kernel_dir() / "include")]
    for lib, package in (("cccl", "nvidia-cuda-cccl"), ("cudart", "nvidia-cuda-runtime")):
        path = pathfinder.find_nvidia_header_directory(lib)
        if path is None:
            raise CompileError(f"{lib} headers not found: install {package} (pip install {package})")
        found.append(str(path))
    return tuple(found)


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"nvrtcVersion failed: {err}")
    return int(major), int(minor)


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple[str, ...]:
    """The archs this NVRTC compiles for (``sm_75``, ..., ``sm_90a``, ...)."""
    from cuda.bindings import nvrtc

    err, archs = nvrtc.nvrtcGetSupportedArchs()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"nvrtcGetSupportedArchs failed: {err}")
    return tuple(device.arch_of_cc((a // 10, a % 10)) for a in archs)


def check_arch(arch: str) -> str:
    """``arch`` if this NVRTC can compile for it, else ArgumentError listing the ones it can."""
    target = parse_arch(arch)
    cc = device.cc_of_arch(target)
    if all(device.cc_of_arch(a) != cc for a in supported_archs()):
        raise ArgumentError(f"NVRTC {'.'.join(map(str, nvrtc_version()))} cannot compile for {target}; it supports "
                            f"{', '.join(supported_archs())}")
    return target


def _version_macro(header: Path, macro: str) -> str | None:
    try:
        for line in header.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "#define" and parts[1] == macro:
                return parts[2]
    except OSError:
        return None
    return None


@functools.lru_cache(maxsize=1)
def toolchain() -> dict[str, str]:
    """Versions of what builds the kernels: NVRTC, CCCL, the CUDA runtime headers, cuda.core."""
    import cuda.core

    _, cccl, cudart = include_dirs()
    cccl_v = _version_macro(Path(cccl) / "cuda" / "std" / "__cccl" / "version.h", "CCCL_VERSION")
    cudart_v = _version_macro(Path(cudart) / "cuda_runtime_api.h", "CUDART_VERSION")

    def number(v: str | None) -> int | None:
        return int(v) if v is not None and v.isdigit() else None

    cccl_n, cudart_n = number(cccl_v), number(cudart_v)
    major, minor = nvrtc_version()
    return {
        "nvrtc": f"{major}.{minor}",
        "cccl": "unknown" if cccl_n is None else f"{cccl_n // 1000000}.{cccl_n // 1000 % 1000}.{cccl_n % 1000}",
        "cuda_runtime_headers": "unknown" if cudart_n is None else f"{cudart_n // 1000}.{cudart_n % 1000 // 10}",
        "cuda_core": getattr(cuda.core, "__version__", "unknown"),
    }


# SASS


def cuobjdump() -> str:
    import cuda.pathfinder as pathfinder

    tool = pathfinder.find_nvidia_binary_utility("cuobjdump") or shutil.which("cuobjdump")
    if tool is None:
        raise CompileError("cuobjdump not found: install nvidia-cuda-cuobjdump (pip install nvidia-cuda-cuobjdump)")
    return str(tool)


def disassemble(cubin: bytes, *, what: str = "--dump-sass") -> str:
    """Run ``cuobjdump`` on a cubin (``--dump-sass`` or ``--dump-resource-usage``)."""
    import cuda.pathfinder as pathfinder

    env = dict(os.environ)
    nvdisasm = pathfinder.find_nvidia_binary_utility("nvdisasm") or shutil.which("nvdisasm")
    if nvdisasm is None and what == "--dump-sass":
        raise CompileError("nvdisasm not found (cuobjdump needs it for SASS): pip install nvidia-cuda-nvdisasm")
    if nvdisasm is not None:
        env["NVDISASM_PATH"] = str(Path(nvdisasm).parent)
        env["PATH"] = str(Path(nvdisasm).parent) + os.pathsep + env.get("PATH", "")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        done = subprocess.run([cuobjdump(), what, f.name], capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise CompileError(f"cuobjdump {what} failed: {done.stderr.strip()}")
    return done.stdout


def innermost_loops(sass: str, opcodes: tuple[str, ...] = ("HGMMA",)) -> list[list[str]]:
    """The instructions of each innermost loop of ``sass`` (cuobjdump's text) that issues one of ``opcodes``: a
    backward branch's range holding one of them and no EXIT, with no smaller such range inside it (a kernel's
    key-tile or k-block loops). A wait's retry placed after the kernel's EXIT that jumps back into the code is not a
    loop of it. Each instruction as its text without the address, predicate included (``@!P0 LDL R2, [R1]``)."""
    code = [(int(a, 16), op.strip()) for a, op in re.findall(r"/\*([0-9a-f]{4,6})\*/\s+([^;]*);", sass)]
    loops = []
    for at, op in code:
        jump = re.match(r"(?:@!?U?P\w+\s+)?BRA(?:\.\S+)*\s+0x([0-9a-f]+)", op)
        if jump and int(jump.group(1), 16) < at:
            body = [o for a, o in code if int(jump.group(1), 16) <= a <= at]
            ops = [re.sub(r"^@!?U?P\w+\s+", "", o) for o in body]
            if any(o.startswith(opcodes) for o in ops) and not any(o.startswith("EXIT") for o in ops):
                loops.append((int(jump.group(1), 16), at, body))
    return [body for lo, hi, body in loops if not any(lo <= lo2 and hi2 <= hi and (lo2, hi2) != (lo, hi)
                                                      for lo2, hi2, _ in loops)]
