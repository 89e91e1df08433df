"""Every class of invalid input raises ValueError with rhoscan's message (argument name and
shapes), never a crash, and leaves the caller's tensors untouched."""
import re

import pytest
import torch

import rhoscan
from conftest import make_problem, require_device


def problem(device):
    # B=2, H=3, Hv=1, T=6, L=5, E=4
    return make_problem(device=device, dtype=torch.float32)


def replace(args, **changes):
    names = ["q", "v", "decay", "rho", "rho_norm"]
    out = dict(zip(names, args))
    out.update(changes)
    return [out[n] for n in names]


# (case id, function of the valid args -> invalid args (+ keyword arguments), message pattern)
FORWARD_CASES = [
    ("q_rank", lambda a: (replace(a, q=a[0][:, :, 0]), {}), r"q: expected rank 4, got rank 3 with shape \[2, 3, 5\]"),
    ("v_batch", lambda a: (replace(a, v=a[1][:1]), {}), r"v: shape \[1, 1, 6, 4\] does not fit q \[2, 3, 6, 5\]"),
    ("v_time", lambda a: (replace(a, v=a[1][:, :, :5]), {}), r"v: shape \[2, 1, 5, 4\] does not fit q"),
    ("v_heads_not_1_or_H", lambda a: (replace(a, v=a[1].expand(2, 2, 6, 4)), {}), r"Hv = 1 or H = 3"),
    ("v_rank", lambda a: (replace(a, v=a[1][0]), {}), r"v: expected rank 4"),
    ("decay_shape", lambda a: (replace(a, decay=a[2][:, :4]), {}), r"decay: expected shape \[H, L\] = \[3, 5\]"),
    ("decay_leading_dim", lambda a: (replace(a, decay=a[2].expand(2, 3, 5)), {}), r"decay: expected shape"),
    ("decay_above_one", lambda a: (replace(a, decay=a[2] + 1.0), {}), r"decay \[3, 5\]: every value must be finite and in \[0, 1\]"),
    ("decay_negative", lambda a: (replace(a, decay=a[2] - 1.0), {}), r"decay \[3, 5\]: every value must be finite"),
    ("decay_nan", lambda a: (replace(a, decay=a[2].masked_fill(a[2] > 0.5, float("nan"))), {}), r"decay \[3, 5\]: every value must be finite"),
    ("q_integer_dtype", lambda a: (replace(a, q=a[0].long()), {}), r"q: dtype Long is not supported"),
    ("q_v_dtype_mix", lambda a: (replace(a, v=a[1].double()), {}), r"v: dtype float64 differs from q's dtype float32"),
    ("decay_16bit", lambda a: (replace(a, decay=a[2].half()), {}), r"decay: dtype float16 is not allowed"),
    ("state_16bit", lambda a: (replace(a, rho=a[3].bfloat16(), rho_norm=a[4].bfloat16()), {}), r"rho: dtype bfloat16 is not allowed"),
    ("state_dtype_mix", lambda a: (replace(a, rho_norm=a[4].double()), {}), r"rho_norm: dtype float64 differs from float32"),
    ("rho_batch_changed", lambda a: (replace(a, rho=a[3][:1]), {}), r"rho: expected shape \[B, H, L, E\] = \[2, 3, 5, 4\], got \[1, 3, 5, 4\]"),
    ("rho_norm_shape", lambda a: (replace(a, rho_norm=a[4][:, :, :4]), {}), r"rho_norm: expected shape \[B, H, L\] = \[2, 3, 5\], got \[2, 3, 4\]"),
    ("rho_rank", lambda a: (replace(a, rho=a[3][0]), {}), r"rho: expected rank 4"),
    ("empty_latent", lambda a: (replace(a, q=a[0][..., :0], decay=a[2][:, :0], rho=None, rho_norm=None), {}), r"latent size L must be at least 1"),
    ("empty_embedding", lambda a: (replace(a, v=a[1][..., :0], rho=None), {}), r"embedding size E must be at least 1"),
    ("unknown_layout", lambda a: (a, {"layout": "tbhl"}), r'layout must be "bhtl".*got "tbhl"'),
    ("layout_rank", lambda a: (replace(a, q=a[0][:, 0]), {"layout": "bthl"}), r"q: expected rank 4"),
    ("negative_chunk", lambda a: (a, {"chunk_size": -2}), r"chunk_size must be 0 \(default\) or positive"),
]


