"""The examples without a GPU: each imports, and its kernels compile with what it claims to show
(tests/gpu/test_examples.py runs them)."""

import importlib.util
import pathlib

import pytest

import asynccopy
from tests import sass as sass_of

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_has_a_test():
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == ["custom_pipeline"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_custom_pipeline_compiles_to_a_cp_async_ring(arch):
    example = load("custom_pipeline")
    name = example.name_expression()
    assert name == "row_sums<256, 8192, 4>"
    module = asynccopy.compile(example.SOURCE, arch=arch, name_expressions=[name], name="row_sums")
    body = sass_of.by_function(module.sass())[module.symbol_mapping[name]]
    assert "LDGSTS.E.BYPASS.128" in body  # cp.async.cg, 16 B per copy
    assert "LDGDEPBAR" in body and "DEPBAR" in body  # commit_group and wait_group
