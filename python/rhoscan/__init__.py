"""rhoscan: the rho-attention operator of BDH for PyTorch (CPU and CUDA, with autograd).

The recurrence (SPEC.md), for each batch b and head h, with state R [L, E], N [L] and t = 0..T-1:

    w_t = q_t / (sum(q_t) + 1e-6)
    c_t = sum_l w_t[l] * R_t[l, :] / (N_t[l] + 1e-6)      (the state before token t)
    R_{t+1} = decay * R_t + outer(q_t, v_t),   N_{t+1} = decay * N_t + q_t

The operators are registered as ``torch.ops.rhoscan.rho_attention``, ``rho_attention_backward``
and ``rho_attention_step`` (usable under ``torch.compile(fullgraph=True)``); this module gives
them Python signatures.
"""
import operator

import torch

from . import _ops

__all__ = ["rho_attention", "rho_attention_step", "available_backends", "library_path"]

library_path = _ops.load()


def _check_tensor(name, x, optional=False):
    if x is None and optional:
        return
    if not isinstance(x, torch.Tensor):
        raise TypeError("rhoscan: %s must be a torch.Tensor%s, got %s"
                        % (name, " or None" if optional else "", type(x).__name__))


def rho_attention(q, v, decay, rho=None, rho_norm=None, layout="bhtl", chunk_size=None, save_keys=False):
    """Run the rho-attention recurrence over a whole sequence.

    Args:
        q: queries, [B, H, T, L] (layout "bhtl") or [B, T, H, L] (layout "bthl").
        v: values, [B, Hv, T, E] or [B, T, Hv, E], Hv = 1 (every head reads the same value)
            or Hv = H. Same dtype as q.
        decay: per-head, per-channel decay in [0, 1], [H, L] or [1, H, L].
        rho: optional initial state [B, H, L, E] (zeros when None).
        rho_norm: optional initial normaliser [B, H, L] (zeros when None).
        layout: "bhtl" or "bthl" (sequence-first); q, v and context share it. Any strides are
            read in place (no copies).
        chunk_size: the backend's chunk length (None: its default).
        save_keys: a memory-for-time trade for training on CUDA: the forward also keeps the
            normalised keys for the backward (twice q's bytes for bfloat16 / float16 q, held
            until the backward runs), which then skips its normaliser pass (about 0.25 ms of
            about 3.3 at B=8, H=4, T=512, L=8192 on an H200). No effect elsewhere.

    Dtypes: q, v and context share one of float64, float32, bfloat16, float16. decay is float32
    or float64. The states (input and output) are float32 or float64; when no state is given,
    they are float64 for float64 q and float32 otherwise (never 16-bit).

    Returns:
        (context, rho, rho_norm): context [B, H, T, E] (or [B, T, H, E] with "bthl"), the final
        state [B, H, L, E] and normaliser [B, H, L]. Feeding them to the next call continues
        the sequence (streaming).

    Autograd: all three outputs are differentiable with respect to q, v, decay, rho and
    rho_norm (gradients of the final state flow back, for truncated BPTT). Twice-differentiating
    is not supported and raises.

    Raises:
        ValueError: invalid input, with rhoscan's message naming the argument and the shapes:
            ranks or shapes that do not fit together (B, H, T, L, E; Hv not 1 or H; a state of
            the wrong shape), decay outside [0, 1] or not finite, an unsupported dtype or dtype
            mix, tensors on different devices, an unknown layout, a negative chunk_size.
        NotImplementedError: the backend for the tensors' device is not compiled into rhoscan
            or has no device.
        TypeError: an argument that is not a tensor.
    """
    _check_tensor("q", q)
    _check_tensor("v", v)
    _check_tensor("decay", decay)
    _check_tensor("rho", rho, optional=True)
    _check_tensor("rho_norm", rho_norm, optional=True)
    chunk = 0 if chunk_size is None else operator.index(chunk_size)
    return torch.ops.rhoscan.rho_attention(q, v, decay, rho, rho_norm, layout, chunk, bool(save_keys))


def rho_attention_step(q, v, decay, rho=None, rho_norm=None):
    """Process one token (streaming decode); the functional form: the given state is not modified.

    Args:
        q: [B, H, L]; v: [B, Hv, E] (Hv = 1 or H), same dtype as q.
        decay: [H, L] or [1, H, L], float32 or float64, values in [0, 1].
        rho: state [B, H, L, E]; rho_norm: normaliser [B, H, L] (zeros when None).

    Dtypes as for rho_attention.

    Returns:
        (context [B, H, E], new rho [B, H, L, E], new rho_norm [B, H, L]). context reads the state
        before this token. Differentiable like rho_attention.

    Raises:
        ValueError, NotImplementedError, TypeError: as rho_attention.
    """
    _check_tensor("q", q)
    _check_tensor("v", v)
    _check_tensor("decay", decay)
    _check_tensor("rho", rho, optional=True)
    _check_tensor("rho_norm", rho_norm, optional=True)
    return torch.ops.rhoscan.rho_attention_step(q, v, decay, rho, rho_norm)


def available_backends():
    """The rhoscan backends usable in this process, e.g. ["reference", "cpu", "cuda"]."""
    return list(torch.ops.rhoscan.available_backends())
