"""The STAS ring (kernels/stas.cu): blocks of a cluster pass messages to their right neighbour's
distributed shared memory with st.async, or — for comparison — through global memory with flags.

    r = asynccopy.stas.ring(cluster=4, message_bytes=4096, rounds=1000)
    r.errors            # words received wrong, over every round and block (0)
    r.last              # each block's last message, [blocks, message_bytes // 4] uint32

Every receiving block checks every word of every round against what its left neighbour sent (the
formula is :func:`expected_message`) and counts mismatches; ``corrupt_round`` flips one bit of one
message to prove the count can be non-zero.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np

from . import build, device
from . import cluster as clusters_mod
from .errors import ArgumentError

VECS = (4, 8, 16)
SLOTS = (1, 2, 4)
VIAS = ("dsmem", "global")
WORD_MUL = 0x9E3779B1
NO_CORRUPTION = 0xFFFFFFFF
MASK = 0xFFFFFFFF


def ring_word(seed, cluster_id, src, rnd):
    """The per-(cluster, sender, round) base word of kernels/stas.cu's ring_word, vectorized (uint32)."""
    def u(v):
        return np.asarray(v, dtype=np.uint64) & MASK

    h = (u(seed) ^ ((u(cluster_id) * 0x27D4EB2F) & MASK) ^ (((u(src) + 1) * 0xC2B2AE3D) & MASK)
         ^ ((u(rnd) * 0x85EBCA77) & MASK))
    h ^= h >> 16
    h = (h * 0x7FEB352D) & MASK
    h ^= h >> 15
    h = (h * 0x846CA68B) & MASK
    h ^= h >> 16
    return h.astype(np.uint32)


def expected_message(seed: int, cluster_id: int, src: int, rnd: int, words: int, *, corrupt: bool = False) -> np.ndarray:
    """The words block ``src`` of cluster ``cluster_id`` sends in round ``rnd``."""
    w = np.arange(words, dtype=np.uint64)
    msg = (np.uint64(ring_word(seed, cluster_id, src, rnd)) ^ ((w * WORD_MUL) & MASK)).astype(np.uint32)
    if corrupt:
        msg[0] ^= 1
    return msg


@dataclass(frozen=True)
class RingConfig:
    cluster: int
    message_bytes: int
    via: str = "dsmem"
    vec: int = 16  # st.async width (dsmem)
    slots: int = 2  # receive buffers per block
    threads: int = 256
    compile_time_cluster: bool = False  # __cluster_dims__ instead of LaunchConfig(cluster=...)

    @staticmethod
    def make(cluster: int, message_bytes: int, *, via: str = "dsmem", vec: int = 16, slots: int = 2,
             threads: int = 256, compile_time_cluster: bool = False) -> RingConfig:
        clusters_mod.check_size(cluster)
        if cluster < 2:
            raise ArgumentError(f"a ring needs at least 2 blocks per cluster, got {cluster}")
        if via not in VIAS:
            raise ArgumentError(f"via must be one of {', '.join(VIAS)}, got {via!r}")
        if vec not in VECS:
            raise ArgumentError(f"vec (st.async width) must be 4, 8 or 16 bytes, got {vec}")
        if slots not in SLOTS:
            raise ArgumentError(f"slots must be 1, 2 or 4 receive buffers, got {slots}")
        if threads % 32 or not 32 <= threads <= 1024:
            raise ArgumentError(f"threads must be a multiple of 32 in [32, 1024], got {threads}")
        if isinstance(message_bytes, bool) or not isinstance(message_bytes, int) or message_bytes < 16 \
                or message_bytes % 16:
            raise ArgumentError(f"message_bytes must be a positive multiple of 16, got {message_bytes!r}")
        if compile_time_cluster and via != "dsmem":
            raise ArgumentError(f"compile_time_cluster applies to the st.async ring (via='dsmem'), got via={via!r}")
        return RingConfig(cluster, message_bytes, via, vec, slots, threads, compile_time_cluster)

    @property
    def shmem(self) -> int:
        return self.slots * self.message_bytes if self.via == "dsmem" else 0

    def name_expression(self) -> str:
        if self.via == "global":
            return f"global_ring<{self.threads}, {self.slots}>"
        if self.compile_time_cluster:
            return f"stas_ring_fixed<{self.cluster}, {self.threads}, {self.vec}, {self.slots}>"
        return f"stas_ring<{self.threads}, {self.vec}, {self.slots}>"

    def label(self) -> str:
        return (f"st.async v{self.vec}" if self.via == "dsmem" else "global+flags") + f" x{self.slots}"


