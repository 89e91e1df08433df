"""rhoscan.rho_attention / rho_attention_step against SPEC.md: values, gradients, streaming,
layouts and dtypes, on CPU and (when present) CUDA."""
import pytest
import torch

import rhoscan
from conftest import (DTYPES, FORWARD_TOL, GRAD_TOL, make_problem, require_device, rms_rel,
                      to_bthl)
from reference_loop import rho_attention_loop


def test_hand_checked_example(device):
    # SPEC.md: B=H=1, T=2, L=E=2, Hv=1, a=0.5, no initial state.
    q = torch.tensor([[2.0, 0.0], [1.0, 3.0]], device=device).reshape(1, 1, 2, 2)
    v = torch.tensor([[10.0, 20.0], [30.0, 40.0]], device=device).reshape(1, 1, 2, 2)
    decay = torch.full((1, 2), 0.5, device=device)
    context, rho, rho_norm = rhoscan.rho_attention(q, v, decay)
    torch.testing.assert_close(context.cpu(), torch.tensor([[[[0.0, 0.0], [2.4999981, 4.9999963]]]]))
    torch.testing.assert_close(rho.cpu(), torch.tensor([[[[40.0, 60.0], [90.0, 120.0]]]]))
    torch.testing.assert_close(rho_norm.cpu(), torch.tensor([[[2.0, 3.0]]]))


@pytest.mark.parametrize("dtype_index", [0, 1, 2])
@pytest.mark.parametrize("Hv,states,layout", [(1, True, "bhtl"), (3, False, "bhtl"), (1, True, "bthl"),
                                              (3, True, "bthl")])
def test_matches_loop_values_and_gradients(device, dtype_index, Hv, states, layout):
    """Outputs and all five gradients (upstream gradients on context and on both final states)
    against the autograd of the pure-PyTorch loop, within SPEC.md's tolerances."""
    dtype = DTYPES[device][dtype_index] if dtype_index < len(DTYPES[device]) else None
    if dtype is None:
        pytest.skip("%s has %d dtypes under test" % (device, len(DTYPES[device])))
    q, v, decay, rho, rho_norm = make_problem(B=2, H=3, Hv=Hv, T=9, L=6, E=5, seed=1, states=states,
                                              device=device, dtype=dtype)
    inputs = [q, v, decay] + ([rho, rho_norm] if states else [])
    for x in inputs:
        x.requires_grad_(True)
    qa, va = (to_bthl(q), to_bthl(v)) if layout == "bthl" else (q, v)
    context, rho_out, rho_norm_out = rhoscan.rho_attention(qa, va, decay, rho, rho_norm, layout=layout)
    if layout == "bthl":
        context = context.transpose(1, 2)
    ref = rho_attention_loop(q, v, decay, rho, rho_norm)
    for name, got, want in zip(["context", "rho", "rho_norm"], [context, rho_out, rho_norm_out], ref):
        assert got.shape == want.shape, name
        assert rms_rel(got, want) <= FORWARD_TOL[dtype], (name, rms_rel(got, want))
    assert context.dtype == dtype
    assert rho_out.dtype == rho_norm_out.dtype == (rho.dtype if states else
                                                   (torch.float64 if dtype == torch.float64 else torch.float32))

    g = torch.Generator().manual_seed(7)
    upstream = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in ref]
    loss = sum((o.double() * u.to(device)).sum() for o, u in zip([context, rho_out, rho_norm_out], upstream))
    grads = torch.autograd.grad(loss, inputs)
    ref_loss = sum((o * u.to(device)).sum() for o, u in zip(ref, upstream))
    ref_grads = torch.autograd.grad(ref_loss, inputs)
    for name, got, want, x in zip(["q", "v", "decay", "rho", "rho_norm"], grads, ref_grads, inputs):
        assert got.shape == x.shape and got.dtype == x.dtype, name
        assert rms_rel(got, want) <= GRAD_TOL[dtype], (name, rms_rel(got, want))


