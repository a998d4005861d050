"""The README's commands, walked: every `asynccopy ...` command of its command-line table that needs no
GPU runs as shown (optional parts in [brackets] both left out and put in, a named PNG written to a
temporary folder). The GPU ones are walked by tests/gpu/test_readme.py."""

import re
from pathlib import Path

import pytest

from asynccopy import cli

README = Path(__file__).resolve().parents[2] / "README.md"


def _table_commands():
    """(command text, needs a GPU) of each row of the README's command-line table."""
    rows = []
    for line in README.read_text().splitlines():
        m = re.match(r"\|\s*`(asynccopy [^`]*)`\s*\|.*\|\s*([^|]+?)\s*\|\s*$", line)
        if m:
            rows.append((m.group(1), m.group(2)))
    assert len(rows) >= 10, f"the README's command table was not found ({len(rows)} rows)"
    return rows


def _variants(command: str, tmp: Path) -> list[list[str]]:
    """The command without its [optional] parts, and with them (a PNG goes to tmp)."""
    bare = re.sub(r"\s*\[[^\]]*\]", "", command).split()[1:]
    full = re.sub(r"[\[\]]", "", command).replace("t.png", str(tmp / "t.png")).split()[1:]
    return [bare] if bare == full else [bare, full]


CPU_COMMANDS = [c for c, gpu in _table_commands() if gpu == "no" or gpu.startswith("no ")]


def test_the_table_names_every_command_of_the_cli():
    listed = {c.split()[1] for c, _ in _table_commands()}
    assert listed >= {"bench", "mechanisms", "info", "plan", "simulate", "trace", "model-check", "tensormap",
                      "swizzle"}


@pytest.mark.parametrize("command", [c for c in CPU_COMMANDS if not c.startswith("asynccopy model-check")])
def test_a_readme_command_that_needs_no_gpu_runs_as_shown(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("asynccopy.device.has_gpu", lambda: False)
    for argv in _variants(command, tmp_path):
        if argv[0] == "info" and "--arch" not in argv:
            continue  # `asynccopy info` describes the local GPU: tests/gpu walks it
        if argv[0] in ("simulate",) and "--device" not in argv:
            continue
        assert cli.main(argv) == 0, f"asynccopy {' '.join(argv)} failed: {capsys.readouterr().err}"
        assert capsys.readouterr().out.strip(), f"asynccopy {' '.join(argv)} printed nothing"
        if "--png" in argv:
            assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
