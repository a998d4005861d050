import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _compile_cache(tmp_path_factory):
    """Every test session compiles into its own cache directory (never the user's)."""
    old = os.environ.get("ASYNCCOPY_CACHE_DIR")
    os.environ["ASYNCCOPY_CACHE_DIR"] = str(tmp_path_factory.mktemp("asynccopy-cache"))
    yield
    if old is None:
        os.environ.pop("ASYNCCOPY_CACHE_DIR", None)
    else:
        os.environ["ASYNCCOPY_CACHE_DIR"] = old