def module(arch: str | None = None, *, threads: int = 256, fixed: tuple[int, ...] = ()) -> build.Module:
    """stas.cu with every runtime-cluster variant for ``threads`` (and fixed-cluster ones for ``fixed`` sizes)."""
    target = device.parse_arch(arch) if arch is not None else device.current().arch
    if device.cc_of_arch(target) < clusters_mod.MIN_CC:
        raise ArgumentError(f"st.async and clusters need compute capability 9.0; {target} is below it")
    names = [f"stas_ring<{threads}, {v}, {s}>" for v in VECS for s in SLOTS]
    names += [f"global_ring<{threads}, {s}>" for s in SLOTS]
    names += [f"stas_ring_fixed<{c}, {threads}, {v}, {s}>" for c in fixed for v in VECS for s in SLOTS]
    return build.compile(build.read_kernel("stas.cu"), arch=target, name_expressions=tuple(names), name="stas")


def _kernel(cfg: RingConfig, arch: str):
    return _kernel_for(cfg, arch, build.hang_timeout_ns())  # a new build when the hang switch changes


@functools.cache
def _kernel_for(cfg: RingConfig, arch: str, hang_ns: int):
    fixed = (cfg.cluster,) if cfg.compile_time_cluster else ()
    return module(arch, threads=cfg.threads, fixed=fixed).kernel(cfg.name_expression())


@dataclass
class Ring:
    """A ring ready to launch repeatedly: compiled kernel, counters, optional last-message buffer."""

    cfg: RingConfig
    clusters: int
    rounds: int
    stream: object
    keep_last: bool = True
    owns_stream: bool = False  # prepare() made the stream: close() closes it
    _bufs: dict = field(default_factory=dict, repr=False)
    _launches: int = 0  # since the global ring's flags were last zeroed (they count rounds across launches)
    _flag_rounds: int = 0  # the rounds per launch the flags have counted in

    @property
    def blocks(self) -> int:
        return self.clusters * self.cfg.cluster

    @property
    def bytes_per_launch(self) -> int:
        """Bytes received over the whole launch (every block receives one message per round)."""
        return self.blocks * self.rounds * self.cfg.message_bytes

    def _alloc(self, name: str, nbytes: int):
        from cuda.core import Device

        if name not in self._bufs:
            self._bufs[name] = Device(self.stream.device.device_id).allocate(max(nbytes, 4), stream=self.stream)
        return self._bufs[name]

    def _zero(self, name: str, nbytes: int):
        buf = self._alloc(name, nbytes)
        buf.fill(0, stream=self.stream)
        return buf

    def launch(self, *, seed: int = 0, corrupt_round: int | None = None) -> None:
        """Queue one run of ``rounds`` rounds. Errors add up over launches until :meth:`reset_errors`."""
        check_rounds(self.rounds)
        if corrupt_round is not None and (isinstance(corrupt_round, bool) or not isinstance(corrupt_round, int)
                                          or not 0 <= corrupt_round < NO_CORRUPTION):
            raise ArgumentError(f"corrupt_round must be a round index in [0, 2^32 - 1), got {corrupt_round!r}")
        facts = device.require(clusters_mod.MIN_CC, "the STAS ring")
        cfg = self.cfg
        kernel = _kernel(cfg, facts.arch)
        words = cfg.message_bytes // 4
        errors = self._bufs["errors"] if "errors" in self._bufs else self._zero("errors", 4)
        last = self._alloc("last", self.blocks * cfg.message_bytes) if self.keep_last else None
        args = [np.uint32(cfg.message_bytes), np.uint32(self.rounds), np.uint32(seed & MASK),
                np.uint32(NO_CORRUPTION if corrupt_round is None else corrupt_round), int(errors.handle),
                int(last.handle) if last is not None else 0]
        if cfg.via == "global":
            if ("filled" not in self._bufs or self.rounds != self._flag_rounds
                    or (self._launches + 1) * self.rounds >= 1 << 32):
                self._zero("filled", self.blocks * cfg.slots * 4)
                self._zero("ready", self.blocks * cfg.slots * 4)
                self._launches = 0
                self._flag_rounds = self.rounds
            args += [int(self._alloc("gbuf", self.blocks * cfg.slots * words * 4).handle),
                     int(self._bufs["filled"].handle), int(self._bufs["ready"].handle),
                     np.uint32(self._launches * self.rounds)]
            self._launches += 1
        if cfg.compile_time_cluster:
            clusters_mod.launch(kernel, *args, block=cfg.threads, stream=self.stream, shmem=cfg.shmem, blocks=self.blocks)
        else:
            clusters_mod.launch(kernel, *args, block=cfg.threads, stream=self.stream, shmem=cfg.shmem,
                                clusters=self.clusters, cluster=cfg.cluster)

    def reset_errors(self) -> None:
        self._zero("errors", 4)

    def errors(self) -> int:
        from . import arrays

        return int(arrays.to_host(int(self._bufs["errors"].handle), 4, self.stream).view(np.uint32)[0])

    def last(self) -> np.ndarray:
        from . import arrays

        words = self.cfg.message_bytes // 4
        raw = arrays.to_host(int(self._bufs["last"].handle), self.blocks * words * 4, self.stream)
        return raw.view(np.uint32).reshape(self.blocks, words)

    def close(self) -> None:
        for buf in self._bufs.values():
            buf.close()
        self._bufs.clear()
        if self.owns_stream:
            self.stream.close()
            self.owns_stream = False


