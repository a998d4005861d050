"""The examples without a GPU: each imports, and its kernels compile with what it claims to show
(tests/gpu/test_examples.py runs them)."""

import importlib.util
import pathlib
import re

import pytest

import asynccopy
from tests import sass as sass_of

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_has_a_test():
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == ["custom_pipeline", "wgmma_gemm"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_custom_pipeline_compiles_to_a_cp_async_ring(arch):
    example = load("custom_pipeline")
    name = example.name_expression()
    assert name == "row_sums<256, 8192, 4>"
    module = asynccopy.compile(example.SOURCE, arch=arch, name_expressions=[name], name="row_sums")
    body = sass_of.by_function(module.sass())[module.symbol_mapping[name]]
    assert "LDGSTS.E.BYPASS.128" in body  # cp.async.cg, 16 B per copy
    assert "LDGDEPBAR" in body and "DEPBAR" in body  # commit_group and wait_group


@pytest.mark.parametrize("bn, stages", [(128, 3), (64, 1), (256, 5)])  # the default, the narrowest, the widest
def test_wgmma_gemm_compiles_to_tma_loads_and_wgmma(bn, stages):
    example = load("wgmma_gemm")
    name = example.name_expression(bn, stages)
    assert name == f"tiny_gemm<{bn}, {stages}>"
    module = asynccopy.compile(example.SOURCE, arch="sm_90a", name_expressions=[name], name="wgmma_gemm")
    body = sass_of.by_function(module.sass())[module.symbol_mapping[name]]
    assert "UTMALDG.2D" in body  # cp.async.bulk.tensor.2d: the A and W boxes of a stage
    assert f"HGMMA.64x{bn}x16.F32.BF16" in body  # wgmma m64nBNk16, bf16 in, f32 accumulators
    assert "SYNCS.ARRIVE.TRANS64" in body and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in body  # mbarrier arrive, try_wait
    assert "WARPGROUP.DEPBAR.LE" in body  # wgmma_wait
    usage = asynccopy.build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and re.search(r"STACK:0\b", usage), usage
    # the barriers' static shared memory, which check() counts against the per-block limit
    assert int(re.search(r"SHARED:(\d+)", usage).group(1)) <= example.STATIC_SMEM, usage


class Meta:
    """What wgmma_gemm.check reads of an array (shape, dtype, contiguity): no GPU, no framework."""

    def __init__(self, shape, dtype="torch.bfloat16", contiguous=True):
        self.shape, self.dtype, self.contiguous = shape, dtype, contiguous

    def is_contiguous(self):
        return self.contiguous


@pytest.mark.parametrize("a, w, kw, message", [
    (Meta((100, 64)), Meta((128, 64)), {}, r"tiny_gemm masks nothing: m must be a positive multiple of 64, n of "
                                            r"bn = 128 and k of 64, got m=100, n=128, k=64"),
    (Meta((64, 64)), Meta((192, 64)), {}, r"n of bn = 128 and k of 64, got m=64, n=192, k=64"),
    (Meta((64, 96)), Meta((128, 96)), {"bn": 64}, r"n of bn = 64 and k of 64, got m=64, n=128, k=96"),
    (Meta((64, 64)), Meta((128, 128)), {}, r"a is \[m x k\] and w is \[n x k\]: got a \(64, 64\) and w \(128, 128\)"),
    (Meta((64, 64), "torch.float32"), Meta((128, 64)), {}, r"a must be bfloat16, got torch.float32"),
    (Meta((64, 64)), Meta((128, 64), contiguous=False), {}, r"w must be C-contiguous \(row-major\)"),
    (Meta((2, 64, 64)), Meta((128, 64)), {}, r"a must be a 2D matrix, got shape \(2, 64, 64\)"),
    (Meta((64, 64)), Meta((128, 64)), {"bn": 96}, r"bn must be one of \(64, 128, 256\) \(a wgmma m64nNk16 width\), got 96"),
    (Meta((64, 64)), Meta((128, 64)), {"stages": 0}, r"stages must be an integer in \[1, 8\], got 0"),
    (Meta((64, 64)), Meta((256, 64)), {"stages": 6, "bn": 256},
     r"6 stages of 40960 bytes \(bn = 256\) do not fit the 232448 bytes of shared memory a block may have: at most 5"),
])
def test_wgmma_gemm_checks_its_operands_before_any_device_work(a, w, kw, message):
    with pytest.raises(ValueError, match=message):
        load("wgmma_gemm").gemm(a, w, **kw)
