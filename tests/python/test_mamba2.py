"""Mamba-2 ops through the PyTorch binding, against the float64 recurrence written below (not against
the C++ code): classic decode, ReplaySSM decode (both routes), speculative verify + commit with random
acceptance, the classic speculative path, bad input, and on a GPU CUDA-graph capture; torch.compile
where torch has custom ops."""
import pytest
import torch

import replayssm
from conftest import (DTYPE_PAIRS, SENTINEL, assert_rejected, cuda_only, distinct_slots, int32, needs_custom_op,
                      out_tol, pair_id, rel_err, rounded, shard, skip_unsupported, state_tol, uniform)
from replayssm import ops
from streams import classic_spec_stream, decode_stream, replay_stream, sel, spec_stream

# ---------------- the float64 truth ----------------


def softplus(u):
    return torch.where(u > 20, u, torch.log1p(torch.exp(u)))


def mamba2_token(S, t, w):
    """One token per row through states S [n, H, P, N]; t holds float64 x [n, H, P], dt [n, H],
    B, C [n, G, N], z [n, H, P] or None. Returns the new states and y [n, H, P]:
      delta = softplus(dt + dt_bias); S = exp(A delta) S + delta x B^T; y = S C + D x; y *= silu(z)."""
    H, G = S.shape[1], t["B"].shape[1]
    Bh, Ch = t["B"].repeat_interleave(H // G, 1), t["C"].repeat_interleave(H // G, 1)  # heads of a group are contiguous
    u = t["dt"] + (w["dt_bias"] if w["dt_bias"] is not None else 0.0)
    delta = softplus(u) if w["dt_softplus"] else u
    dA = torch.exp(w["A"] * delta)
    S = dA[..., None, None] * S + (delta[..., None] * t["x"])[..., None] * Bh[:, :, None, :]
    y = (S * Ch[:, :, None, :]).sum(-1)
    if w["D"] is not None:
        y = y + w["D"][:, None] * t["x"]
    if t["z"] is not None:
        y = y * t["z"] * torch.sigmoid(t["z"])
    return S, y


# ---------------- a problem: weights, slots, the truth's state pool, token inputs ----------------

NANO, SUPER = replayssm.mamba2_preset("nemotron3-nano-4b"), replayssm.mamba2_preset("nemotron3-super-120b")
GEOMETRIES = {"nano/tp4": shard(NANO, 4), "super/tp8": shard(SUPER, 8)}


class World:
    def __init__(self, geo, state_dtype, act_dtype, device, rows=4, slots=7, padding=1, seed=0, full_weights=True,
                 dt_f32=False):
        self.geo, self.state_dtype, self.act_dtype, self.device = geo, state_dtype, act_dtype, device
        self.gen = torch.Generator().manual_seed(seed)
        H, P, N, G = geo
        g = self.gen
        A = (-torch.exp(uniform(g, [H], 0, 1))).float()
        dt_bias, D = uniform(g, [H], 0, 0.5).float(), uniform(g, [H], 0, 1).float()
        self.full, self.dt_f32 = full_weights, dt_f32
        self.w = {"A": A.to(device), "dt_bias": dt_bias.to(device) if full_weights else None,
                  "D": D.to(device) if full_weights else None}
        self.w64 = {"A": A.double(), "dt_bias": dt_bias.double() if full_weights else None,
                    "D": D.double() if full_weights else None, "dt_softplus": full_weights}
        self.rows, self.slots = rows, slots
        self.slot_of_row = distinct_slots(g, rows, slots, padding)
        self.slot_idx = int32(self.slot_of_row, device)
        self.live = [r for r in range(rows) if self.slot_of_row[r] >= 0]
        self.live_slots = [self.slot_of_row[r] for r in self.live]
        # The truth's pool (float64), starting from random prefill-like states in the state dtype.
        self.ref = rounded(uniform(g, [slots, H, P, N], -1, 1), state_dtype)

    def truth_step(self, S, t64):
        return mamba2_token(S, t64, self.w64)

    def tokens(self, n):
        """n tokens as the engine has them: x, B, C, z (and dt) are views into one packed
        [n, z | x | B | C | dt | pad] activation buffer (free token stride). Returns the op's views
        and their float64 values."""
        H, P, N, G = self.geo
        g = self.gen
        parts = [uniform(g, [n, H * P], -2, 2), uniform(g, [n, H * P], -1, 1), uniform(g, [n, G * N], -1, 1),
                 uniform(g, [n, G * N], -1, 1), uniform(g, [n, H], -4, 1), torch.zeros(n, 3, dtype=torch.float64)]
        buf = torch.cat(parts, 1).to(self.act_dtype)
        ref = buf.double()
        dev = buf.to(self.device)
        offs = [0]
        for p in parts:
            offs.append(offs[-1] + p.shape[1])

        def cut(t, i, shape):
            return t[:, offs[i]:offs[i + 1]].view(n, *shape)

        names = [("z", (H, P)), ("x", (H, P)), ("B", (G, N)), ("C", (G, N)), ("dt", (H,))]
        tok = {name: cut(dev, i, shape) for i, (name, shape) in enumerate(names)}
        tok64 = {name: cut(ref, i, shape) for i, (name, shape) in enumerate(names)}
        if self.dt_f32:  # float32 dt, transposed storage: dt may be strided any way
            dt = parts[4].float()
            tok["dt"] = dt.t().contiguous().t().to(self.device)
            tok64["dt"] = dt.double()
        if not self.full:
            tok["z"] = tok64["z"] = None
        return tok, tok64

    def out(self, n):
        H, P, _, _ = self.geo
        return torch.full((n, H, P), SENTINEL, dtype=self.act_dtype, device=self.device)

    def kw(self, tok):
        """The optional arguments of every Mamba-2 op."""
        return dict(z=tok["z"], dt_bias=self.w["dt_bias"], D=self.w["D"], dt_softplus=self.full)

    def caches(self, **mode):
        c = replayssm.Mamba2ReplayCaches(1, self.slots, *self.geo, state_dtype=self.state_dtype,
                                         act_dtype=self.act_dtype, device=self.device, **mode)
        c.layers[0]["checkpoint"].copy_(self.ref)
        for name in ("x_ring", "dt_ring", "B_ring"):  # poison: an entry read before it is written shows
            c.layers[0][name].fill_(float("nan"))
        return c


# ---------------- classic decode ----------------


@pytest.mark.parametrize("geo", list(GEOMETRIES), ids=str)
@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=pair_id)
def test_decode(device, geo, pair):
    skip_unsupported(device, pair)
    wd = World(GEOMETRIES[geo], *pair, device, dt_f32=pair[1] == torch.bfloat16)

    def decode(tok, state, out):
        ops.mamba2_decode(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], state, wd.slot_idx, out, **wd.kw(tok))

    errs, state_err = decode_stream(wd, 3, decode)
    assert max(errs) <= out_tol(*pair)
    assert state_err <= state_tol(pair[0])


