"""The wgmma attention kernel without a GPU: every dtype, head dim, causal flag and stage count that fits
compiles for sm_90a (and only there) to the instructions of its design (4-D TMA loads and stores, wgmma
from shared memory for Q K^T and from registers for P V, setmaxnreg) without local memory; its record's
shared memory is what the kernel lays out; asynccopy.attention routes it through tensor maps."""

import itertools
import re

import pytest

from asynccopy import attention_launch, build, device
from asynccopy import sdpa as att
from asynccopy.errors import ArgumentError
from asynccopy.sdpa import AttentionConfig

H200 = device.lookup("H200")
A100 = device.lookup("A100-40GB")
REC = att.KERNELS["wgmma"]
# as asynccopy.attention configures them (a stage count deeper than the wide key tile leaves room for takes the
# narrow one)
CASES = [att.configure(att.Problem(1, 1, 1, 256, 256, d, dtype), H200, kernel="wgmma", stages=stages, causal=causal)
         for dtype, d, causal in itertools.product(att.DTYPES, (64, 128), (False, True))
         for stages in sorted({1, 2, REC.fit(d, H200.smem_per_block_optin)})]


def _id(c):
    return f"{c.dtype}-d{c.head_dim}-s{c.stages}-{'causal' if c.causal else 'full'}-k{c.keys}"


