"""Compile CUDA C++ with NVRTC (through cuda.core) to a cubin for one exact arch, with a cache.

Kernels are ``.cu`` files in ``asynccopy/kernels``; their headers live in
``asynccopy/kernels/include/asynccopy`` and are on the include path of every compile, users'
own sources included (:func:`compile`). Compiling needs no GPU: name the arch (``"sm_90a"``).

The compile cache has two levels: a dict in this process and one file per entry on disk. Its key
is a digest of the schema version, the source, the bytes of every asynccopy header, the CCCL and
CUDA runtime header versions, the normalized options, the name expressions, the arch and the
NVRTC version. ``ASYNCCOPY_CACHE_DIR`` moves the disk cache (default ``~/.cache/asynccopy``);
setting it to ``off`` disables it. A truncated, corrupt or foreign entry is recompiled.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import device
from .device import check_driver, parse_arch
from .errors import ArgumentError, CompileError
from .toolchain import (  # noqa: F401  (re-exported: build is where users look)
    check_arch,
    cuobjdump,
    disassemble,
    include_dirs,
    innermost_loops,
    kernel_dir,
    nvrtc_version,
    read_kernel,
    supported_archs,
    toolchain,
)

SCHEMA = 1
_MAGIC = b"asynccopy-cubin\n"

# ---------------------------------------------------------------------------------------------
# The cache


def cache_dir() -> Path | None:
    """Where compiled cubins are kept; None when ``ASYNCCOPY_CACHE_DIR=off``."""
    env = os.environ.get("ASYNCCOPY_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in ("", "0", "off", "none", "false"):
            return None
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "asynccopy"


@functools.lru_cache(maxsize=1)
def _headers_digest() -> str:
    h = hashlib.sha256()
    ours, cccl, cudart = include_dirs()
    for path in sorted(Path(ours).rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(ours)).encode() + b"\0" + path.read_bytes() + b"\0")
    for path in (Path(cccl) / "cuda" / "std" / "__cccl" / "version.h", Path(cudart) / "cuda_runtime_api.h"):
        h.update(str(path).encode() + b"\0")
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def cache_key(source: str, arch: str, name_expressions: tuple[str, ...], options: dict) -> str:
    parts = {
        "schema": SCHEMA,
        "source": hashlib.sha256(source.encode()).hexdigest(),
        "headers": _headers_digest(),
        "arch": arch,
        "nvrtc": list(nvrtc_version()),
        "names": list(name_expressions),
        "options": {k: options[k] for k in sorted(options)},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _read_entry(path: Path, key: str) -> tuple[bytes, dict[str, str]] | None:
    """The cubin and symbol mapping stored under key, or None if absent, corrupt or foreign."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 8:
        return None
    at = len(_MAGIC)
    header_len = int.from_bytes(blob[at : at + 8], "little")
    try:
        header = json.loads(blob[at + 8 : at + 8 + header_len])
    except (ValueError, UnicodeDecodeError):
        return None
    payload = blob[at + 8 + header_len :]
    if not isinstance(header, dict) or header.get("key") != key or header.get("schema") != SCHEMA:
        return None
    if header.get("sha256") != hashlib.sha256(payload).hexdigest():
        return None
    return payload, dict(header.get("symbol_mapping") or {})


def _write_entry(path: Path, key: str, cubin: bytes, symbol_mapping: dict[str, str]) -> None:
    header = json.dumps(
        {"schema": SCHEMA, "key": key, "sha256": hashlib.sha256(cubin).hexdigest(), "symbol_mapping": symbol_mapping}
    ).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + len(header).to_bytes(8, "little") + header + cubin)
        os.replace(tmp, path)  # atomic: a reader sees the old entry or the whole new one
    except OSError as exc:  # an unwritable cache costs a recompile next time: say so once per folder
        if str(path.parent) not in _unwritable:
            _unwritable.add(str(path.parent))
            warnings.warn(f"asynccopy: cannot write the compile cache in {path.parent} ({exc.strerror or exc}): "
                          f"kernels are compiled again in every process; set ASYNCCOPY_CACHE_DIR to a writable "
                          f"folder (or to off)", CacheWarning, stacklevel=3)