def test_decode_unsharded_super_without_optional_weights(device):
    wd = World(SUPER, torch.float32, torch.bfloat16, device, rows=2, slots=3, padding=0, full_weights=False)
    state = wd.ref.float().to(device, copy=True)
    tok, t64 = wd.tokens(2)
    out = wd.out(2)
    ops.mamba2_decode(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], state, wd.slot_idx, out, **wd.kw(tok))
    S, y = mamba2_token(wd.ref[wd.live_slots], sel(t64, wd.live), wd.w64)
    assert rel_err(out, y) <= out_tol(torch.float32, torch.bfloat16)
    assert rel_err(state[wd.live_slots], S) <= state_tol(torch.float32)


def test_pdl_flag_gives_the_same_steps_and_is_restored(device):
    """pdl=True on mamba2_decode (programmatic dependent launch on CUDA, ignored on the CPU): the same truth, and the
    thread's launch flag is back to off after each call."""
    from replayssm._lib import lib
    pair = (torch.float32, torch.bfloat16)
    wd = World(GEOMETRIES["super/tp8"], *pair, device, seed=3)

    def decode(tok, state, out):
        ops.mamba2_decode(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], state, wd.slot_idx, out, pdl=True,
                          **wd.kw(tok))
        assert lib.replayssm_launch_pdl() == 0

    errs, state_err = decode_stream(wd, 3, decode)
    assert max(errs) <= out_tol(*pair) and state_err <= state_tol(pair[0])


# ---------------- ReplaySSM standard decode ----------------


