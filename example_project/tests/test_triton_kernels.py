"""A Triton kernel (fused softmax), tuned on a GPU, or in Triton's interpreter on a machine without one."""
import warnings

import numpy as np
import pytest

pytest.importorskip("triton", reason="pip install 'pytest-autotune[triton]' (the test extra installs it on Linux x86-64)")
torch = pytest.importorskip("torch")

from example_kernels import LOCKDIR, rng  # noqa: E402
from example_kernels.triton_softmax import (SOFTMAX_PARAMS, SOFTMAX_RESTRICTIONS, SOFTMAX_SHAPE,  # noqa: E402
                                            softmax, softmax_grid, softmax_kernel, softmax_reference)


# Interpreter timings are Python running every program of the grid: on a shared 2-core machine three
# consecutive gates of this kernel read -3.7 %, +13.6 % and +56.3 % against its lock, and say nothing about a
# GPU. So without a GPU the interpreter proves the kernel's result and reports its timing as information
# (--autotune-interpreter-timing=info); the performance verdict is the static gate's: the binary Triton builds
# for each architecture in autotune.lock/ (a GPU lock's entry, or the static baselines in autotune.lock/static/)
# against the profile recorded there.
@pytest.mark.tune(params=SOFTMAX_PARAMS, restrictions=SOFTMAX_RESTRICTIONS, budget=12,
                  measure={"min_iterations": 5, "max_iterations": 10})
def test_softmax(autotune):
    n_rows, n_cols = SOFTMAX_SHAPE
    x = rng(7).standard_normal(SOFTMAX_SHAPE).astype(np.float32)
    out = np.zeros_like(x)
    result = autotune.triton(softmax_kernel, softmax_grid(n_rows), [out, x, n_rows, n_cols],
                             expected=[softmax_reference(x), None, None, None], rtol=1e-5, atol=1e-6)
    assert result.params["BLOCK_COLS"] >= n_cols or result.params["BLOCK_COLS"] in SOFTMAX_PARAMS["BLOCK_COLS"]


def test_shipped_softmax_runs_the_locked_configuration():
    from pytest_autotune import locked_triton_config
    from pytest_autotune.lock.lookup import LockLookupError

    try:
        locked_triton_config("softmax_kernel", lockdir=LOCKDIR)
        tuned_here = True
    except LockLookupError:  # a device the lock does not know: the default configuration, with a warning
        tuned_here = False
    x = torch.from_numpy(rng(8).standard_normal(SOFTMAX_SHAPE).astype(np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = softmax(x)
    np.testing.assert_allclose(y.numpy(), softmax_reference(x.numpy()), rtol=1e-5, atol=1e-6)
    fallback = [w for w in caught if "using the default parameters" in str(w.message)]
    assert bool(fallback) != tuned_here