@pytest.mark.parametrize("case", FORWARD_CASES, ids=[c[0] for c in FORWARD_CASES])
def test_forward_rejects(device, case):
    _, make, pattern = case
    valid = problem(device)
    snapshot = [x.clone() for x in valid]
    args, kwargs = make(valid)
    with pytest.raises(ValueError, match=pattern):
        rhoscan.rho_attention(*args, **kwargs)
    for x, s in zip(valid, snapshot):
        assert torch.equal(x, s) or torch.isnan(s).any()


STEP_CASES = [
    ("q_rank", lambda a: replace(a, q=a[0][:, :, None]), r"q: expected rank 3, got rank 4"),
    ("v_batch", lambda a: replace(a, v=a[1][:1]), r"v: shape \[1, 1, 4\] does not fit q \[2, 3, 5\]"),
    ("rho_shape", lambda a: replace(a, rho=a[3][:, :2]), r"rho: expected shape \[B, H, L, E\] = \[2, 3, 5, 4\], got \[2, 2, 5, 4\]"),
    ("rho_norm_shape", lambda a: replace(a, rho_norm=a[4][:1]), r"rho_norm: expected shape \[B, H, L\] = \[2, 3, 5\], got \[1, 3, 5\]"),
    ("state_dtype_mix", lambda a: replace(a, rho_norm=a[4].double()), r"rho_norm: dtype Double differs from Float"),
    ("decay_above_one", lambda a: replace(a, decay=a[2] * 3.0), r"decay \[3, 5\]: every value must be finite and in \[0, 1\]"),
    ("q_integer_dtype", lambda a: replace(a, q=a[0].int()), r"q: dtype Int is not supported"),
]


@pytest.mark.parametrize("case", STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_step_rejects(device, case):
    _, make, pattern = case
    q, v, decay, rho, rho_norm = problem(device)
    valid = [q[:, :, 0], v[:, :, 0], decay, rho, rho_norm]
    snapshot = [x.clone() for x in valid]
    with pytest.raises(ValueError, match=pattern):
        rhoscan.rho_attention_step(*make(valid))
    for x, s in zip(valid, snapshot):
        assert torch.equal(x, s)


def test_backward_op_rejects_bad_upstream_gradients(device):
    q, v, decay, rho, rho_norm = problem(device)
    context, r, n = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    op = torch.ops.rhoscan.rho_attention_backward
    with pytest.raises(ValueError, match=r"grad_context: expected shape \[B, H, T, E\] = \[2, 3, 6, 4\]"):
        op(q, v, decay, rho, rho_norm, context[:, :, :5], r, n, "bhtl", 0)
    with pytest.raises(ValueError, match=r"grad_rho_out: expected shape \[B, H, L, E\]"):
        op(q, v, decay, rho, rho_norm, context, r[:, :1], n, "bhtl", 0)
    with pytest.raises(ValueError, match=r"grad_context: dtype float64 differs from q's dtype float32"):
        op(q, v, decay, rho, rho_norm, context.double(), r, n, "bhtl", 0)


def test_non_tensor_arguments_raise_type_error():
    q, v, decay, _, _ = problem("cpu")
    with pytest.raises(TypeError, match="decay must be a torch.Tensor"):
        rhoscan.rho_attention(q, v, 0.5)
    with pytest.raises(TypeError):
        rhoscan.rho_attention(q, v, decay, chunk_size=2.5)


def test_sparse_tensors_raise_instead_of_crashing():
    q, v, decay, _, _ = problem("cpu")
    with pytest.raises((ValueError, NotImplementedError, RuntimeError)):
        rhoscan.rho_attention(q.to_sparse(), v, decay)


def test_tensors_on_different_devices():
    require_device("cuda")
    q, v, decay, rho, rho_norm = problem("cuda")
    with pytest.raises(ValueError, match=re.escape("rho is on cpu:0 but q is on cuda:0")):
        rhoscan.rho_attention(q, v, decay, rho.cpu(), rho_norm)
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        rhoscan.rho_attention_step(q[:, :, 0], v[:, :, 0], decay, rho, rho_norm.cpu())
