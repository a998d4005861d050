"""scripts/gemm_variants.py's variant syntax without a GPU: a variant's -D macros replace the shape's own knobs, or
with '+' are set on top of them (so that a knob is timed on the default configuration, pairs and all)."""


import pytest

from asynccopy.errors import ArgumentError
from tests.cpu import scripts


def _script():
    return scripts.load("gemm_variants")


def test_a_variant_replaces_the_shapes_knobs_unless_it_starts_with_a_plus():
    gv = _script()
    own = (("ASYNCCOPY_WGMMA_CLUSTER", 2), ("ASYNCCOPY_WGMMA_SHARE", "1"), ("ASYNCCOPY_WGMMA_EPI_BUFS", 4))
    name, macros, launch = gv._variant("pf:ASYNCCOPY_WGMMA_PREFETCH_MAPS=1,stages=4")
    assert (name, macros, launch) == ("pf", (("ASYNCCOPY_WGMMA_PREFETCH_MAPS", "1"),), {"stages": "4"})
    assert gv.variant_defines(own, macros, "extend" in launch) == macros
    name, macros, launch = gv._variant("pf:+ASYNCCOPY_WGMMA_PREFETCH_MAPS=1,ASYNCCOPY_WGMMA_EPI_BUFS=2,stream_k=auto")
    assert launch == {"extend": "1", "stream_k": "auto"}
    got = dict(gv.variant_defines(own, macros, "extend" in launch))
    assert got == {"ASYNCCOPY_WGMMA_CLUSTER": 2, "ASYNCCOPY_WGMMA_SHARE": "1", "ASYNCCOPY_WGMMA_EPI_BUFS": "2",
                   "ASYNCCOPY_WGMMA_PREFETCH_MAPS": "1"}
    assert gv._variant("base") == ("base", (), {})
    for bad, why in ((":X=1", "needs a name"), ("v:X", "is not MACRO=VALUE"), ("v:X=", "is not MACRO=VALUE")):
        with pytest.raises(ArgumentError, match=why):
            gv._variant(bad)
