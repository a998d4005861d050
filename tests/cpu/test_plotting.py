"""asynccopy.plotting: matplotlib headless, or an error that names the missing package."""

import sys

import pytest

from asynccopy import plotting
from asynccopy.errors import ArgumentError


def test_pyplot_is_headless():
    pytest.importorskip("matplotlib")
    import matplotlib

    plt = plotting.pyplot()
    assert plt.__name__ == "matplotlib.pyplot" and matplotlib.get_backend().lower() == "agg"


def test_without_matplotlib_the_error_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(ArgumentError, match=r"^drawing a PNG needs matplotlib: pip install matplotlib$"):
        plotting.pyplot()
