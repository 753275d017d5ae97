"""Tree speculation for Gated DeltaNet through the PyTorch binding (gdn_spec_verify(tree_parent=...),
gdn_accept_tree_path, GdnReplayCaches.commit_tree) against the float64 gated delta rule of test_gdn.py, both gate
kinds: every window token's output from the committed state along its own path, a random accepted path committed, the
cursors as the fold rule says; bad trees rejected by name with nothing written. CPU and CUDA."""

import pytest
import torch

from conftest import SHORT, pair_id
from replayssm import ops
from test_gdn import GEOMETRIES, RING_CASES, World
from trees import REJECTION_TOKENS, assert_bad_trees_rejected, tree_stream

HISTORY, WINDOW = 8, 4


def verify_args(wd, tok, c, **extra):
    return dict(q=tok["q"], k=tok["k"], v=tok["v"], a=tok["a"], b=tok["b"], A_log=wd.w["A_log"],
                dt_bias=wd.w["dt_bias"], **c.layer(0), slot_idx=wd.slot_idx, history=HISTORY, window=WINDOW,
                scale=wd.scale, **extra)


def accept_args(wd, c):
    rings = {k: c.layers[0][k] for k in ("d_ring", "k_ring", "g_ring")}
    return dict(**rings, cursor=c.cursor, slot_idx=wd.slot_idx, history=HISTORY, window=WINDOW)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_head", "per_channel"])
@pytest.mark.parametrize("pair,ring", RING_CASES,
                         ids=[f"{pair_id(p)}-ring_{SHORT[r]}" for p, r in RING_CASES])
def test_tree_verify_random_trees_and_paths(device, pair, ring, per_channel):
    wd = World(GEOMETRIES["qwen3.5-4b/tp4"], *pair, device, seed=31, ring_dtype=ring, per_channel=per_channel)

    def verify(tok, qsl, tree_parent, out, c):
        ops.gdn_spec_verify(**verify_args(wd, tok, c, query_start_loc=qsl, out=out, tree_parent=tree_parent))

    errs = tree_stream(wd, HISTORY, WINDOW, 30, verify)
    assert max(errs) <= wd.tol()


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_head", "per_channel"])
def test_bad_trees_are_rejected_by_name(device, per_channel):
    wd = World(GEOMETRIES["qwen3.5-4b/tp4"], torch.float32, torch.bfloat16, device, rows=2, padding=0, seed=32,
               per_channel=per_channel)
    c = wd.caches(history=HISTORY, window=WINDOW)
    tok, _ = wd.tokens(REJECTION_TOKENS)
    out = wd.out(REJECTION_TOKENS)
    cache_tensors = [c.layers[0][k] for k in ("checkpoint", "d_ring", "k_ring", "g_ring")] + [c.cursor]
    assert_bad_trees_rejected(device, ops.gdn_spec_verify, verify_args(wd, tok, c, out=out), ops.gdn_accept_tree_path,
                              accept_args(wd, c), out, cache_tensors)

