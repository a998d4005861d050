"""The maintainers' scripts (scripts/*.py) loaded as modules, for their CPU tests."""

import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"


def load(name: str):
    """scripts/``name``.py as a module (run fresh each call: a test's changes to it stay its own)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