class CacheWarning(UserWarning):
    """The compile cache cannot be written (each process compiles again)."""


_unwritable: set[str] = set()


_memory: dict[str, Module] = {}
_memory_lock = threading.Lock()


def clear_memory_cache() -> None:
    """Forget the in-process level (the disk level stays)."""
    with _memory_lock:
        _memory.clear()


# ---------------------------------------------------------------------------------------------
# Compiling


@dataclass
class Module:
    """A compiled cubin; its kernels load lazily (loading needs a GPU, compiling does not).

    Every Module of one cache key shares one loaded ObjectCode and its kernels (``_loaded``), so a
    memory-cache hit costs no module load.
    """

    cubin: bytes
    symbol_mapping: dict[str, str]
    arch: str
    name: str
    source: str  # "compiled", "disk cache" or "memory cache"
    log: str = ""
    _loaded: dict = field(default_factory=dict, repr=False)

    def kernel(self, name: str):
        """The ``cuda.core.Kernel`` for an ``extern "C"`` name or a compiled name expression."""
        kernels = self._loaded.setdefault("kernels", {})
        if name not in kernels:
            from cuda.core import ObjectCode

            # Loading needs a GPU. Ask for it the guarded way first: without a driver, cuda.core's
            # module load fails inside its error report, and cuda-bindings then keeps its driver-loading
            # lock (SystemError, and every later driver call in the process blocks forever).
            device.current()

            if "object" not in self._loaded:
                mapping = {k: v.encode() for k, v in self.symbol_mapping.items()}  # cuda.core wants bytes
                self._loaded["object"] = ObjectCode.from_cubin(self.cubin, name=self.name, symbol_mapping=mapping)
            kernels[name] = self._loaded["object"].get_kernel(name)
        return kernels[name]

    def sass(self) -> str:
        """The SASS of this cubin (cuobjdump; works without a GPU)."""
        return disassemble(self.cubin)

    def registers(self, name: str) -> int:
        """Registers a thread of kernel ``name`` (an ``extern "C"`` name or a compiled name expression) takes, from
        the cubin's resource usage (cuobjdump; works without a GPU): what bounds the blocks an SM holds."""
        usage = self._loaded.get("registers")
        if usage is None:
            text = disassemble(self.cubin, what="--dump-resource-usage")
            usage = self._loaded["registers"] = {f: int(r) for f, r in re.findall(r"Function ([^\s:]+):\s+REG:(\d+)", text)}
        symbol = self.symbol_mapping.get(name, name)
        if symbol not in usage:
            raise CompileError(f"{self.name} has no kernel {name!r} (it has {', '.join(sorted(usage)) or 'none'})")
        return usage[symbol]


HANG_ENV = "ASYNCCOPY_HANG_TIMEOUT_MS"


def hang_timeout_ns() -> int:
    """The barrier-wait bound asked for by $ASYNCCOPY_HANG_TIMEOUT_MS, in ns (0: unbounded, the default).

    Set, every kernel is compiled with -DASYNCCOPY_HANG_TIMEOUT_NS: a barrier wait that lasts longer
    prints the kernel, the barrier and the phase, and traps (kernels/include/asynccopy/debug.cuh).
    """
    text = os.environ.get(HANG_ENV, "").strip()
    if not text:
        return 0
    try:
        ms = float(text)
    except ValueError:
        ms = -1.0
    if ms == 0:
        return 0
    if not 0 < ms <= 3_600_000:
        raise ArgumentError(f"{HANG_ENV} must be a number of milliseconds in (0, 3600000], got {text!r}")
    return max(1, round(ms * 1e6))


