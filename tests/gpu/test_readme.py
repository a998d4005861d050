"""The README walked on the GPU: every row of its command-line table that needs a GPU runs as shown
(optional parts left out and put in), made small by options the command already has so the walk takes
seconds; and the Python example of "From Python" runs on a smaller array. The rows that need no GPU are
walked by tests/cpu/test_readme.py."""

import re
from pathlib import Path

import pytest

from asynccopy import cli

README = Path(__file__).resolve().parents[2] / "README.md"

# options appended to keep each suite small; the command as the README shows it is otherwise untouched
SMALL = {
    "bench": ["--quick", "--mechanisms", "sync,ldgsts,tma_2d", "--size-mib", "16"],
    "bench stream": ["--quick", "--mechanisms", "sync,ldgsts,tma_2d", "--size-mib", "16"],
    "bench stas": ["--cluster-sizes", "2", "--message-bytes", "4096", "--reps", "2"],
    "bench chunks": ["--chunks", "4096", "--size-mib", "16", "--reps", "2"],
    "bench gemm": ["--shapes", "256x512x320", "--reps", "2", "--warmup", "1"],
}


def _gpu_rows() -> list[tuple[str, str]]:
    rows = []
    for line in README.read_text().splitlines():
        m = re.match(r"\|\s*`(asynccopy [^`]*)`\s*\|.*\|\s*([^|]+?)\s*\|\s*$", line)
        if m and not m.group(2).startswith("no"):
            rows.append((m.group(1), m.group(2)))
    return rows


def _variants(command: str, tmp: Path) -> list[list[str]]:
    bare = re.sub(r"\s*\[[^\]]*\]", "", command).split()[1:]
    full = re.sub(r"[\[\]]", "", command).replace("t.png", str(tmp / "t.png")).split()[1:]
    return [bare] if bare == full else [bare, full]


def test_the_readme_names_gpu_commands():
    names = {c.split()[1] for c, _ in _gpu_rows()}
    assert {"bench", "trace"} <= names, names


@pytest.mark.parametrize("command, needs", _gpu_rows())
def test_a_readme_gpu_command_runs_as_shown(facts, command, needs, tmp_path, capsys):
    cc = re.match(r"CC (\d+)\.(\d+)", needs)
    if cc and tuple(facts.cc) < (int(cc.group(1)), int(cc.group(2))):
        pytest.skip(f"{command} needs {needs}; {facts.name} is CC {facts.cc[0]}.{facts.cc[1]}")
    for argv in _variants(command, tmp_path):
        key = " ".join(argv[:2]) if argv[0] == "bench" and len(argv) > 1 else argv[0]
        argv = argv + SMALL.get(key, [])
        assert cli.main(argv) == 0, f"asynccopy {' '.join(argv)} failed: {capsys.readouterr().err[-2000:]}"
        assert capsys.readouterr().out.strip(), f"asynccopy {' '.join(argv)} printed nothing"
        if "--png" in argv:
            png = tmp_path / "t.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            png.unlink()


def test_the_readme_python_example_runs():
    cp = pytest.importorskip("cupy")
    text = README.read_text()
    code = re.search(r"## From Python\s+```python\n(.*?)```", text, re.S).group(1)
    assert "1 << 28" in code, "the example's array size changed: update this walk"
    scope: dict = {}
    exec(compile(code.replace("1 << 28", "1 << 20"), "README.md", "exec"), scope)
    x, y = scope["x"], scope["y"]
    assert isinstance(y, cp.ndarray) and y.shape == x.shape and y.dtype == x.dtype
    ref = scope["asynccopy"].run(x, "sync", intensity=8)  # the same arithmetic, loaded synchronously
    assert bool((y == ref).all())
