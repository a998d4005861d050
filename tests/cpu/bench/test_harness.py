"""The timing harness without a GPU (asynccopy.bench.harness): CUDA-event timing on a fake stream, the
rotation past L2, the copy rate's arithmetic, and the sweep loop's order, skips and clean-up with a stub
timer."""

import math
from dataclasses import replace

import pytest

from asynccopy import device
from asynccopy.bench import harness
from asynccopy.bench.harness import Case, Skip, Timed

# ---------------------------------------------------------------------------------------------
# time_ms on a fake stream


class FakeEvent:
    def __init__(self, stream, t):
        self.stream, self.t, self.synced = stream, t, False

    def __sub__(self, other):  # cuda.core: end - start is the elapsed time in ms
        return self.t - other.t

    def sync(self):
        self.synced = True


class FakeStream:
    """Records events; each call of the timed function advances its clock by the next duration."""

    def __init__(self, durations=()):
        self.clock, self.events, self.durations, self.closed = 0.0, [], list(durations), False

    def record(self, options=None):
        assert options is not None and options.timing_enabled
        e = FakeEvent(self, self.clock)
        self.events.append(e)
        return e

    def advance(self):
        self.clock += self.durations.pop(0) if self.durations else 1.0

    def close(self):
        self.closed = True


@pytest.fixture
def holds(monkeypatch):
    """The hold kernels time_ms queues: (stream, ns, events recorded before it)."""
    got = []
    monkeypatch.setattr(harness, "hold", lambda stream, ns: got.append((stream, ns, len(stream.events))))
    return got


def test_time_ms_warms_up_then_times_each_rep_between_two_events(holds):
    s = FakeStream(durations=[100, 100, 2, 3, 5, 7])
    calls = []

    def fn(i):
        calls.append(i)
        s.advance()

    got = harness.time_ms(fn, s, warmup=2, reps=4)
    assert calls == [0, 1, 2, 3, 4, 5]  # the reps go on counting after the warm-up (they rotate the inputs)
    assert got == [2, 3, 5, 7]  # the warm-up's 100s are not timed
    assert len(s.events) == 8 and s.events[-1].synced  # the last event is waited for, and only it
    assert not any(e.synced for e in s.events[:-1])


def test_the_reps_are_queued_behind_a_hold_longer_than_the_host_needs_to_queue_them(holds, monkeypatch):
    s = FakeStream()
    clock = iter([0.0, 0.010, 1.0, 1.004, 2.0, 2.003])  # the warm-up calls take 10, 4 and 3 ms on the host
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(clock))
    harness.time_ms(lambda i: s.advance(), s, warmup=3, reps=5)
    assert len(holds) == 1 and holds[0][0] is s and holds[0][2] == 0  # before the first event
    assert holds[0][1] == pytest.approx(1e9 * (2 * 5 * 0.003 + 50e-6))  # 2 x reps x the fastest warm-up
    harness.time_ms(lambda i: s.advance(), s, warmup=0, reps=2)
    assert len(holds) == 1  # no warm-up, nothing to go by: no hold


def test_median():
    assert harness.median([3.0, 1.0, 2.0]) == 2.0 and harness.median([4.0, 1.0, 2.0, 3.0]) == 2.5


# ---------------------------------------------------------------------------------------------
# The rotation and the copy rate


class FakeBuffer:
    def __init__(self, n):
        self.n, self.closed, self.copies = n, False, []

    def copy_to(self, dst, stream):
        self.copies.append((dst, stream))

    def close(self):
        self.closed = True


class FakeScratch:
    def __init__(self, l2_bytes):
        self.facts = replace(device.KNOWN["H200"], l2_bytes=l2_bytes, device_id=0)
        self.fills = []

    def alloc(self, n):
        return FakeBuffer(n)

    def fill_random(self, buf, n, seed):
        self.fills.append(("random", buf, n, seed))

    def fill_value(self, buf, n, value):
        self.fills.append(("value", buf, n, value))


@pytest.mark.parametrize("n, l2_mib", [(1 << 20, 60), (1 << 18, 50), (3 << 20, 6), (1 << 26, 60)])
def test_the_rotation_touches_more_than_three_l2s_between_two_uses_of_a_pair(n, l2_mib):
    scratch = FakeScratch(l2_mib << 20)
    rot = harness.make_rotation(scratch, n, seed=40)
    pair, l2 = 2 * 4 * n, l2_mib << 20
    if pair >= 3 * l2:
        assert rot.sets == 1  # one pair is past L2 already
    else:
        assert (rot.sets - 1) * pair >= 3 * l2  # what the other pairs touch flushes a pair from L2 ...
        assert (rot.sets - 2) * pair < 3 * l2   # ... and no more pairs are made than that needs
    assert rot.n == n and all(b.n == n for b in rot.inputs + rot.outputs)
    randoms = [(buf, seed) for kind, buf, _, seed in scratch.fills if kind == "random"]
    assert randoms == [(b, 40 + k) for k, b in enumerate(rot.inputs)]  # a seed of its own per input
    poisoned = [(buf, v) for kind, buf, _, v in scratch.fills if kind == "value"]
    assert [b for b, _ in poisoned] == rot.outputs and all(math.isnan(v) for _, v in poisoned)


