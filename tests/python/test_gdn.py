"""Gated DeltaNet ops through the PyTorch binding, against the float64 gated delta rule written below:
classic decode, ReplaySSM decode (float32 and activation-dtype rings), speculative verify + commit
with random acceptance, the classic speculative path, bad input, CUDA-graph capture on a GPU."""
import math

import pytest
import torch

import replayssm
from conftest import (DTYPE_PAIRS, SENTINEL, SHORT, assert_rejected, cuda_only, distinct_slots, int32, out_tol, pair_id,
                      rel_err, rounded, skip_unsupported, state_tol, uniform)
from replayssm import ops
from streams import classic_spec_stream, decode_stream, replay_stream, spec_stream

# ---------------- the float64 truth ----------------


def softplus(u):
    return torch.where(u > 20, u, torch.log1p(torch.exp(u)))


def gdn_token(S, t, w, update_round=torch.float64):
    """One token per row through states S [n, HV, V, K] ("K-last"); t holds float64 q, k [n, H, K],
    v [n, HV, V], a, b [n, HV]. Returns the new states and o [n, HV, V]:
      g = -exp(A_log) softplus(a + dt_bias), alpha = exp(g), beta = sigmoid(b);
      q, k L2-normalised (eps 1e-6 inside the sqrt), q *= scale;
      d = beta (v - alpha S k);  S = alpha S + d k^T;  o = S q.
    update_round: d and k rounded where they enter the state (a ReplaySSM ring of that dtype keeps
    them so), not in this token's own output."""
    HV, K = S.shape[1], S.shape[3]
    q, k = t["q"].repeat_interleave(HV // t["q"].shape[1], 1), t["k"].repeat_interleave(HV // t["k"].shape[1], 1)
    if w["qk_l2norm"]:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * (w["scale"] or 1.0 / math.sqrt(K))
    beta = torch.sigmoid(t["b"])[..., None]
    if t["a"].dim() == 3:  # per-channel gates (Kimi Delta Attention form): alpha [n, HV, K] scales S's key columns
        alpha = torch.exp(-torch.exp(w["A_log"])[:, None] * softplus(t["a"] + w["dt_bias"]))
        S = S * alpha[:, :, None, :]
        d = beta * (t["v"] - torch.einsum("nhvk,nhk->nhv", S, k))
        o = torch.einsum("nhvk,nhk->nhv", S, q) + d * (k * q).sum(-1, keepdim=True)
        return S + rounded(d, update_round)[..., None] * rounded(k, update_round)[:, :, None, :], o
    alpha = torch.exp(-torch.exp(w["A_log"]) * softplus(t["a"] + w["dt_bias"]))[..., None]
    d = beta * (t["v"] - alpha * torch.einsum("nhvk,nhk->nhv", S, k))
    o = alpha * torch.einsum("nhvk,nhk->nhv", S, q) + d * (k * q).sum(-1, keepdim=True)
    S = alpha[..., None] * S + rounded(d, update_round)[..., None] * rounded(k, update_round)[:, :, None, :]
    return S, o


# ---------------- a problem ----------------

Q4B, Q122B = replayssm.gdn_preset("qwen3.5-4b"), replayssm.gdn_preset("qwen3.5-122b-a10b")


def gdn_shard(geo, tp):
    return geo[0] // tp, geo[1] // tp, geo[2], geo[3]


GEOMETRIES = {"qwen3.5-4b/tp4": gdn_shard(Q4B, 4), "qwen3.5-122b/tp8": gdn_shard(Q122B, 8)}


class World:
    def __init__(self, geo, state_dtype, act_dtype, device, rows=4, slots=7, padding=1, seed=0, ring_dtype=None,
                 out_f32=False, scale=0.0, per_channel=False):
        self.geo, self.state_dtype, self.act_dtype, self.device = geo, state_dtype, act_dtype, device
        self.per_channel = per_channel  # a [tokens, HV, K], dt_bias [HV, K], g rings [.., K]
        self.ring_dtype = ring_dtype or torch.float32
        self.gen = g = torch.Generator().manual_seed(seed)
        H, HV, K, V = geo
        A_log = uniform(g, [HV], 0, math.log(16)).float()
        dt_bias = torch.log(torch.expm1(torch.exp(uniform(g, [HV, K] if per_channel else [HV], math.log(1e-3),
                                                          math.log(0.1))))).float()
        self.w = {"A_log": A_log.to(device), "dt_bias": dt_bias.to(device)}
        self.w64 = {"A_log": A_log.double(), "dt_bias": dt_bias.double(), "scale": scale, "qk_l2norm": True}
        self.scale, self.out_dtype = scale, torch.float32 if out_f32 else act_dtype
        self.rows, self.slots = rows, slots
        self.slot_of_row = distinct_slots(g, rows, slots, padding)
        self.slot_idx = int32(self.slot_of_row, device)
        self.live = [r for r in range(rows) if self.slot_of_row[r] >= 0]
        self.live_slots = [self.slot_of_row[r] for r in self.live]
        self.ref = rounded(uniform(g, [slots, HV, V, K], -0.5, 0.5), state_dtype)

    @property
    def update_round(self):
        return self.ring_dtype if self.ring_dtype != torch.float32 else torch.float64

    def truth_step(self, S, t64):
        return gdn_token(S, t64, self.w64, self.update_round)

    def tokens(self, n):
        """q, k, v as views into one packed [n, q | k | v] projection row; a, b in float32 [n, HV]."""
        H, HV, K, V = self.geo
        g = self.gen
        qkv = uniform(g, [n, 2 * H * K + HV * V], -1, 1).to(self.act_dtype)
        a, b = uniform(g, [n, HV, K] if self.per_channel else [n, HV], -2, 2).float(), uniform(g, [n, HV], -3, 3).float()
        dev, ref = qkv.to(self.device, copy=True), qkv.double()
        cuts = {"q": (0, H * K, (H, K)), "k": (H * K, 2 * H * K, (H, K)), "v": (2 * H * K, 2 * H * K + HV * V, (HV, V))}
        tok = {name: dev[:, lo:hi].view(n, *shape) for name, (lo, hi, shape) in cuts.items()}
        t64 = {name: ref[:, lo:hi].view(n, *shape) for name, (lo, hi, shape) in cuts.items()}
        tok.update(a=a.to(self.device), b=b.to(self.device))
        t64.update(a=a.double(), b=b.double())
        return tok, t64

    def out(self, n):
        H, HV, K, V = self.geo
        return torch.full((n, HV, V), SENTINEL, dtype=self.out_dtype, device=self.device)

    def args(self, tok):
        return (tok["q"], tok["k"], tok["v"], tok["a"], tok["b"], self.w["A_log"], self.w["dt_bias"])

    def caches(self, **mode):
        c = replayssm.GdnReplayCaches(1, self.slots, *self.geo, state_dtype=self.state_dtype,
                                      ring_dtype=self.ring_dtype, device=self.device,
                                      per_channel_gates=self.per_channel, **mode)
        c.layers[0]["checkpoint"].copy_(self.ref)
        for name in ("d_ring", "k_ring", "g_ring"):
            c.layers[0][name].fill_(float("nan"))
        return c

    def tol(self):
        return out_tol(self.state_dtype, self.act_dtype, self.ring_dtype)


# ---------------- classic decode ----------------


@pytest.mark.parametrize("geo", list(GEOMETRIES), ids=str)
@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=pair_id)
def test_decode(device, geo, pair):
    skip_unsupported(device, pair)
    wd = World(GEOMETRIES[geo], *pair, device, out_f32=pair[1] == torch.bfloat16, scale=0.1 if pair[0] == pair[1] else 0)

    def decode(tok, state, out):
        ops.gdn_decode(*wd.args(tok), state, wd.slot_idx, out, scale=wd.scale)

    errs, state_err = decode_stream(wd, 3, decode)
    assert max(errs) <= wd.tol()
    assert state_err <= state_tol(pair[0])


