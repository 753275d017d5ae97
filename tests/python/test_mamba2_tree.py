"""Tree speculation through the PyTorch binding (mamba2_spec_verify(tree_parent=...), mamba2_accept_tree_path,
Mamba2ReplayCaches.commit_tree) against the float64 recurrence of test_mamba2.py: every window token's output from
the committed state along its own path, a random accepted path committed, the cursors as the fold rule says; and bad
trees rejected by name with nothing written."""

import pytest
import torch

from conftest import assert_rejected, int32, out_tol, pair_id, rel_err, rounded
from replayssm import ops
from streams import check_padding, flush_due, random_windows, sel
from test_mamba2 import GEOMETRIES, World


def random_tree(gen, n):
    """Parents of an n-token window: -1 at token 0, a uniform earlier token after."""
    if n == 0:
        return []
    return [-1] + [int(torch.randint(0, j, (1,), generator=gen)) for j in range(1, n)]


def path_to(parent, j):
    """Window tokens 0 -> .. -> j."""
    p = [j]
    while p[-1] > 0:
        p.append(parent[p[-1]])
    return p[::-1]


def tree_stream(wd, history, window, steps):
    c = wd.caches(history=history, window=window)
    R = c.ring_len
    hw, ho = {s: 0 for s in wd.live_slots}, {s: 0 for s in wd.live_slots}
    errs = []
    for _ in range(steps):
        _, qsl = random_windows(wd, window)
        tok, t64 = wd.tokens(qsl[-1])
        out = wd.out(qsl[-1])
        parent = []
        for r in range(wd.rows):
            parent += random_tree(wd.gen, qsl[r + 1] - qsl[r])
        qsl_t, parent_t = int32(qsl, wd.device), int32(parent, wd.device)
        ops.mamba2_spec_verify(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], **c.layer(0), slot_idx=wd.slot_idx,
                               query_start_loc=qsl_t, out=out, history=history, window=window, tree_parent=parent_t,
                               **wd.kw(tok))
        leaf, acc, worst, pad_tokens = [0] * wd.rows, [0] * wd.rows, 0.0, []
        for r, s in enumerate(wd.slot_of_row):
            t0, n = qsl[r], qsl[r + 1] - qsl[r]
            if s < 0:
                pad_tokens += list(range(t0, t0 + n))
                continue
            par = parent[t0:t0 + n]
            flush = flush_due(hw[s], history, window)
            if flush and hw[s] > 0:  # verify folded the history into the checkpoint, rounded once
                wd.ref[s] = rounded(wd.ref[s], wd.state_dtype)
            for j in range(n):
                S = wd.ref[s:s + 1]
                for i in path_to(par, j):
                    S, o = wd.truth_step(S, sel(t64, [t0 + i]))
                worst = max(worst, rel_err(out[t0 + j:t0 + j + 1], o))
            leaf[r] = int(torch.randint(0, n, (1,), generator=wd.gen))
            path = path_to(par, leaf[r])
            acc[r] = len(path)
            S = wd.ref[s:s + 1]
            for i in path:  # commit the accepted path
                S, _ = wd.truth_step(S, sel(t64, [t0 + i]))
            wd.ref[s] = S[0]
            if flush:
                ho[s], hw[s] = (ho[s] + hw[s]) % R, acc[r]
            else:
                hw[s] += acc[r]
        errs.append(worst)
        check_padding(out, pad_tokens)
        c.commit_tree(wd.slot_idx, qsl_t, parent_t, int32(leaf, wd.device), int32(acc, wd.device))
        assert c.cursor[wd.live_slots].tolist() == [[hw[s], ho[s]] for s in wd.live_slots]
    return errs


@pytest.mark.parametrize("pair", [(torch.float32, torch.float32), (torch.float32, torch.bfloat16),
                                  (torch.bfloat16, torch.bfloat16)], ids=pair_id)
def test_tree_verify_random_trees_and_paths(device, pair):
    wd = World(GEOMETRIES["super/tp8"], *pair, device, seed=21)
    errs = tree_stream(wd, history=8, window=4, steps=30)
    assert max(errs) <= out_tol(*pair)


def test_bad_trees_are_rejected_by_name(device):
    wd = World(GEOMETRIES["nano/tp4"], torch.float32, torch.bfloat16, device, rows=2, padding=0, seed=22)
    c = wd.caches(history=8, window=4)
    qsl = int32([0, 3, 7], device)
    tok, _ = wd.tokens(7)
    out = wd.out(7)
    good = dict(x=tok["x"], dt=tok["dt"], B=tok["B"], C=tok["C"], A=wd.w["A"], **c.layer(0), slot_idx=wd.slot_idx,
                query_start_loc=qsl, out=out, history=8, window=4, tree_parent=int32([-1, 0, 0, -1, 0, 1, 1], device),
                **wd.kw(tok))
    written = [out] + [c.layer(0)[k] for k in ("checkpoint", "x_ring", "dt_ring", "B_ring", "cursor")]
    assert_rejected(ops.mamba2_spec_verify, good, [
        ("tree_parent", {"tree_parent": int32([0, 0, 0, -1, 0, 1, 1], device)}),   # a root with a parent
        ("tree_parent", {"tree_parent": int32([-1, 0, 2, -1, 0, 1, 1], device)}),  # a parent after its child
        ("tree_parent", {"tree_parent": int32([-1, 0, 0, -1, 0, 1], device)}),     # one entry short
        ("tree_parent", {"tree_parent": torch.zeros(7, device=device)}),            # float
    ], written)
    acc_good = dict(x_ring=c.layer(0)["x_ring"], dt_ring=c.layer(0)["dt_ring"], B_ring=c.layer(0)["B_ring"],
                    cursor=c.cursor, slot_idx=wd.slot_idx, query_start_loc=qsl,
                    tree_parent=int32([-1, 0, 0, -1, 0, 1, 1], device), accepted_leaf=int32([2, 3], device),
                    num_accepted=int32([2, 3], device), history=8, window=4)
    assert_rejected(ops.mamba2_accept_tree_path, acc_good, [
        ("accepted_leaf", {"accepted_leaf": int32([3, 3], device)}),  # past row 0's window of 3
        ("num_accepted", {"num_accepted": int32([3, 3], device)}),    # the path to token 2 is 2 long
    ], written[1:])
