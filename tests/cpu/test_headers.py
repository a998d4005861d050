"""Public header wrappers that no package kernel uses still compile to their instructions."""

import re
from pathlib import Path

import asynccopy

SMOKE = (Path(__file__).parent.parent / "data" / "wrappers_smoke.cu").read_text()


def test_unused_public_wrappers_compile_to_their_instructions():
    sass = asynccopy.compile(SMOKE, arch="sm_90a", name="wrappers_smoke").sass()
    assert re.search(r"UBLKPF\.L2 ", sass), "bulk_prefetch_l2: no L2 bulk prefetch"
    loads = re.findall(r"UBLKCP\.S\.G [^;]*;", sass)
    assert len(loads) == 2 and sum("desc[" in x for x in loads) == 1, f"two bulk loads, one with an L2 policy: {loads}"
    assert "SYNCS.ARRIVE.TRANS64" in sass  # expect_tx and arrive.expect_tx on the mbarrier
