"""Tree speculation through the PyTorch binding (mamba2_spec_verify(tree_parent=...), mamba2_accept_tree_path,
Mamba2ReplayCaches.commit_tree) against the float64 recurrence of test_mamba2.py: every window token's output from
the committed state along its own path, a random accepted path committed, the cursors as the fold rule says; and bad
trees rejected by name with nothing written."""

import pytest
import torch

from conftest import out_tol, pair_id
from replayssm import ops
from test_mamba2 import GEOMETRIES, World
from trees import REJECTION_TOKENS, assert_bad_trees_rejected, tree_stream


@pytest.mark.parametrize("pair", [(torch.float32, torch.float32), (torch.float32, torch.bfloat16),
                                  (torch.bfloat16, torch.bfloat16)], ids=pair_id)
def test_tree_verify_random_trees_and_paths(device, pair):
    wd = World(GEOMETRIES["super/tp8"], *pair, device, seed=21)
    history, window = 8, 4

    def verify(tok, qsl, tree_parent, out, c):
        ops.mamba2_spec_verify(tok["x"], tok["dt"], tok["B"], tok["C"], wd.w["A"], **c.layer(0), slot_idx=wd.slot_idx,
                               query_start_loc=qsl, out=out, history=history, window=window, tree_parent=tree_parent,
                               **wd.kw(tok))

    errs = tree_stream(wd, history, window, 30, verify)
    assert max(errs) <= out_tol(*pair)


def test_bad_trees_are_rejected_by_name(device):
    wd = World(GEOMETRIES["nano/tp4"], torch.float32, torch.bfloat16, device, rows=2, padding=0, seed=22)
    c = wd.caches(history=8, window=4)
    tok, _ = wd.tokens(REJECTION_TOKENS)
    out = wd.out(REJECTION_TOKENS)
    verify_args = dict(x=tok["x"], dt=tok["dt"], B=tok["B"], C=tok["C"], A=wd.w["A"], **c.layer(0),
                       slot_idx=wd.slot_idx, out=out, history=8, window=4, **wd.kw(tok))
    rings = {k: c.layer(0)[k] for k in ("x_ring", "dt_ring", "B_ring")}
    accept_args = dict(**rings, cursor=c.cursor, slot_idx=wd.slot_idx, history=8, window=4)
    cache_tensors = [c.layer(0)[k] for k in ("checkpoint", "x_ring", "dt_ring", "B_ring", "cursor")]
    assert_bad_trees_rejected(device, ops.mamba2_spec_verify, verify_args, ops.mamba2_accept_tree_path, accept_args,
                              out, cache_tensors)