# ---------------- ReplaySSM standard decode ----------------


def run_replay(wd, L, steps, step_fn=None):
    """streams.replay_stream; step_fn(tok, out, caches) runs the op (default: eager)."""
    if step_fn is None:
        def step_fn(tok, out, c):
            ops.gdn_replay_decode(*wd.args(tok), **c.layer(0), slot_idx=wd.slot_idx, out=out, scale=wd.scale)
            c.advance(wd.slot_idx)
    return replay_stream(wd, L, steps, step_fn)


# Rings in float32 for every pair, and in the activation dtype where that is 16-bit.
RING_CASES = [(p, torch.float32) for p in DTYPE_PAIRS] + [(p, p[1]) for p in DTYPE_PAIRS
                                                          if p[1] in (torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("geo", list(GEOMETRIES), ids=str)
@pytest.mark.parametrize("pair,ring", RING_CASES, ids=[f"{pair_id(p)}-ring_{SHORT[r]}" for p, r in RING_CASES])
def test_replay_decode(device, geo, pair, ring):
    skip_unsupported(device, pair)
    wd = World(GEOMETRIES[geo], *pair, device, seed=1, ring_dtype=ring)
    L = 8
    errs, ckpt_err, flushes = run_replay(wd, L, 2 * L + 3)
    assert max(errs) <= wd.tol()
    assert ckpt_err <= state_tol(pair[0], wd.ring_dtype) and flushes == 2 * len(wd.live_slots)


def test_pdl_flag_gives_the_same_steps_and_is_restored(device):
    """pdl=True on gdn_decode and gdn_replay_decode (programmatic dependent launch on CUDA, ignored on the CPU): the
    same truth over three classic steps and two ring cycles, and the thread's launch flag off again after each call."""
    from replayssm._lib import lib
    pair = (torch.float32, torch.bfloat16)
    wd = World(GEOMETRIES[list(GEOMETRIES)[0]], *pair, device, seed=5)

    def decode(tok, state, out):
        ops.gdn_decode(*wd.args(tok), state, wd.slot_idx, out, scale=wd.scale, pdl=True)
        assert lib.replayssm_launch_pdl() == 0

    errs, state_err = decode_stream(wd, 3, decode)
    assert max(errs) <= wd.tol() and state_err <= state_tol(pair[0])

    def step_fn(tok, out, c):
        ops.gdn_replay_decode(*wd.args(tok), **c.layer(0), slot_idx=wd.slot_idx, out=out, scale=wd.scale, pdl=True)
        assert lib.replayssm_launch_pdl() == 0
        c.advance(wd.slot_idx)

    L = 8
    errs, ckpt_err, flushes = run_replay(wd, L, 2 * L + 3, step_fn)
    assert max(errs) <= wd.tol()
    assert ckpt_err <= state_tol(pair[0], wd.ring_dtype) and flushes == 2 * len(wd.live_slots)


def test_replay_decode_1000_steps_error_does_not_grow(device):
    wd = World((1, 2, 128, 128), torch.float32, torch.float32, device, rows=3, slots=4, seed=2)
    errs, ckpt_err, flushes = run_replay(wd, 8, 1000)
    first, last = max(errs[:100]), max(errs[-100:])
    assert max(errs) <= wd.tol()
    assert last <= 2 * first + 1e-6, f"error grew: first 100 steps {first:.3g}, last 100 {last:.3g}"
    assert flushes == 125 * len(wd.live_slots)


# ---------------- ReplaySSM speculative verify + commit ----------------


def run_spec(wd, history, window, steps, full_windows=False, verify_fn=None, commit_fn=None):
    """streams.spec_stream; verify_fn(tok, qsl, out, caches) runs the op (default: eager)."""
    if verify_fn is None:
        def verify_fn(tok, qsl, out, c):
            ops.gdn_spec_verify(*wd.args(tok), **c.layer(0), slot_idx=wd.slot_idx, query_start_loc=qsl, out=out,
                                history=history, window=window, scale=wd.scale)
    return spec_stream(wd, history, window, steps, verify_fn, commit_fn, full_windows)


@pytest.mark.parametrize("geo", list(GEOMETRIES), ids=str)
@pytest.mark.parametrize("pair,ring", [((torch.float32, torch.float32), torch.float32),
                                       ((torch.float32, torch.bfloat16), torch.float32),
                                       ((torch.bfloat16, torch.bfloat16), torch.bfloat16)],
                         ids=["f32/f32", "f32/bf16", "bf16/bf16-bf16ring"])
def test_spec_verify_random_acceptance(device, geo, pair, ring):
    wd = World(GEOMETRIES[geo], *pair, device, seed=3, ring_dtype=ring)
    errs = run_spec(wd, history=8, window=4, steps=30)
    assert max(errs) <= wd.tol()


def test_spec_pdl_flags_give_the_same_steps_and_are_restored(device):
    """pdl=True on gdn_spec_verify and on the caches' commit (CUDA: programmatic dependent launches; the CPU ignores
    it): the same truth over 30 random-acceptance steps (early flushes included), the thread's flag off after each."""
    from replayssm._lib import lib
    wd = World(GEOMETRIES[list(GEOMETRIES)[0]], torch.float32, torch.bfloat16, device, seed=6)
    history, window = 8, 4

    def verify(tok, qsl, out, c):
        ops.gdn_spec_verify(*wd.args(tok), **c.layer(0), slot_idx=wd.slot_idx, query_start_loc=qsl, out=out,
                            history=history, window=window, scale=wd.scale, pdl=True)
        assert lib.replayssm_launch_pdl() == 0

    def commit(acc, qsl, c):
        c.commit(wd.slot_idx, acc, qsl, pdl=True)
        assert lib.replayssm_launch_pdl() == 0

    errs = run_spec(wd, history, window, 30, verify_fn=verify, commit_fn=commit)
    assert max(errs) <= wd.tol()


# ---------------- per-channel decay gates (the Kimi Delta Attention form), every op ----------------


@pytest.mark.parametrize("pair", [(torch.float32, torch.float32), (torch.float32, torch.bfloat16)], ids=pair_id)
def test_per_channel_gates_every_op(device, pair):
    """a [tokens, HV, K] and dt_bias [HV, K]: classic decode, ReplaySSM decode over two ring cycles, speculative verify
    with random acceptance (both backends; CUDA runs src/cuda/gdn_per_channel.cu) against the float64
    truth."""
    skip_unsupported(device, pair)
    geo = GEOMETRIES["qwen3.5-4b/tp4"]
    wd = World(geo, *pair, device, seed=11, per_channel=True)

    def decode(tok, state, out):
        ops.gdn_decode(*wd.args(tok), state, wd.slot_idx, out, scale=wd.scale)

    errs, state_err = decode_stream(wd, 3, decode)
    assert max(errs) <= wd.tol() and state_err <= state_tol(pair[0])
    wd = World(geo, *pair, device, seed=12, per_channel=True)
    errs, ckpt_err, flushes = run_replay(wd, 8, 19)
    assert max(errs) <= wd.tol()
    assert ckpt_err <= state_tol(pair[0], wd.ring_dtype) and flushes == 2 * len(wd.live_slots)
    wd = World(geo, *pair, device, seed=13, per_channel=True)
    assert max(run_spec(wd, history=8, window=4, steps=20)) <= wd.tol()


# ---------------- classic speculative path ----------------


def test_classic_spec_decode(device):
    T, steps = 4, 10
    wd = World(GEOMETRIES["qwen3.5-4b/tp4"], torch.float32, torch.bfloat16, device, rows=3, slots=3 * T + 1, seed=4)

    def decode(tok, state, si, na, qsl, out):
        ops.gdn_classic_spec_decode(*wd.args(tok), state, si, na, qsl, out)

    # the GDN window carries the stored (rounded) state
    out_errs, state_errs = classic_spec_stream(wd, T, steps, decode, carry_stored=True)
    assert max(out_errs) <= wd.tol()
    assert max(state_errs) <= state_tol(torch.float32)


def test_materialize_then_classic_decode_on_the_checkpoint(device):
    """The small-batch route: replay steps, then gdn_materialize + reset_cursors, then gdn_decode on the checkpoint,
    against gdn_decode on a classic pool that started from the same states."""
    H, HV, K, V, L, slots = 2, 4, 64, 64, 8, 3
    gen = torch.Generator().manual_seed(5)
    A_log, dt_bias = uniform(gen, [HV], 0, 2.7).float().to(device), uniform(gen, [HV], -6, -2).float().to(device)
    ckpt = uniform(gen, [slots, HV, V, K], -0.2, 0.2).float().to(device)
    pool = ckpt.clone()
    d_ring = torch.full([slots, HV, L, V], float("nan"), device=device)
    k_ring = torch.full([slots, H, L, K], float("nan"), device=device)
    g_ring = torch.full([slots, HV, L], float("nan"), device=device)
    cursor = torch.zeros(slots, dtype=torch.int32, device=device)
    rows = [2, 0]
    slot_idx = int32(rows, device)
    for step in range(12):
        q, k = (uniform(gen, [2, H, K], -1, 1).float().to(device) for _ in range(2))
        v = uniform(gen, [2, HV, V], -1, 1).float().to(device)
        a, b = (uniform(gen, [2, HV], -2, 2).float().to(device) for _ in range(2))
        out_a, out_b = torch.empty(2, HV, V, device=device), torch.empty(2, HV, V, device=device)
        if step < 5:  # w = 5 at the switch
            ops.gdn_replay_decode(q, k, v, a, b, A_log, dt_bias, ckpt, d_ring, k_ring, g_ring, cursor, slot_idx, out_a)
            ops.advance_cursors(cursor, slot_idx, L)
        else:
            if step == 5:
                ops.gdn_materialize(ckpt, d_ring, k_ring, g_ring, cursor, slot_idx)
                ops.reset_cursors(cursor, slot_idx)
            ops.gdn_decode(q, k, v, a, b, A_log, dt_bias, ckpt, slot_idx, out_a)
        ops.gdn_decode(q, k, v, a, b, A_log, dt_bias, pool, slot_idx, out_b)
        assert rel_err(out_a, out_b) < 1e-4, f"step {step}"
    assert rel_err(ckpt[rows], pool[rows]) < 1e-4
    assert rel_err(ckpt[1], pool[1]) == 0  # not in the batch
    assert cursor.tolist() == [0, 0, 0]


def test_export_state_and_fork_against_a_classic_pool(device):
    """Replay steps on the cache helpers, then state_of (export_state) against gdn_decode on a classic pool that
    started from the same states; fork a slot, after which both decode alike; the cache is only read."""
    H, HV, K, V, L, slots = 2, 4, 64, 64, 8, 4
    gen = torch.Generator().manual_seed(9)
    A_log, dt_bias = uniform(gen, [HV], 0, 2.7).float().to(device), uniform(gen, [HV], -6, -2).float().to(device)
    caches = replayssm.GdnReplayCaches(1, slots, H, HV, K, V, ring_len=L, device=device)
    caches.layers[0]["checkpoint"].copy_(uniform(gen, [slots, HV, V, K], -0.2, 0.2).float())
    pool = caches.layers[0]["checkpoint"].clone()

    def tokens(n):
        q, k = (uniform(gen, [n, H, K], -1, 1).float().to(device) for _ in range(2))
        v = uniform(gen, [n, HV, V], -1, 1).float().to(device)
        a, b = (uniform(gen, [n, HV], -2, 2).float().to(device) for _ in range(2))
        return q, k, v, a, b

    def replay(rows, t):
        out = torch.empty(len(rows), HV, V, device=device)
        ops.gdn_replay_decode(*t, A_log, dt_bias, **caches.layer(0), slot_idx=int32(rows, device), out=out)
        caches.advance(int32(rows, device))
        return out

    rows = [2, 0]
    for _ in range(L + 3):
        t = tokens(2)
        replay(rows, t)
        ops.gdn_decode(*t, A_log, dt_bias, pool, int32(rows, device), torch.empty(2, HV, V, device=device))
    before = {k: v.clone() for k, v in caches.layer(0).items()}
    for s in rows:
        assert rel_err(caches.state_of(s)[0], pool[s]) < 1e-4
    for k, v in caches.layer(0).items():
        assert torch.equal(v, before[k]), k
    caches.fork([2], [3])
    assert rel_err(caches.layers[0]["checkpoint"][3], pool[2]) < 1e-4
    for _ in range(L + 2):
        q, k, v, a, b = tokens(1)
        out = replay([2, 3], tuple(torch.cat([x, x]) for x in (q, k, v, a, b)))
        assert rel_err(out[1], out[0]) < 1e-4


# ---------------- bad input ----------------


def test_bad_input_raises_with_the_argument_and_writes_nothing(device):
    wd = World(GEOMETRIES["qwen3.5-4b/tp4"], torch.float32, torch.bfloat16, device, seed=5)
    c = wd.caches(history=8, window=4)
    T = 4
    tok, _ = wd.tokens(wd.rows * T)
    out = wd.out(wd.rows * T)
    qsl = int32([r * T for r in range(wd.rows + 1)], device)
    good = dict(q=tok["q"], k=tok["k"], v=tok["v"], a=tok["a"], b=tok["b"], A_log=wd.w["A_log"],
                dt_bias=wd.w["dt_bias"], **c.layer(0), slot_idx=wd.slot_idx, query_start_loc=qsl, out=out,
                history=8, window=T)
    written = [c.layers[0][n] for n in ("checkpoint", "d_ring", "k_ring", "g_ring")] + [c.cursor, out]
    H, HV, K, V = wd.geo
    long_qsl = int32([0, T + 1] + [r * T for r in range(2, wd.rows + 1)], device)
    cases = [
        ("in.k", dict(k=tok["k"][..., :K // 2])),
        ("in.v", dict(v=tok["v"].reshape(-1, HV * V))),  # caught in Python: geometry comes from q and v
        ("w.dt_bias", dict(dt_bias=wd.w["dt_bias"].double())),
        ("w.scale", dict(scale=-1.0)),
        ("cache.k_ring", dict(k_ring=c.layers[0]["k_ring"][:, :, :8])),
        ("spec", dict(history=2)),
        ("query_start_loc", dict(query_start_loc=long_qsl)),
        ("slot_idx", dict(slot_idx=int32([wd.slots] + wd.slot_of_row[1:], device))),
    ]
    assert_rejected(ops.gdn_spec_verify, good, cases, written)


# ---------------- CUDA graphs ----------------


@cuda_only()
def test_cuda_graph_captures_a_decode_step():
    dev, L = torch.device("cuda"), 8
    wd = World(GEOMETRIES["qwen3.5-4b/tp4"], torch.float32, torch.bfloat16, dev, seed=10)
    static, _ = wd.tokens(wd.rows)
    static_out = wd.out(wd.rows)
    graph = []

    def step(tok, out, c):
        for k in ("q", "k", "v", "a", "b"):
            static[k].copy_(tok[k])
        if not graph:
            def run():
                ops.gdn_replay_decode(*wd.args(static), **c.layer(0), slot_idx=wd.slot_idx, out=static_out)
                c.advance(wd.slot_idx)
            run()
            torch.cuda.synchronize()
            graph.append(torch.cuda.CUDAGraph())
            with torch.cuda.graph(graph[0]):
                run()
        else:
            graph[0].replay()
        out.copy_(static_out)
        torch.cuda.synchronize()

    errs, _, flushes = run_replay(wd, L, 2 * L + 1, step_fn=step)
    assert max(errs) <= wd.tol() and flushes == 2 * len(wd.live_slots)