def run_replay(wd, L, steps, route=ops.OUTPUT_ONLY, step_fn=None):
    """streams.replay_stream (one layer); step_fn(tok, out, caches) runs the op (default: eager)."""
    if step_fn is None:
        def step_fn(tok, out, c):
            ops.mamba2_replay_decode(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], **c.layer(0),
                                     slot_idx=wd.slot_idx, out=out, route=route, **wd.kw(tok))
            c.advance(wd.slot_idx)
    return replay_stream(wd, L, steps, step_fn)


@pytest.mark.parametrize("route", [ops.OUTPUT_ONLY, ops.STATE_AND_OUTPUT], ids=["output_only", "state_and_output"])
@pytest.mark.parametrize("geo", list(GEOMETRIES), ids=str)
@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=pair_id)
def test_replay_decode(device, geo, pair, route):
    skip_unsupported(device, pair)
    wd = World(GEOMETRIES[geo], *pair, device, seed=1)
    untouched = wd.ref[[s for s in range(wd.slots) if s not in wd.live_slots]].clone()
    L = 8
    errs, ckpt_err, flushes = run_replay(wd, L, 2 * L + 3, route)
    assert max(errs) <= out_tol(*pair)
    assert ckpt_err <= state_tol(pair[0]) and flushes == 2 * len(wd.live_slots)
    assert torch.equal(wd.ref[[s for s in range(wd.slots) if s not in wd.live_slots]], untouched)


def test_replay_pdl_flag_gives_the_same_steps_and_is_restored(device):
    """pdl=True on mamba2_replay_decode over two ring cycles (flush steps included): the same truth, the flag restored."""
    from replayssm._lib import lib
    pair = (torch.float32, torch.bfloat16)
    wd = World(GEOMETRIES["super/tp8"], *pair, device, seed=4)

    def step_fn(tok, out, c):
        ops.mamba2_replay_decode(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], **c.layer(0), slot_idx=wd.slot_idx,
                                 out=out, pdl=True, **wd.kw(tok))
        assert lib.replayssm_launch_pdl() == 0
        c.advance(wd.slot_idx)

    L = 8
    errs, ckpt_err, flushes = run_replay(wd, L, 2 * L + 3, step_fn=step_fn)
    assert max(errs) <= out_tol(*pair)
    assert ckpt_err <= state_tol(pair[0]) and flushes == 2 * len(wd.live_slots)


def test_replay_decode_1000_steps_error_does_not_grow(device):
    wd = World(shard(SUPER, 16), torch.float32, torch.float32, device, rows=3, slots=4, seed=2)
    errs, ckpt_err, flushes = run_replay(wd, 8, 1000)
    first, last = max(errs[:100]), max(errs[-100:])
    assert max(errs) <= out_tol(torch.float32, torch.float32)
    assert last <= 2 * first + 1e-6, f"error grew: first 100 steps {first:.3g}, last 100 {last:.3g}"
    assert ckpt_err <= state_tol(torch.float32) and flushes == 125 * len(wd.live_slots)


# ---------------- ReplaySSM speculative verify + commit ----------------


def run_spec(wd, history, window, steps, full_windows=False, verify_fn=None, commit_fn=None):
    """streams.spec_stream; verify_fn(tok, qsl, out, caches) runs the op (default: eager)."""
    if verify_fn is None:
        def verify_fn(tok, qsl, out, c):
            ops.mamba2_spec_verify(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], **c.layer(0),
                                   slot_idx=wd.slot_idx, query_start_loc=qsl, out=out, history=history,
                                   window=window, **wd.kw(tok))
    return spec_stream(wd, history, window, steps, verify_fn, commit_fn, full_windows)


@pytest.mark.parametrize("geo", list(GEOMETRIES), ids=str)
@pytest.mark.parametrize("pair", [(torch.float32, torch.float32), (torch.float32, torch.bfloat16),
                                  (torch.bfloat16, torch.bfloat16)], ids=pair_id)
def test_spec_verify_random_acceptance(device, geo, pair):
    wd = World(GEOMETRIES[geo], *pair, device, seed=3)
    errs = run_spec(wd, history=8, window=4, steps=40)
    assert max(errs) <= out_tol(*pair)