def compile_record(what: str, source_file: str, template: str, name_expression: str, *, min_cc, arch_specific: bool,
                   arch: str | None = None, defines: dict | None = None) -> Module:
    """One instantiation of a kernel record's template (GEMM and attention records), for ``arch`` (default:
    the local GPU's), after checking the arch can run it: ``what`` names the kernel in the error."""
    target = device.parse_arch(arch) if arch is not None else device.current().arch
    if device.cc_of_arch(target) < tuple(min_cc) or arch_specific and not target.endswith("a"):
        raise ArgumentError(f"{what} needs {device.arch_of_cc(tuple(min_cc))}"
                            f"{' (its arch-specific instructions)' if arch_specific else ''}; got {target}")
    return compile(read_kernel(source_file), arch=target, defines=defines or {}, name_expressions=(name_expression,),
                   name=template)


def _compile_record_job(job: tuple[tuple, dict]) -> None:
    compile_record(*job[0], **job[1])


def compile_many(jobs, processes: int) -> int:
    """Compile records' builds side by side in ``processes`` spawned processes, into the disk cache the launches then
    read (NVRTC is most of a fresh machine's time in a run of many builds); ``jobs``: compile_record's (args, kwargs)
    each (an AttentionConfig's compile_job, say); a build that fails raises here. Returns the distinct builds."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    def key(job):  # a build's identity: its arguments and its macros by name, values as the compiler reads them
        args, kwargs = job
        return repr((args, sorted((k, str(v)) for k, v in (kwargs.get("defines") or {}).items()),
                     sorted((k, repr(v)) for k, v in kwargs.items() if k != "defines")))

    unique = list({key(job): job for job in jobs}.values())
    with ProcessPoolExecutor(max(1, processes), mp_context=get_context("spawn")) as pool:
        for _ in pool.map(_compile_record_job, unique):
            pass
    return len(unique)


def compile(
    source: str,
    *,
    arch: str | None = None,
    name_expressions: tuple[str, ...] | list[str] = (),
    defines: dict[str, object] | None = None,
    name: str = "asynccopy_program",
    std: str = "c++17",
    options: dict | None = None,
) -> Module:
    """Compile CUDA C++ ``source`` to a cubin with asynccopy's headers on the include path.

    ``arch``: ``"sm_90a"``-style target; by default the current GPU's exact arch.
    ``name_expressions``: template instantiations to make loadable (``"k<4, 16>"``).
    ``defines``: ``-D`` macros. ``options``: further ``cuda.core.ProgramOptions`` fields.
    With $ASYNCCOPY_HANG_TIMEOUT_MS set, every barrier wait is bounded (:func:`hang_timeout_ns`).
    """
    if not isinstance(source, str):
        raise ArgumentError(f"source must be CUDA C++ text (str), got {type(source).__name__}")
    target = parse_arch(arch) if arch is not None else _current_arch()
    check_arch(target)
    names = tuple(name_expressions)
    defines = dict(defines or {})
    hang_ns = hang_timeout_ns()
    if hang_ns:  # the debug switch reaches every kernel of the package (and its cache key)
        defines.setdefault("ASYNCCOPY_HANG_TIMEOUT_NS", f"{hang_ns}ull")
    macros = [f"{k}={v}" if v is not None else str(k) for k, v in sorted(defines.items())]
    extra = dict(options or {})
    key_options = {"std": std, "define_macro": macros, **{k: repr(v) for k, v in extra.items()}}
    key = cache_key(source, target, names, key_options)

    with _memory_lock:
        hit = _memory.get(key)
    if hit is not None:
        return replace(hit, name=name, source="memory cache")  # shares hit._loaded

    directory = cache_dir()
    entry_path = directory / f"{key}.cubin" if directory is not None else None
    stored = _read_entry(entry_path, key) if entry_path is not None else None
    if stored is not None:
        module = Module(stored[0], stored[1], target, name, "disk cache")
    else:
        module = _nvrtc(source, target, names, name, std, macros, extra)
        if entry_path is not None:
            _write_entry(entry_path, key, module.cubin, module.symbol_mapping)
    with _memory_lock:
        _memory[key] = module
    return module


def _nvrtc(source: str, target: str, names: tuple[str, ...], name: str, std: str, macros: list[str],
           extra: dict) -> Module:
    """One NVRTC compile to a cubin (CompileError with the whole log)."""
    from cuda.core import Program, ProgramOptions

    opts = ProgramOptions(name=name, arch=target, std=std, include_path=list(include_dirs()),
                          define_macro=macros or None, **extra)
    log = io.StringIO()
    try:
        obj = Program(source, "c++", opts).compile("cubin", name_expressions=names, logs=log)
    except Exception as exc:  # NVRTC's error carries the log; keep it whole (less its C string's NUL)
        text = f"{exc}\n{log.getvalue()}".replace("\x00", "").rstrip()
        raise CompileError(f"NVRTC failed to compile {name} for {target}:\n{text}") from None
    mapping = {k if isinstance(k, str) else k.decode(): v if isinstance(v, str) else v.decode()
               for k, v in (getattr(obj, "symbol_mapping", None) or {}).items()}
    return Module(bytes(obj.code), mapping, target, name, "compiled", log.getvalue())


def _current_arch() -> str:
    return device.current().arch


# ---------------------------------------------------------------------------------------------
# Launching

_smem_opt_in: dict[tuple[int, int], int] = {}  # (kernel handle, device) -> the limit set so far


def allow_dynamic_smem(kernel, nbytes: int, device_id: int) -> None:
    """Opt a kernel into ``nbytes`` of dynamic shared memory (needed above 48 KB; cuda.core lacks it)."""
    from cuda.bindings import driver

    handle = kernel.handle
    memo = (int(handle), device_id)
    if _smem_opt_in.get(memo, -1) >= nbytes:  # the attribute is a maximum: never lower it
        return
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if isinstance(handle, driver.CUkernel):
        check_driver(driver.cuKernelSetAttribute(attr, nbytes, handle, driver.CUdevice(device_id)),
                      f"cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes})")
    else:
        check_driver(driver.cuFuncSetAttribute(handle, attr, nbytes),
                      f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes})")
    _smem_opt_in[memo] = nbytes


class Launch:
    """A kernel at one launch shape (grid, block, dynamic shared memory, cluster), worked out once and launched many
    times: cuda.core's LaunchConfig is made once, and the kernel opted into its shared memory on a stream's device once
    (the stream last launched on is remembered, weakly: the next call on that Stream object asks nothing, and a stream
    the caller let go is not kept). cuda.core's launch still packs the arguments each call (it takes no packed ones)."""

    def __init__(self, kernel, *, grid, block, shmem: int = 0, cluster=None):
        self.kernel, self.shmem = kernel, shmem
        self.config = device.cuda_core().LaunchConfig(grid=grid, block=block, shmem_size=shmem, cluster=cluster)
        self._stream = None  # a weak reference to the stream last launched on: its device's opt-in is done

    def __call__(self, stream, *args) -> None:
        """Launch on ``stream`` (a cuda.core Stream)."""
        if self._stream is None or self._stream() is not stream:
            if self.shmem > 0:  # static + dynamic above 48 KB needs the opt-in (memoized per kernel and device)
                allow_dynamic_smem(self.kernel, self.shmem, stream.device.device_id)
            try:
                self._stream = weakref.ref(stream)
            except TypeError:  # a stream type without weak references: asked each call
                self._stream = None
        device.cuda_core().launch(stream, self.config, self.kernel, *args)


def launch(kernel, *args, grid, block, stream, shmem: int = 0, cluster=None) -> None:
    """Launch on ``stream`` (a cuda.core Stream), opting into >48 KB of dynamic shared memory if asked."""
    Launch(kernel, grid=grid, block=block, shmem=shmem, cluster=cluster)(stream, *args)
