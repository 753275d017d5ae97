#!/usr/bin/env python3
"""float64 check of the per-channel dots formulation (docs/experiments/s26-pc-append-dots.patch, s26-pc-verify-dots.patch)
against fold-then-step, the CUDA kernels' present route: random checkpoint, history and window, several sizes.
Usage: python3 tools/pc_dots_math_check.py   (numpy; prints the largest difference, exit 1 above 1e-10)"""
import sys

import numpy as np


def fold_then_step(S0, gh, kh_raw, dh, gw, kw, qw, vw, beta):
    w = len(gh)
    G = np.cumsum(gh, axis=0)
    tot = np.exp(G[-1]) if w else np.ones(S0.shape[1])
    kh = kh_raw * np.exp(G[-1] - G) if w else np.zeros((0, S0.shape[1]))
    s = S0 * tot + dh.T @ kh
    outs, ds = [], []
    for a in range(len(gw)):
        s = s * np.exp(gw[a])
        d = beta[a] * (vw[a] - s @ kw[a])
        s = s + np.outer(d, kw[a])
        outs.append(s @ qw[a])
        ds.append(d)
    return np.array(outs), np.array(ds)


def dots(S0, gh, kh_raw, dh, gw, kw, qw, vw, beta):
    w, n = len(gh), len(gw)
    G = np.cumsum(gh, axis=0)
    tot = np.exp(G[-1]) if w else np.ones(S0.shape[1])
    kh = kh_raw * np.exp(G[-1] - G) if w else np.zeros((0, S0.shape[1]))
    Gw = np.cumsum(gw, axis=0)
    pk, pq = np.exp(Gw) * kw, np.exp(Gw) * qw  # P_a o k_a, P_a o q_a
    c, cq = kh @ pk.T, kh @ pq.T  # history scalars [w][n]
    A, B = np.zeros((n, n)), np.zeros((n, n))  # window scalars, b <= a
    for a in range(n):
        for b in range(a + 1):
            f = kw[b] * np.exp(Gw[a] - Gw[b])
            A[b, a], B[b, a] = f @ kw[a], f @ qw[a]
    outs, ds = [], []
    for a in range(n):
        hk = dh.T @ c[:, a] + sum((ds[b] * A[b, a] for b in range(a)), np.zeros(S0.shape[0]))
        hq = dh.T @ cq[:, a] + sum((ds[b] * B[b, a] for b in range(a)), np.zeros(S0.shape[0]))
        d = beta[a] * (vw[a] - (S0 @ (tot * pk[a]) + hk))
        ds.append(d)
        outs.append(S0 @ (tot * pq[a]) + hq + d * B[a, a])
    return np.array(outs), np.array(ds)


rng = np.random.default_rng(7)
worst = 0.0
for V, K, w, n in [(8, 16, 5, 4), (4, 8, 0, 1), (6, 12, 15, 1), (8, 16, 26, 6), (3, 5, 1, 8)]:
    S0 = rng.normal(size=(V, K))
    gh, kh, dh = -rng.uniform(0.01, 0.5, (w, K)), rng.normal(size=(w, K)), rng.normal(size=(w, V))
    gw, kw, qw = -rng.uniform(0.01, 0.5, (n, K)), rng.normal(size=(n, K)), rng.normal(size=(n, K))
    vw, beta = rng.normal(size=(n, V)), rng.uniform(0.1, 0.9, n)
    o1, d1 = fold_then_step(S0, gh, kh, dh, gw, kw, qw, vw, beta)
    o2, d2 = dots(S0, gh, kh, dh, gw, kw, qw, vw, beta)
    worst = max(worst, np.abs(o1 - o2).max(), np.abs(d1 - d2).max())
print(f"largest difference, dots vs fold-then-step (float64): {worst:.2e}")
sys.exit(0 if worst < 1e-10 else 1)