def test_spec_pdl_flags_give_the_same_steps_and_are_restored(device):
    """pdl=True on mamba2_spec_verify and commit_cursors (and mamba2_classic_spec_decode below): the same truth, and the
    thread's launch flag off again after each call."""
    from replayssm._lib import lib
    wd = World(GEOMETRIES["super/tp8"], torch.float32, torch.bfloat16, device, seed=6)

    def verify_fn(tok, qsl, out, c):
        ops.mamba2_spec_verify(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], **c.layer(0), slot_idx=wd.slot_idx,
                               query_start_loc=qsl, out=out, history=8, window=4, pdl=True, **wd.kw(tok))
        assert lib.replayssm_launch_pdl() == 0

    def commit_fn(acc, qsl, c):
        c.commit(wd.slot_idx, acc, qsl, pdl=True)
        assert lib.replayssm_launch_pdl() == 0

    errs = run_spec(wd, history=8, window=4, steps=40, verify_fn=verify_fn, commit_fn=commit_fn)
    assert max(errs) <= out_tol(torch.float32, torch.bfloat16)


# ---------------- classic speculative path ----------------


def test_classic_spec_decode(device):
    T, steps = 4, 12
    wd = World(GEOMETRIES["super/tp8"], torch.float32, torch.bfloat16, device, rows=3, slots=3 * T + 1, seed=4)

    for pdl in (False, True):
        def decode(tok, state, si, na, qsl, out):
            ops.mamba2_classic_spec_decode(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], state, si, na, qsl, out,
                                           pdl=pdl, **wd.kw(tok))

        # the Mamba-2 window carries the exact state (and stores a copy per token)
        out_errs, state_errs = classic_spec_stream(wd, T, steps, decode, carry_stored=False)
        assert max(out_errs) <= out_tol(torch.float32, torch.bfloat16)
        assert max(state_errs) <= state_tol(torch.float32)


def test_materialize_then_classic_decode_on_the_checkpoint(device):
    """The small-batch route: replay steps, then mamba2_materialize + reset_cursors, then mamba2_decode on the
    checkpoint; outputs and the final states against the float64 recurrence."""
    H, P, N, G, L, slots = 4, 16, 64, 2, 8, 3  # dstate 64: the CUDA kernels take 64 or 128
    gen = torch.Generator().manual_seed(3)
    A = (-torch.exp(uniform(gen, [H], 0, 1))).float()
    w64 = {"A": A.double(), "dt_bias": None, "D": None, "dt_softplus": True}
    S = uniform(gen, [slots, H, P, N], -0.5, 0.5).float().double()  # the truth's pool
    ckpt = S.float().to(device)
    x_ring = torch.full([slots, H, L, P], float("nan"), device=device)
    dt_ring = torch.full([slots, H, L], float("nan"), device=device)
    B_ring = torch.full([slots, G, L, N], float("nan"), device=device)
    cursor = torch.zeros(slots, dtype=torch.int32, device=device)
    rows = [2, 0]
    slot_idx, A_d = int32(rows, device), A.to(device)
    for step in range(12):
        t = {"x": uniform(gen, [2, H, P], -1, 1).float(), "dt": uniform(gen, [2, H], -4, 1).float(),
             "B": uniform(gen, [2, G, N], -1, 1).float(), "C": uniform(gen, [2, G, N], -1, 1).float()}
        t64 = {k: v.double() for k, v in t.items()}
        t64["z"] = None
        S[rows], y = mamba2_token(S[rows], t64, w64)
        x, dt, B, C = (t[k].to(device) for k in ("x", "dt", "B", "C"))
        out = torch.empty(2, H, P, device=device)
        if step < 5:  # w = 5 at the switch
            ops.mamba2_replay_decode(x, dt, B, C, A_d, ckpt, x_ring, dt_ring, B_ring, cursor, slot_idx, out)
            ops.advance_cursors(cursor, slot_idx, L)
        else:
            if step == 5:
                ops.mamba2_materialize(A_d, ckpt, x_ring, dt_ring, B_ring, cursor, slot_idx)
                ops.reset_cursors(cursor, slot_idx)
            ops.mamba2_decode(x, dt, B, C, A_d, ckpt, slot_idx, out)
        assert rel_err(out, y) < 1e-4, f"step {step}"
    assert rel_err(ckpt[rows], S[rows]) < 1e-4
    assert rel_err(ckpt[1], S[1]) == 0  # not in the batch
    assert cursor.tolist() == [0, 0, 0]


