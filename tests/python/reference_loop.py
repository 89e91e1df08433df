"""SPEC.md's recurrence as a plain PyTorch per-token loop: the oracle of the Python tests.

Written from SPEC.md alone (not from rhoscan's code). Differentiable through torch.autograd, so
its gradients are the reference gradients too. Computes in float64.
"""
import torch

EPS = 1e-6


def rho_attention_loop(q, v, decay, rho=None, rho_norm=None):
    """q [B,H,T,L], v [B,Hv,T,E], decay [H,L] or [1,H,L] -> (context, rho, rho_norm), float64."""
    q, v, decay = q.double(), v.double(), decay.double()
    B, H, T, L = q.shape
    E = v.shape[-1]
    a = decay.reshape(H, L)
    R = rho.double() if rho is not None else q.new_zeros(B, H, L, E)
    N = rho_norm.double() if rho_norm is not None else q.new_zeros(B, H, L)
    v = v.expand(B, H, T, E)  # Hv = 1: every head reads the same value row
    context = []
    for t in range(T):
        q_t = q[:, :, t]                                   # [B, H, L]
        s_t = q_t.sum(-1, keepdim=True) + EPS
        w_t = q_t / s_t
        context.append(torch.einsum("bhl,bhle->bhe", w_t / (N + EPS), R))  # the state before t
        R = a[..., None] * R + q_t[..., None] * v[:, :, t, None, :]
        N = a * N + q_t
    c = torch.stack(context, 2) if T else q.new_zeros(B, H, 0, E)
    return c, R, N
