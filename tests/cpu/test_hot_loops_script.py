"""scripts/hot_loops.py and the loop finder it reads SASS with (asynccopy.build.innermost_loops), without a GPU."""


from asynccopy import build
from tests.cpu import scripts

# cuobjdump's shape of SASS: an outer loop (0x10-0x70) holding an inner one (0x20-0x50) that issues HMMA, a loop
# without tensor work (0x80-0x90), and a wait's retry after EXIT that jumps back into the code (not a loop of it).
SASS = """
        /*0010*/                   MOV R1, c[0x0][0x28] ;
        /*0020*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0030*/              @!P0 LDL R2, [R1] ;
        /*0040*/                   R2UR UR4, R2 ;
        /*0050*/               @P1 BRA 0x20 ;
        /*0060*/                   UIADD3 UR5, UR5, 0x1, URZ ;
        /*0070*/                   BRA 0x10 ;
        /*0080*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0090*/               @P2 BRA 0x80 ;
        /*00a0*/                   EXIT ;
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R5], R6 ;
        /*00c0*/              @!P0 BRA 0xb0 ;
        /*00d0*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*00e0*/                   BRA 0x30 ;
"""


def _script():
    return scripts.load("hot_loops")


def test_the_innermost_loop_issuing_the_opcodes_is_found_with_its_predicated_instructions():
    loops = build.innermost_loops(SASS, ("HMMA",))
    assert loops == [["HMMA.16816.F32.BF16 R4, R8, R12, R4", "@!P0 LDL R2, [R1]", "R2UR UR4, R2", "@P1 BRA 0x20"]]
    assert build.innermost_loops(SASS, ("HGMMA",)) == []
    assert [len(b) for b in build.innermost_loops(SASS, ("IADD3",))] == [2]


def test_the_script_reports_a_builds_registers_and_its_hot_loop(capsys):
    hot = _script()
    assert hot.main(["--only", "gemm mma"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("NVRTC ")
    assert out[1].startswith("gemm mma 128x256 s4: ") and out[1].endswith("bytes of stack")
    loops = [line for line in out[2:] if line.startswith("  loop of")]
    assert len(loops) == 1 and "(HMMA 128" in loops[0] and "LDL 0, STL 0" in loops[0]
    assert hot.main(["--only", "no such build"]) == 2
    assert "no build's name holds all of 'no such build'" in capsys.readouterr().err
    assert hot.main(["--nvrtc-dir", str(scripts.SCRIPTS)]) == 2  # no libnvrtc.so.13 there
    assert f"no libnvrtc.so.13 in {scripts.SCRIPTS}" in capsys.readouterr().err
    names = [name for name, _ in hot.builds([])]
    assert len(names) == 11 and sum(name.startswith("attention") for name in names) == 8