def test_export_state_fork_and_state_of(device):
    """export_state: the current state of a slot mid-ring into another pool equals the float64 recurrence and leaves
    the cache as it was; the cache helpers' state_of gives the same, and fork makes a free slot decode as its source."""
    H, P, N, G, L, slots = 4, 16, 64, 2, 8, 4
    gen = torch.Generator().manual_seed(11)
    A = (-torch.exp(uniform(gen, [H], 0, 1))).float()
    w64 = {"A": A.double(), "dt_bias": None, "D": None, "dt_softplus": True}
    caches = replayssm.Mamba2ReplayCaches(1, slots, H, P, N, G, ring_len=L, act_dtype=torch.float32, device=device)
    S = uniform(gen, [slots, H, P, N], -0.5, 0.5).float().double()
    caches.layers[0]["checkpoint"].copy_(S.float())
    rows = [2, 0]
    slot_idx, A_d = int32(rows, device), A.to(device)

    def step(rows_now, t):
        x, dt, B, C = (t[k].to(device) for k in ("x", "dt", "B", "C"))
        out = torch.empty(len(rows_now), H, P, device=device)
        ops.mamba2_replay_decode(x, dt, B, C, A_d, **caches.layer(0), slot_idx=int32(rows_now, device), out=out)
        caches.advance(int32(rows_now, device))
        return out

    def tokens(n):
        return {"x": uniform(gen, [n, H, P], -1, 1).float(), "dt": uniform(gen, [n, H], -4, 1).float(),
                "B": uniform(gen, [n, G, N], -1, 1).float(), "C": uniform(gen, [n, G, N], -1, 1).float()}

    for _ in range(L + 3):  # past one flush, mid-ring
        t = tokens(2)
        t64 = {k: v.double() for k, v in t.items()}
        t64["z"] = None
        S[rows], _ = mamba2_token(S[rows], t64, w64)
        step(rows, t)
    before = {k: v.clone() for k, v in caches.layer(0).items()}
    dst = torch.full([3, H, P, N], -7.0, device=device)
    ops.mamba2_export_state(A_d, **caches.layer(0), slot_idx=slot_idx, dst=dst, dst_idx=int32([2, -1], device))
    assert rel_err(dst[2], S[2]) < 1e-5
    assert (dst[:2] == -7.0).all()  # row 1 skipped, destination 0 and 1 untouched
    for k, v in caches.layer(0).items():
        assert torch.equal(v, before[k]), k
    got = caches.state_of(0, A=A_d)
    assert len(got) == 1 and rel_err(got[0], S[0]) < 1e-5
    # fork slot 2 into the free slot 1; fed the same tokens, both decode alike
    caches.fork([2], [1], A=A_d)
    assert caches.cursor[1].item() == 0
    for _ in range(L + 2):
        t = tokens(1)
        t2 = {k: torch.cat([v, v]) for k, v in t.items()}
        out = step([2, 1], t2)
        assert rel_err(out[1], out[0]) < 1e-5
    # a destination that is another row's source: index values of CUDA tensors are checked with device validation on
    # (docs/python.md), so the check runs with it, as assert_rejected does; nothing may be written
    before = {k: v.clone() for k, v in caches.layer(0).items()}
    was = replayssm.device_validation()
    replayssm.set_device_validation(True)
    try:
        with pytest.raises(replayssm.ReplaySSMError) as e:
            ops.mamba2_export_state(A_d, **caches.layer(0), slot_idx=int32([2, 0], device),
                                    dst=caches.layers[0]["checkpoint"], dst_idx=int32([0, 3], device))
    finally:
        replayssm.set_device_validation(was)
    assert e.value.argument == "dst_idx"
    for k, v in caches.layer(0).items():
        assert torch.equal(v, before[k]), k


# ---------------- bad input ----------------