def test_a_rotation_hands_out_its_pairs_in_turn_and_closes_them():
    rot = harness.Rotation(4, [FakeBuffer(4) for _ in range(3)], [FakeBuffer(4) for _ in range(3)])
    assert [rot.pair(i) for i in range(5)] == [(rot.inputs[i % 3], rot.outputs[i % 3]) for i in range(5)]
    rot.close()
    assert all(b.closed for b in rot.inputs + rot.outputs)


def test_copy_bandwidth_counts_bytes_read_and_written(monkeypatch):
    rot = harness.Rotation(1 << 20, [FakeBuffer(1), FakeBuffer(1)], [FakeBuffer(1), FakeBuffer(1)])
    s = FakeStream()

    def fake_time_ms(fn, stream, *, warmup, reps):
        assert stream is s and (warmup, reps) == (2, 5)
        for i in range(warmup + reps):
            fn(i)
        return [3.0, 2.0, 2.0, 9.0, 1.0]

    monkeypatch.setattr(harness, "time_ms", fake_time_ms)
    ms, gbps = harness.copy_bandwidth(rot, s, warmup=2, reps=5)
    assert ms == 2.0 and gbps == pytest.approx(2 * 4 * (1 << 20) / 2e-3 / 1e9)
    assert [len(b.copies) for b in rot.inputs] == [4, 3]  # 7 copies, alternating pairs
    assert rot.inputs[0].copies[0] == (rot.outputs[0], s) and rot.inputs[1].copies[0] == (rot.outputs[1], s)


def test_a_workspace_closes_its_rotation_and_its_stream():
    rot = harness.Rotation(8, [FakeBuffer(8)], [FakeBuffer(8)])
    s = FakeStream()
    ws = harness.Workspace(device.KNOWN["H200"], s, None, rot, seed=1, copy_ms=1.0, copy_gbps=1.0)
    assert ws.n == 8
    ws.close()
    assert s.closed and rot.inputs[0].closed and rot.outputs[0].closed


# ---------------------------------------------------------------------------------------------
# The sweep loop, with a stub timer


@pytest.fixture
def stub_timer(monkeypatch):
    """time_ms that runs fn(0..reps-1) and returns [1, 2, ..., reps] x the point's scale."""
    calls = []

    def fake_time_ms(fn, stream, *, warmup, reps):
        calls.append((stream, warmup, reps))
        for i in range(reps):
            fn(i)
        return [float(i + 1) for i in range(reps)]

    monkeypatch.setattr(harness, "time_ms", fake_time_ms)
    return calls


def _case(log, label, points=(0, 8), skip=None, bad_verify=False, bad_run=False, describe=None):
    def prepare():
        log.append((label, "prepare"))
        if skip:
            raise Skip(skip)

    def run(point, i):
        log.append((label, "run", point, i))
        if bad_run:
            raise RuntimeError("launch failed")

    def verify():
        log.append((label, "verify"))
        if bad_verify:
            raise AssertionError(f"{label}: 3 words wrong")

    def finish():
        log.append((label, "finish"))

    return Case(label, points, prepare, run, verify, finish, describe, tag=label)


def test_sweep_prepares_times_verifies_and_finishes_each_case_in_order(stub_timer):
    log, lines = [], []
    s = object()
    timed = harness.sweep([_case(log, "a"), _case(log, "b", points=(3,))], s, warmup=1, reps=2, progress=lines.append)
    assert log == [("a", "prepare"), ("a", "run", 0, 0), ("a", "run", 0, 1), ("a", "run", 8, 0), ("a", "run", 8, 1),
                   ("a", "verify"), ("a", "finish"),
                   ("b", "prepare"), ("b", "run", 3, 0), ("b", "run", 3, 1), ("b", "verify"), ("b", "finish")]
    assert stub_timer == [(s, 1, 2)] * 3  # one timing per point, on the suite's stream
    assert [(t.case.tag, t.point, t.samples) for t in timed] == [("a", 0, [1.0, 2.0]), ("a", 8, [1.0, 2.0]),
                                                                 ("b", 3, [1.0, 2.0])]
    assert timed[0].ms == 1.5
    assert lines[0].startswith("[  1/2] a: 1.500 1.500 ms  (") and lines[1].startswith("[  2/2] b: 1.500 ms  (")


def test_a_skipped_case_is_finished_reported_and_left_out(stub_timer):
    log, lines = [], []
    timed = harness.sweep([_case(log, "a", skip="16 blocks do not fit one GPC"), _case(log, "b")], None, reps=1,
                          progress=lines.append)
    assert log[:2] == [("a", "prepare"), ("a", "finish")]  # no run, no verify
    assert [t.case.label for t in timed] == ["b", "b"]
    assert lines[0] == "[  1/2] a: skipped (16 blocks do not fit one GPC)"


