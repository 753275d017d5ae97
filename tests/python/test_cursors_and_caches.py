"""Cursor ops against a Python model of their rules, and the cache helpers (shapes as the C++ cache
structs, byte counts, admission)."""
import pytest
import torch

import replayssm
from conftest import int32
from replayssm import ReplaySSMError, ops


def test_advance_wraps_and_skips_padding(device):
    cursor = int32([0, 3, 7, 5], device)
    slots = int32([2, -1, 1], device)
    ops.advance_cursors(cursor, slots, 8)
    assert cursor.tolist() == [0, 4, 0, 5]


@pytest.mark.parametrize("seed", range(3))
def test_commit_follows_the_fold_rule(device, seed):
    """w += k, or on a flush-due slot (w + 2T > B + T) origin += w (mod R), w = k."""
    history, window, R = 8, 4, 16
    gen = torch.Generator().manual_seed(seed)
    cur = [[int(torch.randint(0, history + 1, (1,), generator=gen)), int(torch.randint(0, R, (1,), generator=gen))]
           for _ in range(6)]
    slots, n = [4, 0, -1, 2, 5], [3, 4, 2, 1, 0]
    acc = [int(torch.randint(1, k + 1, (1,), generator=gen)) if k else 0 for k in n]
    qsl = [0]
    for k in n:
        qsl.append(qsl[-1] + k)
    cursor = int32(cur, device)
    ops.commit_cursors(cursor, int32(slots, device), int32(acc, device), int32(qsl, device), history, window)
    for s, k in zip(slots, acc):
        if s < 0 or k == 0:
            continue
        w, o = cur[s]
        cur[s] = [k, (o + w) % R] if w + 2 * window > history + window else [w + k, o]
    assert cursor.tolist() == cur


def test_reset_and_bad_cursor_input(device):
    cursor = int32([[5, 6], [7, 8], [9, 10]], device)
    ops.reset_cursors(cursor, int32([2, -1], device))
    assert cursor.tolist() == [[5, 6], [7, 8], [0, 0]]
    with pytest.raises(ReplaySSMError, match="^ring_len:") as e:
        ops.advance_cursors(cursor[:, 0].contiguous(), int32([0], device), 0)
    assert e.value.argument == "ring_len"
    with pytest.raises(ReplaySSMError, match="^cursor:"):
        ops.reset_cursors(cursor.float(), int32([0], device))
    assert cursor.tolist() == [[5, 6], [7, 8], [0, 0]]


def test_mamba2_cache_shapes_and_bytes():
    H, P, N, G = 16, 64, 128, 2
    std = replayssm.Mamba2ReplayCaches(3, 5, H, P, N, G, ring_len=8)
    assert std.ring_len == 8 and not std.speculative and std.cursor.shape == (5,)
    L0 = std.layer(0)
    assert list(L0) == ["checkpoint", "x_ring", "dt_ring", "B_ring", "cursor"]
    assert L0["checkpoint"].shape == (5, H, P, N) and L0["checkpoint"].dtype == torch.float32
    assert L0["x_ring"].shape == (5, H, 8, P) and L0["x_ring"].dtype == torch.bfloat16
    assert L0["dt_ring"].shape == (5, H, 8) and L0["dt_ring"].dtype == torch.float32
    assert L0["B_ring"].shape == (5, G, 8, N) and L0["B_ring"].dtype == torch.bfloat16
    per_slot = H * P * N * 4 + H * 8 * P * 2 + H * 8 * 4 + G * 8 * N * 2
    assert std.nbytes() == 3 * 5 * per_slot + 5 * 4
    assert std.nbytes_by_tensor()["checkpoint"] == 3 * 5 * H * P * N * 4

    spec = replayssm.Mamba2ReplayCaches(2, 5, H, P, N, G, history=13, window=4, state_dtype=torch.bfloat16)
    assert spec.speculative and spec.ring_len == 32 and spec.cursor.shape == (5, 2)
    assert spec.layer(1)["x_ring"].shape == (5, H, 32, P) and spec.layer(1)["checkpoint"].dtype == torch.bfloat16
    with pytest.raises(ValueError):
        replayssm.Mamba2ReplayCaches(1, 5, H, P, N, G, ring_len=8, history=8, window=4)


def test_best_spec_history():
    super_ = replayssm.mamba2_preset("nemotron3-super-120b")
    assert replayssm.mamba2_best_spec_history(super_, 16, 4) == 28  # the whole ring of 32 (traffic.hpp)
    q4b = replayssm.gdn_preset("qwen3.5-4b")
    # GDN never lengthens the history asked for (its CUDA verify keeps the history in shared memory)
    assert replayssm.gdn_best_spec_history(q4b, 16, 4, ring_dtype=torch.bfloat16) == 16
    assert replayssm.gdn_best_spec_history(q4b, 28, 4, ring_dtype=torch.bfloat16) == 28
    assert replayssm.gdn_best_spec_history(q4b, 16, 2) <= 16
    with pytest.raises(ReplaySSMError) as e:
        replayssm.gdn_best_spec_history(q4b, 16, 4, gate_width=3)
    assert e.value.argument == "gate_width"
    with pytest.raises(ReplaySSMError) as e:
        replayssm.mamba2_best_spec_history(super_, 16, 4, state_dtype=torch.int32)
    assert e.value.argument == "state_dtype"


def test_gdn_cache_shapes_and_bytes():
    H, HV, K, V = 2, 4, 128, 64
    c = replayssm.GdnReplayCaches(2, 3, H, HV, K, V, ring_len=16, ring_dtype=torch.bfloat16)
    L0 = c.layer(0)
    assert list(L0) == ["checkpoint", "d_ring", "k_ring", "g_ring", "cursor"]
    assert L0["checkpoint"].shape == (3, HV, V, K)
    assert L0["d_ring"].shape == (3, HV, 16, V) and L0["d_ring"].dtype == torch.bfloat16
    assert L0["k_ring"].shape == (3, H, 16, K) and L0["g_ring"].shape == (3, HV, 16)
    per_slot = HV * V * K * 4 + HV * 16 * V * 2 + H * 16 * K * 2 + HV * 16 * 4
    assert c.nbytes() == 2 * 3 * per_slot + 3 * 4


def test_load_prefill_and_reset(device):
    c = replayssm.Mamba2ReplayCaches(2, 4, 4, 8, 16, 1, history=8, window=4, device=device)
    c.cursor.fill_(3)
    states = [torch.randn(4, 8, 16, dtype=torch.float64, device=device) for _ in range(2)]
    c.load_prefill(2, states)
    for layer, st in zip(c.layers, states):
        assert torch.equal(layer["checkpoint"][2], st.float())  # converted to the state dtype
        assert not layer["checkpoint"][1].any()
    assert c.cursor.tolist() == [[3, 3], [3, 3], [0, 0], [3, 3]]
    c.reset_slots([0, -1])
    assert c.cursor[0].tolist() == [0, 0]
    with pytest.raises(ReplaySSMError, match="^slot:"):
        c.load_prefill(4, states)
    with pytest.raises(ReplaySSMError, match="^state:"):
        c.load_prefill(1, [s[:, :4] for s in states])


def test_cuda_device_problem_says_whether_the_gpu_runs_the_build():
    from conftest import HAS_CUDA
    if HAS_CUDA:
        assert replayssm.cuda_device_problem(0) == ""
    else:
        assert replayssm.cuda_device_problem(0) != ""  # no CUDA in the build, or no GPU: says which
    assert "cannot be queried" in replayssm.cuda_device_problem(99) or not replayssm.built_with_cuda()