def test_gradcheck_all_inputs_with_states():
    q, v, decay, rho, rho_norm = make_problem(B=1, H=2, Hv=1, T=4, L=3, E=2, seed=2)
    inputs = tuple(x.requires_grad_(True) for x in (q, v, decay, rho, rho_norm))
    # All three outputs: the Jacobians include the final-state gradients (truncated BPTT).
    assert torch.autograd.gradcheck(lambda *x: rhoscan.rho_attention(*x), inputs, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", ["bhtl", "bthl"])
def test_gradcheck_without_initial_state_hv_equals_h(layout):
    q, v, decay, _, _ = make_problem(B=2, H=2, Hv=2, T=3, L=3, E=2, seed=3, states=False,
                                     decay_shape=(1, 2, 3))
    if layout == "bthl":
        q, v = to_bthl(q), to_bthl(v)
    inputs = tuple(x.requires_grad_(True) for x in (q, v, decay))
    assert torch.autograd.gradcheck(lambda a, b, c: rhoscan.rho_attention(a, b, c, layout=layout),
                                    inputs, eps=1e-6, atol=1e-6)


def test_gradcheck_initial_normaliser_only_and_chunked():
    q, v, decay, _, rho_norm = make_problem(B=1, H=1, Hv=1, T=7, L=4, E=3, seed=4)
    inputs = tuple(x.requires_grad_(True) for x in (q, v, decay, rho_norm))
    fn = lambda q, v, d, n: rhoscan.rho_attention(q, v, d, None, n, chunk_size=3)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6)


def test_gradcheck_step():
    q, v, decay, rho, rho_norm = make_problem(B=2, H=2, Hv=1, T=1, L=3, E=2, seed=5)
    inputs = tuple(x.requires_grad_(True) for x in (q[:, :, 0], v[:, :, 0], decay, rho, rho_norm))
    assert torch.autograd.gradcheck(lambda *x: rhoscan.rho_attention_step(*x), inputs, eps=1e-6, atol=1e-6)


def test_final_state_gradient_only_reaches_every_input():
    """Truncated BPTT: a loss on the final state alone (no gradient for context)."""
    q, v, decay, rho, rho_norm = make_problem(B=1, H=2, Hv=2, T=5, L=3, E=2, seed=6)
    inputs = [x.requires_grad_(True) for x in (q, v, decay, rho, rho_norm)]
    _, rho_out, rho_norm_out = rhoscan.rho_attention(*inputs)
    grads = torch.autograd.grad(rho_out.sum() + 2 * rho_norm_out.sum(), inputs)
    _, r, n = rho_attention_loop(*inputs)
    ref_grads = torch.autograd.grad(r.sum() + 2 * n.sum(), inputs)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_double_backward_raises_not_silently_wrong():
    q, v, decay, rho, rho_norm = make_problem(B=1, H=1, T=3, L=2, E=2)
    q.requires_grad_(True)
    context, _, _ = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    (gq,) = torch.autograd.grad(context.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="rho_attention_backward"):
        gq.sum().backward()