@pytest.mark.parametrize("where", ["verify", "run"])
def test_a_failing_case_still_frees_what_it_made_and_stops_the_sweep(stub_timer, where):
    log = []
    cases = [_case(log, "a", bad_verify=where == "verify", bad_run=where == "run"), _case(log, "b")]
    with pytest.raises(AssertionError if where == "verify" else RuntimeError):
        harness.sweep(cases, None, reps=1, progress=lambda _: None)
    assert log[-1] == ("a", "finish") and ("b", "prepare") not in log


def test_a_case_describes_its_own_progress_line(stub_timer):
    lines = []
    case = _case([], "c", points=("dsmem", "global"), describe=lambda got: f"{sorted(got)} {len(got['dsmem'])} samples")
    harness.sweep([case], None, reps=3, progress=lines.append)
    assert lines[0].startswith("[  1/1] c: ['dsmem', 'global'] 3 samples  (")


def test_timed_takes_the_median():
    assert Timed(None, 0, [5.0, 1.0, 3.0]).ms == 3.0


def test_rotation_sets_put_three_l2s_between_two_uses_of_a_set():
    from asynccopy.bench.harness import rotation_sets

    l2 = 60 << 20
    assert rotation_sets(3 * l2, l2) == 1 and rotation_sets(8 << 30, l2) == 1  # one set is enough already
    for size in (1 << 10, 1 << 20, 37 << 20, 179 << 20):
        n = rotation_sets(size, l2)
        assert (n - 1) * size >= 3 * l2  # the other sets, touched between two uses of one
    assert rotation_sets(1 << 20, l2, 64) == 64


def test_rounds_time_every_case_in_turn_and_finish_each_once(monkeypatch):
    from asynccopy.bench import harness

    calls = []

    def fake_time_ms(fn, stream, *, warmup, reps):
        fn(0)
        calls.append((warmup, reps))
        return [1.0] * reps

    monkeypatch.setattr(harness, "time_ms", fake_time_ms)
    order, finished = [], []

    def case(label, skip=False):
        def prepare():
            if skip:
                raise harness.Skip("cannot run here")

        return harness.Case(label, (None,), prepare, lambda p, i: order.append(label),
                            finish=lambda: finished.append(label))

    lines = []
    got = harness.sweep([case("a"), case("b", skip=True), case("c")], None, warmup=3, reps=10, rounds=3,
                        progress=lines.append)
    assert order == ["a", "c"] * 3  # in turn, round after round; the skipped case never runs
    assert calls == [(3, 4), (3, 4), (1, 3), (1, 3), (1, 3), (1, 3)]  # 10 reps as 4 + 3 + 3; one warm-up run after
    assert [t.case.label for t in got] == ["a", "c"] and all(len(t.samples) == 10 for t in got)
    assert sorted(finished) == ["a", "b", "c"] and any("skipped (cannot run here)" in x for x in lines)
    calls.clear()
    got = harness.sweep([case("a")], None, warmup=1, reps=2, rounds=3, progress=lines.append)
    assert calls == [(1, 1), (1, 1)] and len(got[0].samples) == 2  # no more rounds than reps


def test_settling_runs_the_first_case_alone_before_the_rounds(monkeypatch):
    from asynccopy.bench import harness

    monkeypatch.setattr(harness, "time_ms", lambda fn, stream, *, warmup, reps: (fn(0), [1.0] * reps)[1])
    order, syncs = [], []

    class Stream:
        def sync(self):
            syncs.append(len(order))

    cases = [harness.Case(x, (None,), lambda: None, lambda p, i, x=x: order.append(x)) for x in "ab"]
    lines = []
    harness.sweep(cases, Stream(), warmup=1, reps=2, rounds=2, progress=lines.append, settle_s=0.05)
    settled = order.index("b") - 1  # then one run of each case per round
    assert settled >= 4 and set(order[:settled]) == {"a"} and order[settled:] == ["a", "b", "a", "b"]
    assert syncs and all(n % 4 == 0 for n in syncs)  # a sync every four runs, none past the settling
    assert any(f"settled the clock: {settled} runs of a" in x for x in lines)
    order.clear()
    harness.sweep(cases, Stream(), warmup=1, reps=2, rounds=2, progress=lines.append)
    assert order == ["a", "b", "a", "b"]  # no settling unless asked
    order.clear()
    harness.sweep(cases, Stream(), warmup=1, reps=2, rounds=1, progress=lines.append, settle_s=0.05)
    settled = order.index("b") - 1  # one case after the other: the first settles, then is timed
    assert settled >= 4 and set(order[:settled]) == {"a"} and order[settled:] == ["a", "b"]
