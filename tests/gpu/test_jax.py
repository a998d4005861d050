"""JAX arrays in and out: the results are right, come back as JAX arrays, and the work is ordered
after JAX's own producer of the input and finished before JAX reads the result (no stream of ours
that JAX does not know about is left running)."""

import os

import numpy as np
import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX takes 75% of the GPU's memory otherwise

import asynccopy
from asynccopy import stream


@pytest.fixture(scope="module")
def jnp():
    jnp = pytest.importorskip("jax.numpy")
    import jax

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    return jnp


def test_run_follows_jax_producer_and_hands_back_a_finished_jax_array(jnp, rng):
    import jax

    host = rng.uniform(-1, 1, size=4096 * 40 + 5).astype(np.float32)
    x = jnp.sin(jnp.asarray(host))  # still running on JAX's stream when run() is called
    y = asynccopy.run(x, "ldgsts", stages=3, intensity=0)
    assert isinstance(y, jax.Array)
    z = y * 2.0  # JAX reads the result at once, on its own stream
    np.testing.assert_array_equal(np.asarray(z), 2.0 * np.asarray(x))  # JAX's sin, finished before we read it
    w = asynccopy.run(x, "tma_1d_pipeline" if asynccopy.device.current().cc >= (9, 0) else "cg", stages=3, intensity=2)
    assert stream.matches_reference(np.asarray(w), np.asarray(x), 2, 4096)


@pytest.mark.cc(9, 0)
def test_tma_box_load_of_a_jax_array(jnp, rng):
    from asynccopy import tma

    host = rng.integers(1, 60000, size=(40, 64)).astype(np.uint16)
    x = jnp.asarray(host)
    got = tma.load_box(x, (16, 64), (32, 0)).view(np.uint16)[: 16 * 64].reshape(16, 64)
    want = np.zeros((16, 64), np.uint16)
    want[:8] = host[32:]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_gemm_of_jax_arrays(jnp, rng, dtype):
    import jax

    a = jnp.asarray(rng.standard_normal((300, 200)).astype(np.float32)).astype(dtype)
    b = jnp.sin(jnp.asarray(rng.standard_normal((200, 136)).astype(np.float32))).astype(dtype)  # still running
    c = asynccopy.gemm(a, b)
    assert isinstance(c, jax.Array) and c.dtype == a.dtype and c.shape == (300, 136)
    d = np.asarray((c * 2).astype(jnp.float32)) / 2  # JAX reads the result at once, on its own stream
    ref = np.asarray(a.astype(jnp.float32), np.float64) @ np.asarray(b.astype(jnp.float32), np.float64)
    tol = {"bfloat16": 8e-3, "float16": 1.5e-3, "float32": 2e-5}[dtype]
    assert np.linalg.norm(d - ref) / np.linalg.norm(ref) < tol
