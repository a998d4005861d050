"""The examples, run on the GPU (tests/cpu/test_examples.py compiles them)."""

import pytest

from tests.cpu.test_examples import load


@pytest.mark.cc(8, 0)  # cp.async
def test_custom_pipeline_runs(any_xp):
    load("custom_pipeline").main()  # asserts its row sums against a float64 reference