@pytest.mark.parametrize("layout", ["bhtl", "bthl"])
def test_streaming_identity(device, layout):
    """The whole sequence = a split with the state carried = token-by-token steps."""
    dtype = torch.float64 if device == "cpu" else torch.float32
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=1e-6)
    q, v, decay, rho, rho_norm = make_problem(B=2, H=2, Hv=1, T=11, L=5, E=3, seed=8, device=device, dtype=dtype)
    seq = (lambda x: to_bthl(x)) if layout == "bthl" else (lambda x: x)
    tdim = 1 if layout == "bthl" else 2
    whole = rhoscan.rho_attention(seq(q), seq(v), decay, rho, rho_norm, layout=layout)

    first = rhoscan.rho_attention(seq(q[:, :, :4]), seq(v[:, :, :4]), decay, rho, rho_norm, layout=layout)
    second = rhoscan.rho_attention(seq(q[:, :, 4:]), seq(v[:, :, 4:]), decay, first[1], first[2],
                                   layout=layout, chunk_size=3)
    torch.testing.assert_close(torch.cat([first[0], second[0]], tdim), whole[0], **tol)
    torch.testing.assert_close(second[1], whole[1], **tol)
    torch.testing.assert_close(second[2], whole[2], **tol)

    state, norm, contexts = rho, rho_norm, []
    for t in range(q.shape[2]):
        c, state, norm = rhoscan.rho_attention_step(q[:, :, t], v[:, :, t], decay, state, norm)
        contexts.append(c)
    torch.testing.assert_close(seq(torch.stack(contexts, 2)), whole[0], **tol)
    torch.testing.assert_close(state, whole[1], **tol)
    torch.testing.assert_close(norm, whole[2], **tol)


def test_step_does_not_modify_its_state_and_starts_from_zeros():
    q, v, decay, rho, rho_norm = make_problem(B=1, H=2, T=1, L=3, E=2)
    rho0, norm0 = rho.clone(), rho_norm.clone()
    rhoscan.rho_attention_step(q[:, :, 0], v[:, :, 0], decay, rho, rho_norm)
    assert torch.equal(rho, rho0) and torch.equal(rho_norm, norm0)
    c, r, n = rhoscan.rho_attention_step(q[:, :, 0], v[:, :, 0], decay)
    ref = rho_attention_loop(q, v, decay)
    assert torch.equal(c, torch.zeros_like(c))  # the first token of a fresh sequence reads nothing
    torch.testing.assert_close(r, ref[1])
    torch.testing.assert_close(n, ref[2])