def check_rounds(rounds) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds < 1 << 31:
        raise ArgumentError(f"rounds must be an integer in [1, 2^31), got {rounds!r}")
    return rounds


def prepare(cluster: int = 2, message_bytes: int = 4096, rounds: int = 100, *, via: str = "dsmem", vec: int = 16,
            slots: int = 2, threads: int = 256, clusters: int | None = None, compile_time_cluster: bool = False,
            keep_last: bool = True, stream=None) -> Ring:
    """Check everything, compile, and size the grid: ``clusters`` defaults to as many as can be resident."""
    cfg = RingConfig.make(cluster, message_bytes, via=via, vec=vec, slots=slots, threads=threads,
                          compile_time_cluster=compile_time_cluster)
    check_rounds(rounds)
    facts = device.require(clusters_mod.MIN_CC, "the STAS ring")
    if cfg.shmem + 1024 > facts.smem_per_block_optin:
        raise ArgumentError(f"{cfg.slots} x {cfg.message_bytes} B receive buffers do not fit the "
                            f"{facts.smem_per_block_optin // 1024} KiB of shared memory a block may use")
    from cuda.core import Device

    s = stream if stream is not None else Device(facts.device_id).create_stream()
    kernel = _kernel(cfg, facts.arch)
    # The driver's cluster queries refuse a kernel compiled with __cluster_dims__: ask them about its
    # launch-time twin (the same code and resources) instead.
    probe = _kernel(replace(cfg, compile_time_cluster=False), facts.arch) if cfg.compile_time_cluster else kernel
    clusters_mod.check_fits(probe, cfg.cluster, block=cfg.threads, shmem=cfg.shmem, stream=s,
                            what=f"the {cfg.label()} ring")
    active = clusters_mod.max_active_clusters(probe, cfg.cluster, block=cfg.threads, shmem=cfg.shmem, stream=s)
    if active < 1:
        raise ArgumentError(f"no cluster of {cfg.cluster} blocks ({cfg.threads} threads, {cfg.shmem} B of shared "
                            f"memory each) can be resident on {facts.name}")
    if clusters is None:
        clusters = active
    elif isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 1:
        raise ArgumentError(f"clusters must be a positive integer, got {clusters!r}")
    elif via == "global" and clusters > active:
        raise ArgumentError(f"the global-memory ring spins on flags between blocks: at most {active} clusters of "
                            f"{cluster} can be resident at once, got clusters={clusters}")
    return Ring(cfg, clusters, rounds, s, keep_last, owns_stream=stream is None)


@dataclass
class RingResult:
    cfg: RingConfig
    clusters: int
    rounds: int
    errors: int
    last: np.ndarray | None


def ring(cluster: int = 2, message_bytes: int = 4096, rounds: int = 100, *, seed: int = 0,
         corrupt_round: int | None = None, **kwargs) -> RingResult:
    """Run the ring once (synchronously) and return the error count and each block's last message."""
    r = prepare(cluster, message_bytes, rounds, **kwargs)
    try:
        r.launch(seed=seed, corrupt_round=corrupt_round)
        r.stream.sync()
        return RingResult(r.cfg, r.clusters, rounds, r.errors(), r.last() if r.keep_last else None)
    finally:
        r.close()


def expected_last(result: RingResult, seed: int = 0, corrupt_round: int | None = None) -> np.ndarray:
    """What every block must hold as its last message: its left neighbour's, round rounds - 1."""
    c, words, rnd = result.cfg.cluster, result.cfg.message_bytes // 4, result.rounds - 1
    rows = []
    for b in range(result.clusters * c):
        cid, rank = divmod(b, c)
        src = (rank + c - 1) % c
        rows.append(expected_message(seed, cid, src, rnd, words, corrupt=(corrupt_round == rnd and src == 0)))
    return np.stack(rows)