def test_bad_input_raises_with_the_argument_and_writes_nothing(device):
    wd = World(GEOMETRIES["super/tp8"], torch.float32, torch.bfloat16, device, seed=5)
    c = wd.caches(ring_len=8)
    tok, _ = wd.tokens(wd.rows)
    out = wd.out(wd.rows)
    good = dict(x=tok["x"], dt=tok["dt"], B=tok["B"], C=tok["C"], A=wd.w["A"], **c.layer(0), slot_idx=wd.slot_idx,
                out=out, **wd.kw(tok))
    written = [c.layers[0][n] for n in ("checkpoint", "x_ring", "dt_ring", "B_ring")] + [c.cursor, out]
    H, P, N, G = wd.geo
    bad_slots = list(wd.slot_of_row)
    bad_slots[wd.live[0]] = wd.slots  # out of range
    dup_slots = [wd.live_slots[0]] * wd.rows
    cursor_oob = c.cursor.clone()
    cursor_oob[wd.live_slots[0]] = 8
    cases = {
        "in.C": dict(C=tok["C"][..., :N - 1]),
        "in.x": dict(x=tok["x"].reshape(wd.rows, H * P)),  # caught in Python: geometry comes from x
        "w.dt_bias": dict(dt_bias=wd.w["dt_bias"].double()),
        "out": dict(out=out.float()),
        "cache.x_ring": dict(x_ring=c.layers[0]["x_ring"].float()),
        "slot_idx": dict(slot_idx=wd.slot_idx.long()),
        "cache.cursor": dict(cursor=cursor_oob),
    }
    cases_values = {"slot_idx": [dict(slot_idx=int32(bad_slots, device)), dict(slot_idx=int32(dup_slots, device))]}
    if device.type == "cuda":
        cases["in.dt"] = dict(dt=tok["dt"].cpu())
    assert_rejected(ops.mamba2_replay_decode, good,
                    list(cases.items()) + [(a, ch) for a, l in cases_values.items() for ch in l], written)


# ---------------- CUDA graphs ----------------


@cuda_only()
def test_cuda_graph_captures_a_whole_decode_step():
    """Two Mamba-2 layers + the cursor advance captured once, replayed over two ring cycles with new
    inputs copied into the captured buffers; outputs against the truth of each layer."""
    dev, L, layers = torch.device("cuda"), 8, 2
    worlds = [World(GEOMETRIES["super/tp8"], torch.float32, torch.bfloat16, dev, seed=10 + i) for i in range(layers)]
    for wd in worlds[1:]:  # one slot mapping, one cursor tensor for the model
        wd.slot_of_row, wd.slot_idx, wd.live, wd.live_slots = (worlds[0].slot_of_row, worlds[0].slot_idx,
                                                               worlds[0].live, worlds[0].live_slots)
        wd.ref = rounded(uniform(wd.gen, list(worlds[0].ref.shape), -1, 1), torch.float32)
    caches = replayssm.Mamba2ReplayCaches(layers, worlds[0].slots, *worlds[0].geo, ring_len=L, device=dev)
    for i, wd in enumerate(worlds):
        caches.layers[i]["checkpoint"].copy_(wd.ref)
    static = [wd.tokens(wd.rows)[0] for wd in worlds]
    outs = [wd.out(wd.rows) for wd in worlds]

    def step():
        for i, wd in enumerate(worlds):
            t = static[i]
            ops.mamba2_replay_decode(t["x"], t["dt"], t["B"], t["C"], wd.w["A"], **caches.layer(i),
                                     slot_idx=wd.slot_idx, out=outs[i], **wd.kw(t))
        caches.advance(worlds[0].slot_idx)

    g = None
    for it in range(2 * L + 1):
        t64s = []
        for i, wd in enumerate(worlds):
            tok, t64 = wd.tokens(wd.rows)
            for k in ("x", "dt", "B", "C", "z"):
                static[i][k].copy_(tok[k])
            t64s.append(t64)
        if it == 0:
            step()  # eager warm-up step, then capture (capturing runs nothing)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
        else:
            g.replay()
        torch.cuda.synchronize()
        for i, wd in enumerate(worlds):
            S, y = mamba2_token(wd.ref[wd.live_slots], sel(t64s[i], wd.live), wd.w64)
            wd.ref[wd.live_slots] = S
            assert rel_err(outs[i][wd.live], y) <= out_tol(torch.float32, torch.bfloat16), (it, i)
    assert caches.cursor[worlds[0].live_slots].tolist() == [(2 * L + 1) % L] * len(worlds[0].live_slots)


