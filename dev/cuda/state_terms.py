#!/usr/bin/env python3
"""The carried state's terms in the quadratic backward, checked in float64 (numpy) against the
recurrence itself: /usr/bin/python3 dev/cuda/state_terms.py (prints each problem and exits 1 on a
mismatch). The formulas docs/CUDA.md's "What is left" (fortieth round) gives for a backward from an
initial state rho0 and a final-state gradient GR, per latent l (the normaliser's Qp held fixed):

  states        R_t (before token t's write), R_0 = rho0, R_(t+1) = a R_t + q_t v_t^T; c_t = Qp_t R_t
                D_t = dL/dR_t, D_T = GR, D_t = a D_(t+1) + Qp_t G_t^T
  chunk c       tokens s_c .. e_c - 1 (e_c = min((c + 1) C, T)), H_c = R_(s_c), A_end_c = D_(e_c)
  W_t = H_c G_t gains a^(c C) rho0 G_t: the W loop's start value rho0 G_t^T, if the loop scales
                by a^C at each of its c steps (J = 0 included)
  U_t = A_end_c v_t gains a^(T - e_c) GR v_t: for c < nC - 1 a^(Cn_last) GR v_t^T entering the U
                loop at its first step (I = nC - 1, not scaled there), brought to a^(T - e_c) by the
                nC - 2 - c later steps' a^C; for c = nC - 1 GR v_t^T itself
  <H_c, A_end_c> gains x1 + x2 + x3: x1 = sum_(k >= e_c) a^(c C + k - e_c) Qp_k (rho0 G_k^T) (an
                Xq-weighted sum over the later tokens), x2 = sum_(j < s_c) a^(T - e_c + s_c - 1 - j)
                q_j (GR v_j^T) (Kq-weighted, the earlier tokens), x3 = a^(c C + T - e_c) <rho0, GR>
  dv_t          gains (Kq_t a^(T - e_c)) GR, Kq_t = q_t a^(Cn_c - 1 - t + s_c)
  dR_0 = D_0    = a^T GR + sum_t a^t Qp_t G_t^T
"""
import sys

import numpy as np


def check(T, C, L, E, rng):
    nC = (T + C - 1) // C
    a = rng.uniform(0.5, 1.0, L)
    Qp, q = rng.random((T, L)), rng.random((T, L))
    v, G = rng.standard_normal((T, E)), rng.standard_normal((T, E))
    rho0, GR = rng.standard_normal((L, E)), rng.standard_normal((L, E))
    R = np.zeros((T + 1, L, E))
    R[0] = rho0
    for t in range(T):
        R[t + 1] = a[:, None] * R[t] + np.outer(q[t], v[t])
    D = np.zeros((T + 1, L, E))
    D[T] = GR
    for t in range(T - 1, -1, -1):
        D[t] = a[:, None] * D[t + 1] + np.outer(Qp[t], G[t])
    bad = []
    near = lambda what, x, y: np.allclose(x, y) or bad.append(what)
    Cn_last = T - (nC - 1) * C
    for c in range(nC):
        s, e = c * C, min((c + 1) * C, T)
        H, Aend = R[s], D[e]
        H0, A0 = H - a[:, None] ** s * rho0, Aend - a[:, None] ** (T - e) * GR  # the parts from zero
        dW = a[None, :] ** (c * C) * np.einsum("le,te->tl", rho0, G[s:e])
        near(f"W, chunk {c}", np.einsum("le,te->tl", H, G[s:e]), np.einsum("le,te->tl", H0, G[s:e]) + dW)
        fac = a ** Cn_last * a ** (C * (nC - 2 - c)) if c < nC - 1 else np.ones(L)
        dU = fac[None, :] * np.einsum("le,te->tl", GR, v[s:e])
        near(f"U, chunk {c}", np.einsum("le,te->tl", Aend, v[s:e]), np.einsum("le,te->tl", A0, v[s:e]) + dU)
        x1 = sum((a ** (s + k - e) * Qp[k] * (rho0 @ G[k]) for k in range(e, T)), np.zeros(L))
        x2 = sum((a ** (T - e + s - 1 - j) * q[j] * (GR @ v[j]) for j in range(s)), np.zeros(L))
        x3 = a ** (s + T - e) * np.einsum("le,le->l", rho0, GR)
        near(f"<H, A_end>, chunk {c}", np.einsum("le,le->l", H, Aend), np.einsum("le,le->l", H0, A0) + x1 + x2 + x3)
        Kq = np.stack([q[s + j] * a ** (e - s - 1 - j) for j in range(e - s)])
        dv = np.stack([D[t + 1].T @ q[t] for t in range(s, e)])
        dv0 = np.stack([(D[t + 1] - a[:, None] ** (T - 1 - t) * GR).T @ q[t] for t in range(s, e)])
        near(f"dv, chunk {c}", dv, dv0 + (Kq * a[None, :] ** (T - e)) @ GR)
    near("dR_0", D[0], a[:, None] ** T * GR + sum(a[:, None] ** t * np.outer(Qp[t], G[t]) for t in range(T)))
    return bad


def main():
    rng = np.random.default_rng(1)
    failed = False
    for T, C, L, E in [(130, 64, 7, 5), (128, 64, 6, 3), (64, 64, 5, 4), (1, 64, 3, 2), (200, 32, 4, 3)]:
        bad = check(T, C, L, E, rng)
        print(f"T={T} C={C} L={L} E={E}: " + ("ok" if not bad else "MISMATCH in " + ", ".join(bad)))
        failed |= bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
