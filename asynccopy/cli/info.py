"""`asynccopy info` (device, toolchain, a compile of every kernel) and `asynccopy mechanisms`."""

from __future__ import annotations

import time

from .. import build, device, mechanism, stream


def add(sub) -> None:
    info = sub.add_parser("info", help="device, toolchain, and a compile of every kernel")
    info.add_argument("--arch", help="compile for this arch (e.g. sm_90a) without a GPU")
    info.set_defaults(fn=cmd_info)
    mech = sub.add_parser("mechanisms", help="list the tile-stream mechanisms and what each needs")
    mech.set_defaults(fn=cmd_mechanisms)


def _units(arch: str) -> list:
    """(label, compile) of every kernel module the package ships, for one arch."""
    units = [("util.cu", lambda: build.compile(build.read_kernel("util.cu"), arch=arch, name="util"))]
    for mech in mechanism.mechanisms():
        cfg = stream.StreamConfig.make(mech.name)
        if not cfg.compiles_for(arch):
            units.append((f"{mech.source} {mech.name}", f"skipped (needs CC {mech.min_cc[0]}.{mech.min_cc[1]})"))
            continue
        units.append((f"{mech.source} {mech.name}", lambda cfg=cfg: cfg.compile(arch)))
    if device.cc_of_arch(arch) >= (9, 0):
        from .. import stas, tma

        units.append(("tma.cu (TMA building blocks)", lambda: tma.module(arch)))
        units.append(("stas.cu (st.async ring)", lambda: stas.module(arch)))
    return units + _product_units(arch)


def _product_units(arch: str) -> list:
    """One configuration of each GEMM and attention kernel (its first tile and dtype, 2 stages)."""
    from ..attention_kernels import KERNELS as ATTENTION
    from ..attention_kernels import AttentionConfig
    from ..gemm_kernels import KERNELS as GEMM
    from ..gemm_kernels import GemmConfig

    cc = device.cc_of_arch(arch)
    units = []
    for rec in GEMM.values():
        cfg = GemmConfig(rec.name, rec.dtypes[0], rec.dtypes[0], rec.tiles[0], 2, False, False, 16)
        units.append(_unit(f"{rec.source} {rec.name}", rec, cc, arch, cfg))
    for rec in ATTENTION.values():
        cfg = AttentionConfig(rec.name, rec.dtypes[0], rec.head_dims[-1], 2, False)
        units.append(_unit(f"{rec.source} {rec.name}", rec, cc, arch, cfg))
    return units


def _unit(label: str, rec, cc, arch: str, cfg):
    if cc < rec.min_cc or (rec.arch_specific and not arch.endswith("a")):
        need = f"CC {rec.min_cc[0]}.{rec.min_cc[1]}" + (" (sm_90a)" if rec.arch_specific else "")
        return (label, f"skipped (needs {need})")
    return (label, lambda: cfg.compile(arch))


def cmd_info(args) -> int:
    if args.arch:
        arch = build.check_arch(args.arch)
        print(f"device: none asked for; compiling for {arch}")
    else:
        facts = device.current()
        arch = facts.arch
        print(f"device: {facts.name} (CC {facts.cc[0]}.{facts.cc[1]}, {arch}), {facts.sm_count} SMs, "
              f"{facts.smem_per_block_optin // 1024} KiB shared memory per block (opt-in), "
              f"{facts.smem_per_sm // 1024} KiB per SM, {facts.l2_bytes / 2**20:.0f} MiB L2")
        print(f"driver: CUDA {device.driver_version()}")
    tc = build.toolchain()
    print(f"toolchain: NVRTC {tc['nvrtc']}, CCCL {tc['cccl']}, CUDA runtime headers {tc['cuda_runtime_headers']}, "
          f"cuda.core {tc['cuda_core']}")
    where = build.cache_dir()
    print(f"compile cache: {where if where else 'off (ASYNCCOPY_CACHE_DIR=off)'}")
    print(f"compiling every kernel for {arch}:")
    for label, make in _units(arch):
        if isinstance(make, str):
            print(f"  {label}: {make}")
            continue
        t0 = time.perf_counter()
        module = make()
        print(f"  {label:30s} {len(module.cubin) / 1024:7.0f} KiB cubin  {time.perf_counter() - t0:5.1f} s  "
              f"({module.source})")
    return 0


def cmd_mechanisms(args) -> int:
    for family in mechanism.FAMILIES:
        members = [m for m in mechanism.mechanisms() if m.family == family]
        if members:
            print(f"{family}:")
        for mech in members:
            print(f"  {mech.name:16s} {mech.describe()}")
            print(f"  {'':16s} {mech.api}")
    return 0
