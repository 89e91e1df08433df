"""Shared fixtures of the rhoscan PyTorch tests: devices, problems, tolerances.

CUDA cases run when PyTorch sees a GPU; otherwise they are skipped with the reason printed
(run pytest with -rs). With RHOSCAN_REQUIRE_CUDA=1 (the GPU script sets it) a missing GPU or a
rhoscan built without its CUDA backend is a failure, not a skip, so that a GPU run cannot pass
by skipping.
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rhoscan  # noqa: E402

REQUIRE_CUDA = os.environ.get("RHOSCAN_REQUIRE_CUDA") == "1"


def cuda_skip_reason():
    """Why the CUDA cases cannot run here ("" when they can)."""
    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch %s" % torch.__version__
    if "cuda" not in rhoscan.available_backends():
        return "rhoscan was built without a usable CUDA backend (available: %s)" % rhoscan.available_backends()
    return ""


def require_device(device):
    if device != "cuda":
        return
    reason = cuda_skip_reason()
    if reason:
        if REQUIRE_CUDA:
            pytest.fail("RHOSCAN_REQUIRE_CUDA=1 but " + reason)
        pytest.skip(reason)


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    require_device(request.param)
    return request.param


# Float dtypes tested per device: the CPU runs every dtype through the float64 reference backend
# (and the fast backend where built); CUDA runs what the GPU path is for.
DTYPES = {"cpu": [torch.float64, torch.float32, torch.bfloat16], "cuda": [torch.float32, torch.bfloat16]}

# SPEC.md, "Accuracy": RMS relative error bounds.
FORWARD_TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 5e-3, torch.float16: 5e-3}
GRAD_TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 5e-3, torch.float16: 5e-3}


def rms_rel(x, ref):
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    denom = ref.norm()
    return float((x - ref).norm() / denom) if denom > 0 else float((x - ref).norm())


def make_problem(B=2, H=3, Hv=1, T=6, L=5, E=4, seed=0, states=True, decay_shape=None,
                 device="cpu", dtype=torch.float64, state_dtype=None):
    """A random problem in [B, H, T, *] layout, values chosen so that every quantity is well
    conditioned (q > 0, decay in [0.1, 0.9], positive initial normaliser)."""
    g = torch.Generator().manual_seed(seed)
    state_dtype = state_dtype or (torch.float64 if dtype == torch.float64 else torch.float32)
    q = (torch.rand(B, H, T, L, generator=g, dtype=torch.float64) + 0.1).to(device, dtype)
    v = torch.randn(B, Hv, T, E, generator=g, dtype=torch.float64).to(device, dtype)
    decay = (torch.rand(H, L, generator=g, dtype=torch.float64) * 0.8 + 0.1).to(device, state_dtype)
    if decay_shape is not None:
        decay = decay.reshape(decay_shape)
    rho = rho_norm = None
    if states:
        rho = torch.randn(B, H, L, E, generator=g, dtype=torch.float64).to(device, state_dtype)
        rho_norm = (torch.rand(B, H, L, generator=g, dtype=torch.float64) + 0.5).to(device, state_dtype)
    return q, v, decay, rho, rho_norm


def to_bthl(x):
    """A [B, H, T, X] tensor stored sequence-first: a contiguous [B, T, H, X] tensor."""
    return x.transpose(1, 2).contiguous()


# A file whose every test was skipped (PyTorch 2 features on PyTorch 1.13, CUDA without a GPU)
# exits with $RHOSCAN_SKIP_EXIT_CODE when that is set, so that ctest reports it as skipped
# (SKIP_RETURN_CODE) instead of passed.
_outcomes = {"passed": 0, "failed": 0}


def pytest_runtest_logreport(report):
    if report.passed and report.when == "call":
        _outcomes["passed"] += 1
    elif report.failed:
        _outcomes["failed"] += 1


def pytest_sessionfinish(session, exitstatus):
    code = os.environ.get("RHOSCAN_SKIP_EXIT_CODE")
    if code and exitstatus == 0 and session.testscollected > 0 and not any(_outcomes.values()):
        session.exitstatus = int(code)