@pytest.mark.parametrize("cfg", CASES, ids=_id)
def test_every_configuration_compiles_with_its_instructions_and_no_local_memory(cfg):
    module = cfg.compile("sm_90a")
    sass = module.sass()
    for op in ("UTMALDG.4D", "UTMASTG.4D", "USETMAXREG", "SYNCS"):
        assert op in sass, f"no {op} in {cfg.name_expression()}"
    t = ".BF16" if cfg.dtype == "bfloat16" else ""
    hgmma = re.findall(r"HGMMA\.(64x\d+x16)\.F32(\.BF16)? (R\d+), (\S+)", sass)
    # S = Q K^T: m64nBNk16 with both operands in shared memory (descriptors): D / 16 a key tile
    from_smem = [h for h in hgmma if h[0] == f"64x{cfg.keys}x16" and h[3].startswith("gdesc")]
    # O += P V: m64nDk16 with A in registers (P) and B through a transposed descriptor: 128 / 16 a tile
    from_regs = [h for h in hgmma if h[0] == f"64x{cfg.head_dim}x16" and h[3].startswith("R")]
    assert from_smem and from_regs, hgmma
    assert all((h[1] or "") == t for h in hgmma)
    assert len(from_smem) % (cfg.head_dim // 16) == 0 and len(from_regs) % (cfg.keys // 16) == 0
    assert ".tnspB" in sass
    # the softmax's 2^x is one MUFU.EX2 a score (ex2_ftz): exp2f's denormal path would add a compare a score
    assert sass.count("MUFU.EX2") >= 2 * 64 and sass.count("FSETP") < 64, (sass.count("MUFU.EX2"), sass.count("FSETP"))
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    # (the persistent build without the mask: its pieces' instance of the unit body may keep a few words on the stack,
    # its key loops none; test_the_persistent_build_keeps_its_key_loops_in_registers)
    stack_free = re.search(r"STACK:0\b", usage) or cfg.persistent and not cfg.causal and not any(
        re.match(r"(?:@!?U?P\w+\s+)?(LDL|STL)", op) for body in build.innermost_loops(sass) for op in body)
    assert re.search(r"LOCAL:0\b", usage) and stack_free, usage
    assert cfg.smem_bytes + REC.smem_reserve <= H200.smem_per_block_optin


def test_the_record_is_the_kernels_layout():
    assert (REC.tile, REC.threads, REC.min_cc, REC.operands, REC.arch_specific) == ((128, 128), 384, (9, 0), "tma", True)
    # Q [128][D] and 1024 bytes of alignment slack, then per stage K and V [BN][D]: 176 keys at head dim 128
    # without the causal mask, 128 with it
    assert AttentionConfig("wgmma", "bfloat16", 128, 2, False).smem_bytes == 128 * 128 * 2 + 1024 + 2 * 2 * 176 * 128 * 2
    assert AttentionConfig("wgmma", "bfloat16", 128, 2, True).smem_bytes == 128 * 128 * 2 + 1024 + 2 * 2 * 128 * 128 * 2
    assert [AttentionConfig("wgmma", "bfloat16", d, 2, c).keys for d, c in ((128, False), (128, True), (64, False))] \
        == [176, 128, 128]
    # head dim 64: three consumer warpgroups, 192 queries and 512 threads a block (two with the knob)
    c64 = AttentionConfig("wgmma", "bfloat16", 64, 3, False)
    assert (c64.consumers, c64.tile, c64.threads) == (3, (192, 128), 512)
    assert c64.smem_bytes == 192 * 64 * 2 + 1024 + 3 * 2 * 128 * 64 * 2
    two = AttentionConfig("wgmma", "bfloat16", 64, 3, False, defines=(("ASYNCCOPY_ATTN_CONSUMERS", 2),))
    assert (two.consumers, two.tile, two.threads) == (2, (128, 128), 384)
    assert AttentionConfig("wgmma", "bfloat16", 128, 2, False).threads == 384
    assert REC.fit(128, H200.smem_per_block_optin) == 3 and REC.fit(64, H200.smem_per_block_optin) == 6
    assert AttentionConfig("wgmma", "float16", 64, 3, True).name_expression() == "attention_wgmma<__half, 64, 3, 1>"
    with pytest.raises(ArgumentError, match="needs sm_90"):
        AttentionConfig("wgmma", "bfloat16", 64, 2, False).compile("sm_80")


def test_configure_takes_wgmma_on_hopper_only():
    p = att.Problem(2, 8, 2, 1000, 777, 128, "bfloat16")
    cfg = att.configure(p, H200, kernel="wgmma")
    turns = ("ASYNCCOPY_ATTN_PINGPONG", 1)  # 5 key tiles an item: the warpgroups take turns (with_turns)
    own = ("ASYNCCOPY_ATTN_PERSISTENT", 1)  # built persistent, causal or not (persistent_masks, with_persistence)
    assert (cfg.kernel, cfg.stages, cfg.keys, cfg.defines) == ("wgmma", REC.default_stages[1], 176, (turns, own))
    # 3 stages of 176-key tiles do not fit: the deeper pipeline asked for takes 128-key tiles
    deep = att.configure(p, H200, kernel="wgmma", stages=3)
    assert (deep.keys, deep.tile, deep.defines) == (128, (128, 128), (("ASYNCCOPY_ATTN_BN", 128), turns, own))
    assert deep.smem_bytes + REC.smem_reserve <= H200.smem_per_block_optin
    causal = att.configure(p, H200, kernel="wgmma", stages=3, causal=True)
    assert causal.defines == (turns, own) and causal.persistent
    assert not att.configure(p, A100, causal=True).persistent  # the mma kernel has no such build
    long = att.Problem(2, 8, 2, 1000, 8192, 128, "bfloat16")  # 47 key tiles an item: no turns
    assert att.configure(long, H200, kernel="wgmma").defines == (own,)
    with pytest.raises(ArgumentError, match="wgmma needs compute capability 9.0"):
        att.configure(p, A100, kernel="wgmma")
    with pytest.raises(ArgumentError, match="at most 3"):
        att.configure(p, H200, kernel="wgmma", stages=4)
    assert att.configure(p, A100).kernel == "mma"  # kernel=None: the first record that can take it


def test_o_gets_a_buffer_of_its_own_on_short_items_where_it_fits():
    """with_persistence: O staged in a buffer of its own (ASYNCCOPY_ATTN_O_BUFFER) for problems whose items read at
    most the record's o_buffer_tiles key tiles on average (head dim 64: 32), where the buffer fits beside the stages
    (not beside head dim 128's two 176-key stages); a build that says otherwise keeps its word, and the variant
    `persistent` is O in the last stage whatever the problem."""
    from asynccopy.attention_kernels import O_BUFFER_KNOB, VARIANTS
    from asynccopy.attention_schedule import mean_key_tiles

    def cfg(q_len, k_len, d, causal, stages=None):
        return att.configure(att.Problem(4, 16, 16, q_len, k_len, d, "bfloat16"), H200, kernel="wgmma", causal=causal,
                             stages=stages)

    assert dict(REC.o_buffer_tiles) == {64: 32}
    assert mean_key_tiles(192, 128, 4096, 4096, False) == 32 and mean_key_tiles(192, 128, 1000, 4097, False) == 33
    short, long = cfg(4096, 4096, 64, False), cfg(1000, 4097, 64, False)
    assert short.o_buffer and short.persistent and not long.o_buffer and long.persistent
    assert short.tile == long.tile == (192, 128)  # three consumer warpgroups
    assert short.smem_bytes == long.smem_bytes + 192 * 64 * 2  # O's buffer counts in the shared memory
    assert cfg(8192, 8192, 64, True).o_buffer is False and cfg(4096, 4096, 64, True).o_buffer  # causal: mean tiles
    assert not cfg(1024, 1024, 128, False).o_buffer and not cfg(1024, 1024, 128, True).o_buffer  # none at 128
    # a variant on top keeps the launch's buffer where its build has room for it, and drops it where not (three
    # consumers at 6 stages of a problem the launch gives two); a variant that asks for the buffer keeps it
    from asynccopy.attention_kernels import CONSUMERS_KNOB
    two = cfg(1024, 1024, 64, True, 6)
    assert two.o_buffer and two.consumers == 2
    assert two.smem_bytes + REC.smem_reserve <= H200.smem_per_block_optin
    limit = H200.smem_per_block_optin
    three = two.with_variant(VARIANTS["wgmma"]["consumers3"], limit)
    assert three.consumers == 3 and not three.o_buffer and three.smem_bytes + REC.smem_reserve <= limit
    assert two.with_defines(VARIANTS["wgmma"]["consumers3"]).smem_bytes + REC.smem_reserve > limit
    assert two.with_variant(VARIANTS["wgmma"]["serial"], limit).o_buffer
    assert two.with_variant(((CONSUMERS_KNOB, 3), (O_BUFFER_KNOB, 1)), limit).o_buffer  # asked for: kept (won't fit)
    for c in (short, cfg(1024, 1024, 64, True)):
        assert c.smem_bytes + REC.smem_reserve <= H200.smem_per_block_optin
        assert not c.with_defines(VARIANTS["wgmma"]["persistent"]).o_buffer
        assert not c.with_defines(((O_BUFFER_KNOB, 0),)).o_buffer
    # deeper pipelines asked for: the buffer only where it still fits
    seen = set()
    for stages in range(1, REC.max_stages + 1):
        try:
            c = cfg(2048, 2048, 64, False, stages)
        except ArgumentError:
            continue
        fits = c.with_defines(((O_BUFFER_KNOB, 1),)).smem_bytes + REC.smem_reserve <= H200.smem_per_block_optin
        assert c.o_buffer == fits, stages
        seen.add(fits)
    assert seen == {True, False}


def test_tensor_maps_take_extent_one_axes_of_any_stride():
    t = att.Tensor4("k", (1, 1, 300, 64), (7, 3, 64, 1), "bfloat16")
    assert attention_launch._legal_strides(t) == (8, 8, 64, 1)  # never stepped: a legal 16-byte stride instead
    t = att.Tensor4("k", (2, 4, 300, 64), (4 * 300 * 64, 64, 4 * 64, 1), "bfloat16")  # (b, s, h, d) memory
    assert attention_launch._legal_strides(t) == t.strides


@pytest.mark.parametrize("name", ["mma", "wgmma"])
def test_the_k_v_stage_plan_covers_a_loads_latency(name):
    from asynccopy.attention_kernels import plan_stages

    rec = att.KERNELS[name]
    slow = plan_stages(rec, 128, "bfloat16", H200, tile_ns=4 * H200.latency_ns, memory=None)
    fast = plan_stages(rec, 64, "bfloat16", H200, tile_ns=H200.latency_ns / 4, memory=None)
    # a tile's products outlast a load: double buffering is enough (one stage more for mma's overlapped loop at head
    # dim 128, which holds the next tile's K and V beside the one in flight)
    assert slow.recommended == (3 if name == "mma" else 2)
    assert 4 <= fast.recommended <= rec.fit(64, H200.smem_per_block_optin)
    # the plan's shared memory is the record's: what the kernel lays out, with Q's buffer where it has one
    assert slow.row(2).smem_per_block == AttentionConfig(name, "bfloat16", 128, 2, False).smem_bytes + rec.smem_reserve


@pytest.mark.parametrize("d, stages", [(64, 3), (128, 2)])
def test_the_default_build_overlaps_and_the_variants_are_what_they_say(d, stages):
    from dataclasses import replace

    from asynccopy.attention_kernels import VARIANTS

    base = AttentionConfig("wgmma", "bfloat16", d, stages, True)
    serial, over, pp = (replace(base, defines=VARIANTS["wgmma"][v]).compile("sm_90a").sass()
                        for v in ("serial", "overlap", "pingpong"))
    default = base.compile("sm_90a").sass()
    # in turn: every wait drains all groups; overlapped: Q K^T of the next tile waited for with P V pending
    depbar1 = "WARPGROUP.DEPBAR.LE gsb0, 0x1"
    assert depbar1 in over and depbar1 in pp and depbar1 in default and depbar1 not in serial
    # the ping-pong: the warpgroups hand each other the turn to issue (bar.arrive on barriers 3, 4); the
    # default build takes it at head dim 64 only
    assert "BAR.ARV" in pp and "BAR.ARV" not in over and "BAR.ARV" not in serial
    assert ("BAR.ARV" in default) == (d == 64)
    # the variant "prefetch": the four tensor maps prefetched as a block starts; the default build has no TMA cache control
    assert "UTMACCTL" not in default and "UTMACCTL" in replace(base, defines=VARIANTS["wgmma"]["prefetch"]).compile(
        "sm_90a").sass()
    usage = build.disassemble(replace(base, defines=VARIANTS["wgmma"]["overlap"]).compile("sm_90a").cubin,
                              what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage), usage
    with pytest.raises(Exception, match="build with OVERLAP too"):
        replace(base, defines=(("ASYNCCOPY_ATTN_OVERLAP", 0), ("ASYNCCOPY_ATTN_PINGPONG", 1))).compile("sm_90a")


@pytest.mark.parametrize("d, stages", [(64, 2), (64, 3), (128, 2)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", ["persistent", "obuffer"])
def test_the_persistent_build_keeps_its_key_loops_in_registers(d, stages, causal, variant):
    """ASYNCCOPY_ATTN_PERSISTENT: the unit loop, Q's hand-back barrier and O staged in the last K / V stage (or in a
    buffer of its own: obuffer, which counts in the shared memory) keep the consumers' key-tile loops in registers:
    no local memory there, and (causal, where no piece is merged) no stack at all. Without the mask the pieces of a
    key split run through a second instance of the unit body (merge_pieces inside the loop of whole items cost it its
    uniform registers and spilled the unit's fields), whose epilogue may keep a few words on the stack. A traced build
    is never persistent (the trace follows one item a block), a grid cap is refused where the build is not
    persistent, and a persistent grid without the mask is cut along its keys where the default one is."""
    from dataclasses import replace

    from asynccopy.attention_kernels import VARIANTS

    base = AttentionConfig("wgmma", "bfloat16", d, stages, causal)
    cfg = replace(base, defines=VARIANTS["wgmma"][variant])
    assert cfg.persistent and not base.persistent and not replace(cfg, trace=True).persistent
    assert cfg.o_buffer == (variant == "obuffer") and cfg.smem_bytes == base.smem_bytes + cfg.o_buffer * (
        cfg.tile[0] * d * 2)
    module = cfg.compile("sm_90a")
    loops = build.innermost_loops(module.sass())
    assert loops  # the key-tile loop of each instance of the unit body
    for body in loops:
        assert not [op for op in body if re.match(r"(?:@!?U?P\w+\s+)?(LDL|STL)", op)], "local memory in a key loop"
        assert not [op for op in body if "CALL" in op], "a call in a key loop"
    usage = build.disassemble(module.cubin, what="--dump-resource-usage")
    assert re.search(r"LOCAL:0\b", usage) and (not causal or re.search(r"STACK:0\b", usage)), usage
    p = att.Problem(1, 4, 4, 1000, 1000, d, "bfloat16")
    with pytest.raises(ArgumentError, match="blocks=3: a persistent configuration's cap"):
        att.launch(base, p, None, None, None, None, 0, 0.125, stream=None, facts=H200, blocks=3)
    split = attention_launch.key_split(cfg, 1000, 8000, 4, 1, 132)
    assert split == attention_launch.key_split(base, 1000, 8000, 4, 1, 132) and (split == (0, 1)) == causal


@pytest.mark.parametrize("d, causal, knob, value", [(64, False, "ASYNCCOPY_ATTN_RING", 0),
                                                     (64, True, "ASYNCCOPY_ATTN_RING", 1),
                                                     (64, False, "ASYNCCOPY_ATTN_CHAINS", 2),
                                                     (64, True, "ASYNCCOPY_ATTN_CHAINS", 4),
                                                     (128, False, "ASYNCCOPY_ATTN_CHAINS", 2)])
def test_the_ring_and_chain_knobs_build_what_the_default_does_not(d, causal, knob, value):
    """The persistent build with the other turn ring (ASYNCCOPY_ATTN_RING: across units, or closed at each) or
    another count of softmax chains (ASYNCCOPY_ATTN_CHAINS) than the default for its mask: a different binary (the
    knob is read), its key loops in registers: all but the per-unit ring without the mask, whose per-thread turn count
    beside the key split's second instance takes a word of stack into a key loop (the reason the ring runs on across
    units there; docs/design.md 11b)."""
    base = AttentionConfig("wgmma", "bfloat16", d, 2, causal, defines=(("ASYNCCOPY_ATTN_PERSISTENT", 1),))
    other = base.with_defines(((knob, value),))
    sass, other_sass = base.compile("sm_90a").sass(), other.compile("sm_90a").sass()
    assert other_sass != sass
    if knob == "ASYNCCOPY_ATTN_RING" and not causal:
        return
    for body in build.innermost_loops(other_sass):
        assert not [op for op in body if re.match(r"(?:@!?U?P\w+\s+)?(LDL|STL)", op)], "local memory in a key loop"


def test_a_deep_pipeline_asked_for_takes_the_kernel_that_fits_it():
    p = att.Problem(1, 4, 4, 1000, 1000, 64, "bfloat16")
    assert att.configure(p, H200, stages=6).kernel == "wgmma"  # the first record, when it can
    assert att.configure(p, A100, stages=4).kernel == "mma"  # no wgmma before Hopper
    with pytest.raises(ArgumentError, match=r"stages must be in \[1, 4\], got 6"):
        att.configure(p, A100, stages=6)  # no wgmma there: mma's limit


def test_an_immutable_out_is_refused():
    from asynccopy import arrays

    class JaxLike:  # what a jax.Array's type reports as its module
        __module__ = "jaxlib.xla_extension"

    with pytest.raises(ArgumentError, match=r"out is a JAX array, which is immutable: leave out= unset"):
        arrays.check_writable(JaxLike(), "out")
    arrays.check_writable(object(), "out")