@cuda_only()
def test_cuda_graph_speculative_verify_and_commit():
    """Verify and commit captured as two graphs (acceptance is decided between them), full windows,
    random acceptance written into the captured num_accepted buffer before each commit replay."""
    dev, T = torch.device("cuda"), 4
    wd = World(GEOMETRIES["super/tp8"], torch.float32, torch.bfloat16, dev, seed=12)
    n_tok = wd.rows * T
    static_tok, _ = wd.tokens(n_tok)
    static_out = wd.out(n_tok)
    static_qsl = int32([r * T for r in range(wd.rows + 1)], dev)
    static_acc = int32([1] * wd.rows, dev)
    graphs = {}

    def verify(tok, qsl, out, c):
        for k in ("x", "dt", "B", "C", "z"):
            static_tok[k].copy_(tok[k])
        if "verify" not in graphs:
            def run():
                ops.mamba2_spec_verify(static_tok["x"], static_tok["dt"], static_tok["B"], static_tok["C"],
                                       wd.w["A"], **c.layer(0), slot_idx=wd.slot_idx, query_start_loc=static_qsl,
                                       out=static_out, history=8, window=T, **wd.kw(static_tok))
            run()  # warm-up on the first step (it is that step's verify), then capture
            graphs["verify"] = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            with torch.cuda.graph(graphs["verify"]):
                run()
        else:
            graphs["verify"].replay()
        out.copy_(static_out)

    def commit(acc, qsl, c):
        static_acc.copy_(acc)
        if "commit" not in graphs:
            c.commit(wd.slot_idx, static_acc, static_qsl)
            graphs["commit"] = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            with torch.cuda.graph(graphs["commit"]):
                c.commit(wd.slot_idx, static_acc, static_qsl)
        else:
            graphs["commit"].replay()
        torch.cuda.synchronize()

    errs = run_spec(wd, history=8, window=T, steps=30, full_windows=True, verify_fn=verify, commit_fn=commit)
    assert max(errs) <= out_tol(torch.float32, torch.bfloat16)


# ---------------- torch.compile and the op registrations ----------------


@needs_custom_op()
def test_torch_compile_fullgraph(device):
    wd = World(GEOMETRIES["super/tp8"], torch.float32, torch.bfloat16, device, seed=6)
    eager_c, compiled_c = wd.caches(ring_len=4), wd.caches(ring_len=4)

    def step(tok, c, out):
        ops.mamba2_replay_decode(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], **c.layer(0),
                                 slot_idx=wd.slot_idx, out=out, **wd.kw(tok))
        c.advance(wd.slot_idx)
        return out * 2

    torch._dynamo.reset()
    backend = "inductor" if device.type == "cuda" else "aot_eager"  # no C++ toolchain needed on the CPU
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    for _ in range(6):  # through a flush (L = 4)
        tok, _ = wd.tokens(wd.rows)
        out_e, out_c = wd.out(wd.rows), wd.out(wd.rows)
        ye = step(tok, eager_c, out_e)
        yc = compiled(tok, compiled_c, out_c)
        assert torch.equal(ye, yc) and torch.equal(out_e, out_c)
    assert torch.equal(eager_c.cursor, compiled_c.cursor)
    assert torch.equal(eager_c.layers[0]["checkpoint"], compiled_c.layers[0]["checkpoint"])


@needs_custom_op()
def test_ops_are_registered_and_pass_opcheck():
    for name in ("mamba2_decode", "mamba2_replay_decode", "mamba2_materialize", "mamba2_spec_verify", "mamba2_classic_spec_decode",
                 "gdn_decode", "gdn_replay_decode", "gdn_materialize", "gdn_spec_verify", "gdn_classic_spec_decode",
                 "advance_cursors", "commit_cursors", "reset_cursors"):
        assert hasattr(torch.ops.replayssm, name), name
    wd = World(GEOMETRIES["super/tp8"], torch.float32, torch.float32, torch.device("cpu"), seed=7)
    c = wd.caches(ring_len=8)
    for n in ("x_ring", "dt_ring", "B_ring"):
        c.layers[0][n].zero_()  # opcheck compares outputs; NaN poison would not compare equal
    tok, _ = wd.tokens(wd.rows)
    # The checks run the op on copies and verify that exactly the declared arguments are mutated.
    torch.library.opcheck(torch.ops.replayssm.mamba2_replay_decode.default,
                          (tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], *c.layer(0).values(), wd.slot_idx,
                           wd.out(wd.rows)), wd.kw(tok))
    torch.library.opcheck(torch.ops.replayssm.mamba2_materialize.default, (wd.w["A"], *c.layer(0).values(), wd.slot_idx))
    state = wd.ref.float()
    torch.library.opcheck(torch.ops.replayssm.mamba2_decode.default,
                          (tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], state, wd.slot_idx, wd.out(wd.rows)),
                          wd.kw(tok))
