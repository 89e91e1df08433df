"""PyTorch 2 integration: torch.library.opcheck on each op, torch.compile(fullgraph=True)
through forward and backward. Skipped (reason printed) on a PyTorch without these APIs
(Debian's 1.13); there the Meta kernels are tested in test_rho_attention.py."""
import pytest
import torch

import rhoscan
from conftest import make_problem, to_bthl

has_opcheck = hasattr(torch, "library") and hasattr(torch.library, "opcheck")
has_compile = hasattr(torch, "compile")
needs_opcheck = pytest.mark.skipif(not has_opcheck, reason="torch.library.opcheck needs PyTorch >= 2.4, this is %s" % torch.__version__)
needs_compile = pytest.mark.skipif(not has_compile, reason="torch.compile needs PyTorch >= 2.0, this is %s" % torch.__version__)


def float_problem(device, **kw):
    return make_problem(B=2, H=2, Hv=1, T=5, L=4, E=3, device=device, dtype=torch.float32, **kw)


@needs_opcheck
@pytest.mark.parametrize("layout", ["bhtl", "bthl"])
def test_opcheck_forward(device, layout):
    q, v, decay, rho, rho_norm = float_problem(device)
    if layout == "bthl":
        q, v = to_bthl(q), to_bthl(v)
    for x in (q, v, decay, rho, rho_norm):
        x.requires_grad_(True)
    torch.library.opcheck(torch.ops.rhoscan.rho_attention.default, (q, v, decay, rho, rho_norm, layout, 0))
    torch.library.opcheck(torch.ops.rhoscan.rho_attention.default, (q, v, decay, None, None, layout, 2))


@needs_opcheck
def test_opcheck_backward(device):
    q, v, decay, rho, rho_norm = float_problem(device)
    context, r, n = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    op = torch.ops.rhoscan.rho_attention_backward.default
    torch.library.opcheck(op, (q, v, decay, rho, rho_norm, torch.randn_like(context), torch.randn_like(r),
                               torch.randn_like(n), "bhtl", 0))
    torch.library.opcheck(op, (q, v, decay, None, None, torch.randn_like(context), None, None, "bhtl", 0))


@needs_opcheck
def test_opcheck_forward_with_saved_and_backward_reading_it(device):
    q, v, decay, rho, rho_norm = float_problem(device)
    torch.library.opcheck(torch.ops.rhoscan.rho_attention_with_saved.default, (q, v, decay, None, rho_norm, "bhtl", 0))
    context, r, n, saved = torch.ops.rhoscan.rho_attention_with_saved(q, v, decay, None, rho_norm, "bhtl", 0)
    torch.library.opcheck(torch.ops.rhoscan.rho_attention_backward.default,
                          (q, v, decay, None, rho_norm, torch.randn_like(context), None, None, "bhtl", 0, True,
                           saved))


@needs_opcheck
def test_opcheck_step(device):
    q, v, decay, rho, rho_norm = float_problem(device)
    args = [q[:, :, 0].contiguous(), v[:, :, 0].contiguous(), decay, rho, rho_norm]
    for x in args:
        x.requires_grad_(True)
    torch.library.opcheck(torch.ops.rhoscan.rho_attention_step.default, tuple(args))


def _train_step(q, v, decay, rho, rho_norm):
    context, r, n = rhoscan.rho_attention(q, v, decay, rho, rho_norm, layout="bthl")
    c2, r2, n2 = rhoscan.rho_attention_step(q[:, -1], v[:, -1], decay, r, n)
    return (context * context).sum() + r2.sum() + n2.sum() + c2.sum()


@needs_compile
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_forward_and_backward(device, backend):
    if backend == "inductor" and device == "cpu":
        pytest.skip("inductor is exercised on CUDA (on the CPU it needs a C++ toolchain for Python)")
    q, v, decay, rho, rho_norm = float_problem(device)
    q, v = to_bthl(q), to_bthl(v)
    eager_inputs = [x.clone().requires_grad_(True) for x in (q, v, decay, rho, rho_norm)]
    compiled_inputs = [x.clone().requires_grad_(True) for x in (q, v, decay, rho, rho_norm)]
    torch._dynamo.reset()
    compiled = torch.compile(_train_step, fullgraph=True, backend=backend)
    loss = compiled(*compiled_inputs)
    expected = _train_step(*eager_inputs)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    loss.backward()
    expected.backward()
    for a, b in zip(compiled_inputs, eager_inputs):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


@needs_compile
def test_compile_dynamic_shapes(device):
    q, v, decay, rho, rho_norm = float_problem(device)
    fn = torch.compile(lambda q, v, d: rhoscan.rho_attention(q, v, d)[0].sum(), fullgraph=True,
                       backend="aot_eager", dynamic=True)
    torch._dynamo.reset()
    for T in (5, 3):
        got = fn(q[:, :, :T], v[:, :, :T], decay)
        torch.testing.assert_close(got, rhoscan.rho_attention(q[:, :, :T], v[:, :, :T], decay)[0].sum())