def test_layouts_read_strided_views_in_place(device):
    """Sequence-first storage, and a [B,H,T,L] view of it passed with layout "bhtl", give the
    same numbers; the bthl context comes back contiguous in [B, T, H, E]."""
    q, v, decay, rho, rho_norm = make_problem(B=2, H=3, Hv=3, T=5, L=4, E=3, seed=9, device=device,
                                              dtype=torch.float32)
    ref = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    qs, vs = to_bthl(q), to_bthl(v)
    seq_first = rhoscan.rho_attention(qs, vs, decay, rho, rho_norm, layout="bthl")
    assert seq_first[0].shape == (2, 5, 3, 3) and seq_first[0].is_contiguous()
    viewed = rhoscan.rho_attention(qs.transpose(1, 2), vs.transpose(1, 2), decay, rho, rho_norm)
    assert not qs.transpose(1, 2).is_contiguous()
    for a, b, c in zip(ref, seq_first, viewed):
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(seq_first[0].transpose(1, 2), ref[0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(seq_first[1], ref[1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype,state_dtype,expect", [
    (torch.float64, None, torch.float64),
    (torch.float32, None, torch.float32),
    (torch.bfloat16, None, torch.float32),    # 16-bit problems keep their states in float32
    (torch.float16, None, torch.float32),
    (torch.float32, torch.float64, torch.float64),  # a given state fixes the state dtype
])
def test_state_dtypes(dtype, state_dtype, expect):
    q, v, decay, rho, rho_norm = make_problem(B=1, H=2, T=3, L=4, E=2, dtype=dtype,
                                              state_dtype=state_dtype, states=state_dtype is not None)
    context, r, n = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    assert context.dtype == dtype and r.dtype == expect and n.dtype == expect
    c, r, n = rhoscan.rho_attention_step(q[:, :, 0], v[:, :, 0], decay, rho, rho_norm)
    assert c.dtype == dtype and r.dtype == expect and n.dtype == expect


def test_meta_tensors_give_shapes_without_running():
    meta = dict(device="meta")
    q = torch.empty(2, 7, 3, 5, dtype=torch.bfloat16, **meta)   # bthl: [B, T, H, L]
    v = torch.empty(2, 7, 1, 4, dtype=torch.bfloat16, **meta)
    decay = torch.empty(3, 5, **meta)
    c, r, n = rhoscan.rho_attention(q, v, decay, layout="bthl")
    assert (c.shape, r.shape, n.shape) == ((2, 7, 3, 4), (2, 3, 5, 4), (2, 3, 5))
    assert (c.dtype, r.dtype, n.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    assert c.device.type == "meta"
    grads = torch.ops.rhoscan.rho_attention_backward(q, v, decay, None, None, c, r, None, "bthl", 0)
    assert [tuple(g.shape) for g in grads] == [(2, 7, 3, 5), (2, 7, 1, 4), (3, 5), (2, 3, 5, 4), (2, 3, 5)]
    grads = torch.ops.rhoscan.rho_attention_backward(q, v, decay, None, None, c, r, None, "bthl", 0, False)
    assert [tuple(g.shape) for g in grads] == [(2, 7, 3, 5), (2, 7, 1, 4), (3, 5), (0,), (2, 3, 5)]
    c, r, n = rhoscan.rho_attention_step(q[:, 0], v[:, 0], decay)
    assert (c.shape, r.shape, n.shape) == ((2, 3, 4), (2, 3, 5, 4), (2, 3, 5))


def test_backward_without_rho_grad_skips_only_grad_rho(device):
    # rho_grad=False (what autograd passes when no initial rho was given): grad_rho comes back
    # empty, every other gradient is the same as with it.
    q, v, decay, rho, rho_norm = make_problem(B=2, H=2, T=9, L=5, E=3, device=device, dtype=torch.float32)
    c, r, n = rhoscan.rho_attention(q, v, decay)
    g = torch.randn_like(c)
    op = torch.ops.rhoscan.rho_attention_backward
    full = op(q, v, decay, None, None, g, None, None, "bhtl", 0)
    lean = op(q, v, decay, None, None, g, None, None, "bhtl", 0, False)
    assert full[3].shape == (2, 2, 5, 3) and lean[3].shape == (0,)
    for k in (0, 1, 2, 4):
        assert torch.equal(full[k], lean[k])


def test_saved_buffer_op_and_backward(device):
    """rho_attention_with_saved: rho_attention's outputs plus the float32 saved buffer (its length a
    function of the shapes); the backward op gives the same gradients with it (CUDA reads it and
    stays within tolerance, bitwise here where only the normaliser sums are kept; the CPU ignores
    it). A saved buffer of the wrong length raises a ValueError naming it."""
    q, v, decay, _, rho_norm = make_problem(B=2, H=2, T=70, L=600, E=8, device=device, dtype=torch.bfloat16)
    c, r, n = rhoscan.rho_attention(q, v, decay, None, rho_norm)
    c2, r2, n2, saved = torch.ops.rhoscan.rho_attention_with_saved(q, v, decay, None, rho_norm, "bhtl", 0)
    assert torch.equal(c, c2) and torch.equal(r, r2) and torch.equal(n, n2)
    # 64 header floats, s (2·2·70 = 280 -> 320), Nc (4·3·600 = 7200 -> 7232), P (4·2·64²), Pcross
    # (4·4·64² bf16, two per float)
    assert saved.dtype == torch.float32 and saved.shape == (64 + 320 + 7232 + 8 * 4096 + 8 * 4096,)
    g = torch.randn_like(c)
    op = torch.ops.rhoscan.rho_attention_backward
    plain = op(q, v, decay, None, rho_norm, g, None, None, "bhtl", 0)
    kept = op(q, v, decay, None, rho_norm, g, None, None, "bhtl", 0, True, saved)
    for k in (0, 1, 2, 4):
        if device == "cpu":
            assert torch.equal(plain[k], kept[k])
        else:
            assert rms_rel(kept[k], plain[k]) <= GRAD_TOL[torch.bfloat16], k
    with pytest.raises(ValueError, match=r"saved: expected shape \[%d\]" % saved.numel()):
        op(q, v, decay, None, rho_norm, g, None, None, "bhtl", 0, True, saved[1:])
    if device == "cuda":
        with pytest.raises(ValueError, match="saved: its header was not written"):
            op(q, v, decay, None, rho_norm, g, None, None, "bhtl", 0, True, torch.zeros_like(saved))


def test_saved_keys_change_no_gradient(device):
    """save_keys: the saved buffer also holds the normalised keys (Xq and Kq, bf16 rows of L rounded
    up to 64 per token); the backward op reading it gives bitwise the gradients of the buffer
    without them (CUDA skips its normaliser pass; the CPU ignores both), and so does autograd."""
    q, v, decay, _, rho_norm = make_problem(B=2, H=2, T=70, L=600, E=8, device=device, dtype=torch.bfloat16)
    _, _, _, plain = torch.ops.rhoscan.rho_attention_with_saved(q, v, decay, None, rho_norm, "bhtl", 0)
    c, _, _, keyed = torch.ops.rhoscan.rho_attention_with_saved(q, v, decay, None, rho_norm, "bhtl", 0, True)
    # two sections of 2·2·70·640 / 2 = 89600 floats (1400 · 64, already 256-byte aligned)
    assert keyed.numel() == plain.numel() + 2 * 89600
    g = torch.randn_like(c)
    op = torch.ops.rhoscan.rho_attention_backward
    want = op(q, v, decay, None, rho_norm, g, None, None, "bhtl", 0, True, plain)
    got = op(q, v, decay, None, rho_norm, g, None, None, "bhtl", 0, True, keyed)
    for k in (0, 1, 2, 4):
        assert torch.equal(got[k], want[k]), k
    grads = []
    for save_keys in (False, True):
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, v, decay)]
        c, _, _ = rhoscan.rho_attention(*leaves, None, rho_norm, save_keys=save_keys)
        (c.float() * g.float()).sum().backward()
        grads.append([x.grad for x in leaves])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_autograd_keeps_the_saved_buffer_on_cuda():
    """Autograd on CUDA runs the forward with the saved buffer and hands it to the backward: the
    gradients match the backward op's without it, within bfloat16's tolerance."""
    require_device("cuda")
    q, v, decay, _, _ = make_problem(B=1, H=2, T=130, L=1100, E=16, device="cuda", dtype=torch.bfloat16)
    for x in (q, v, decay):
        x.requires_grad_(True)
    c, r, n = rhoscan.rho_attention(q, v, decay)
    g = torch.randn_like(c)
    (c * g).sum().backward()
    ref = torch.ops.rhoscan.rho_attention_backward(q.detach(), v.detach(), decay.detach(), None, None, g, None,
                                                   None, "bhtl", 0, False)
    for got, want in zip((q.grad, v.grad, decay.grad), ref[:3]):
        assert rms_rel(got, want) <= GRAD_TOL[torch.bfloat16]


def test_empty_sequence_returns_the_state_unchanged(device):
    q, v, decay, rho, rho_norm = make_problem(B=1, H=2, T=0, L=3, E=2, device=device, dtype=torch.float32)
    c, r, n = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    assert c.shape == (1, 2, 0, 2)
    assert torch.equal(r, rho) and torch.equal(n, rho_norm)


def test_available_backends_lists_the_reference():
    assert "reference" in rhoscan.available_backends()


def test_cuda_results_on_a_side_stream():
    require_device("cuda")
    q, v, decay, rho, rho_norm = make_problem(B=2, H=2, T=64, L=32, E=16, device="cuda", dtype=torch.float32)
    expected = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = rhoscan.rho_attention(q, v, decay, rho, rho_norm)
    torch.cuda.current_stream().wait_stream(stream)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
