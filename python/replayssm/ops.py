"""The replayssm ops for PyTorch tensors, registered as ``torch.ops.replayssm.<name>`` custom ops.

Convention: every op returns None and writes in place, exactly as the C++ op's contract says:
outputs into the caller's ``out`` tensor, state pools / checkpoints / rings / cursors where the op
updates them (each op's ``mutates_args`` lists them). Nothing is allocated, so a decode step can be
captured in a CUDA graph and the ops trace under torch.compile (their fake implementations do
nothing). Shapes, dtypes and semantics are those of include/replayssm/mamba2.hpp, gdn.hpp and
cursor.hpp; the geometry is read from the tensors (x / B for Mamba-2, q / v for GDN).

Bad arguments raise ReplaySSMError with the C++ message naming the argument, before anything is
written. With torch older than 2.4 (no torch.library.custom_op) the same functions are plain
Python functions.
"""
import inspect
from typing import Optional

import torch

from ._lib import ReplaySSMError, call, launch, lib

Tensor = torch.Tensor

OUTPUT_ONLY, STATE_AND_OUTPUT = 0, 1  # mamba2_replay_decode routes (mamba2::Route)


def _launch_pdl(pdl, name, device, *args):
    """launch() with the thread's pdl flag (replayssm_set_launch_pdl) set to ``pdl`` for this call only."""
    was = lib.replayssm_launch_pdl()
    lib.replayssm_set_launch_pdl(int(bool(pdl)))
    try:
        launch(name, device, *args)
    finally:
        lib.replayssm_set_launch_pdl(was)

_custom_op = getattr(torch.library, "custom_op", None)
HAS_CUSTOM_OP = _custom_op is not None


def _op(*mutates):
    """Registers fn as replayssm::<fn name> mutating `mutates`, with a no-op fake (the ops allocate nothing)."""

    def wrap(fn):
        if not HAS_CUSTOM_OP:
            return fn
        op = _custom_op("replayssm::" + fn.__name__, mutates_args=mutates)(fn)

        def fake(*args, **kwargs):
            return None

        fake.__signature__ = inspect.signature(fn)
        op.register_fake(fake)
        return op

    return wrap


def _sizes(t, name, rank, layout):
    if not isinstance(t, torch.Tensor) or t.dim() != rank:
        got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ReplaySSMError(f"{name}: expected a {rank}-d tensor {layout}, got {got}", name)
    return t.shape


def _m2_geometry(x, B):
    _, heads, headdim = _sizes(x, "in.x", 3, "[tokens, heads, headdim]")
    _, groups, dstate = _sizes(B, "in.B", 3, "[tokens, groups, dstate]")
    return heads, headdim, dstate, groups


def _gdn_geometry(q, v):
    _, k_heads, head_k_dim = _sizes(q, "in.q", 3, "[tokens, k_heads, head_k_dim]")
    _, v_heads, head_v_dim = _sizes(v, "in.v", 3, "[tokens, v_heads, head_v_dim]")
    return k_heads, v_heads, head_k_dim, head_v_dim


# ---------------- Mamba-2 ----------------


@_op("state", "out")
def mamba2_decode(
    x: Tensor, dt: Tensor, B: Tensor, C: Tensor, A: Tensor, state: Tensor, slot_idx: Tensor, out: Tensor,
    z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None, D: Optional[Tensor] = None,
    dt_softplus: bool = True, pdl: bool = False,
) -> None:
    """Classic step: state[slot_idx[i]] updated in place, out[i] written (padding rows untouched).
    pdl: launch as a programmatic dependent of the previous kernel (mamba2.hpp, DecodeArgs::pdl)."""
    _launch_pdl(pdl, "replayssm_mamba2_decode", x.device, *_m2_geometry(x, B), x, dt, B, C, z, A, dt_bias, D,
                int(dt_softplus), state, slot_idx, out)


@_op("checkpoint", "x_ring", "dt_ring", "B_ring", "out")
def mamba2_replay_decode(
    x: Tensor, dt: Tensor, B: Tensor, C: Tensor, A: Tensor,
    checkpoint: Tensor, x_ring: Tensor, dt_ring: Tensor, B_ring: Tensor, cursor: Tensor,
    slot_idx: Tensor, out: Tensor,
    z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None, D: Optional[Tensor] = None,
    dt_softplus: bool = True, route: int = 0, pdl: bool = False,
) -> None:
    """ReplaySSM standard step: appends to the rings (or folds them into the checkpoint on the flush
    step), writes out; reads the cursor only (advance_cursors moves it once per model step).
    pdl: launch as a programmatic dependent of the previous kernel (mamba2.hpp, ReplayDecodeArgs::pdl)."""
    _launch_pdl(pdl, "replayssm_mamba2_replay_decode", x.device, *_m2_geometry(x, B), int(route), x, dt, B, C, z, A,
                dt_bias, D, int(dt_softplus), checkpoint, x_ring, dt_ring, B_ring, cursor, slot_idx, out)


@_op("checkpoint")
def mamba2_materialize(
    A: Tensor, checkpoint: Tensor, x_ring: Tensor, dt_ring: Tensor, B_ring: Tensor, cursor: Tensor,
    slot_idx: Tensor,
) -> None:
    """The small-batch route: folds each listed slot's ring tokens 0..w-1 into its checkpoint (the cursor is
    only read). After it on every layer, reset_cursors() once; then mamba2_decode(state=checkpoint) is exact
    for as long as the cursors stay at 0, and mamba2_replay_decode can resume at any step."""
    _, heads, _, headdim = _sizes(x_ring, "cache.x_ring", 4, "[slots, heads, ring, headdim]")
    _, groups, _, dstate = _sizes(B_ring, "cache.B_ring", 4, "[slots, groups, ring, dstate]")
    launch("replayssm_mamba2_materialize", x_ring.device, heads, headdim, dstate, groups, A, checkpoint, x_ring,
           dt_ring, B_ring, cursor, slot_idx)


@_op("dst")
def mamba2_export_state(
    A: Tensor, checkpoint: Tensor, x_ring: Tensor, dt_ring: Tensor, B_ring: Tensor, cursor: Tensor,
    slot_idx: Tensor, dst: Tensor, dst_idx: Tensor,
) -> None:
    """A request's current state (checkpoint + committed ring tokens, folded) into dst[dst_idx[i]] for slot
    slot_idx[i], in dst's dtype; the cache is only read. A standard cache (cursor [slots]) or a speculative one
    (cursor [slots, 2]). For prefix caching, swapping out, or forking (dst = checkpoint, then reset_cursors on the
    destinations); mamba2.hpp, export_state."""
    _, heads, _, headdim = _sizes(x_ring, "cache.x_ring", 4, "[slots, heads, ring, headdim]")
    _, groups, _, dstate = _sizes(B_ring, "cache.B_ring", 4, "[slots, groups, ring, dstate]")
    launch("replayssm_mamba2_export_state", x_ring.device, heads, headdim, dstate, groups, A, checkpoint, x_ring,
           dt_ring, B_ring, cursor, slot_idx, dst, dst_idx)


@_op("checkpoint", "x_ring", "dt_ring", "B_ring", "out")
def mamba2_spec_verify(
    x: Tensor, dt: Tensor, B: Tensor, C: Tensor, A: Tensor,
    checkpoint: Tensor, x_ring: Tensor, dt_ring: Tensor, B_ring: Tensor, cursor: Tensor,
    slot_idx: Tensor, query_start_loc: Tensor, out: Tensor, history: int, window: int,
    z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None, D: Optional[Tensor] = None,
    dt_softplus: bool = True, pdl: bool = False, tree_parent: Optional[Tensor] = None,
) -> None:
    """ReplaySSM speculative verify of packed windows (query_start_loc); follow with commit_cursors.
    pdl: launch as a programmatic dependent of the previous kernel (mamba2.hpp, VerifyArgs::pdl).
    tree_parent: [tokens] int32, a draft tree (each window token's parent within its window, -1 at token 0); then
    mamba2_accept_tree_path on every layer before commit_cursors (mamba2.hpp, VerifyArgs::tree_parent)."""
    # One C entry for both: a null tree_parent is a chain (replayssm_mamba2_spec_verify forwards there too).
    _launch_pdl(pdl, "replayssm_mamba2_spec_verify_tree", x.device, *_m2_geometry(x, B), history, window, x, dt, B, C,
                z, A, dt_bias, D, int(dt_softplus), checkpoint, x_ring, dt_ring, B_ring, cursor, slot_idx,
                query_start_loc, tree_parent, out)


@_op("x_ring", "dt_ring", "B_ring")
def mamba2_accept_tree_path(
    x_ring: Tensor, dt_ring: Tensor, B_ring: Tensor, cursor: Tensor, slot_idx: Tensor, query_start_loc: Tensor,
    tree_parent: Tensor, accepted_leaf: Tensor, num_accepted: Tensor, history: int, window: int,
) -> None:
    """Tree speculation, per layer after mamba2_spec_verify(tree_parent=...): the accepted path's ring entries (the
    path from window token 0 to accepted_leaf, num_accepted tokens long) move to w, w + 1, ..; the cursor is only
    read. Then commit_cursors once with the same num_accepted (mamba2.hpp, accept_tree_path)."""
    _, heads, _, headdim = _sizes(x_ring, "cache.x_ring", 4, "[slots, heads, ring, headdim]")
    _, groups, _, dstate = _sizes(B_ring, "cache.B_ring", 4, "[slots, groups, ring, dstate]")
    launch("replayssm_mamba2_accept_tree_path", x_ring.device, heads, headdim, dstate, groups, history, window,
           x_ring, dt_ring, B_ring, cursor, slot_idx, query_start_loc, tree_parent, accepted_leaf, num_accepted)


@_op("state", "out")
def mamba2_classic_spec_decode(
    x: Tensor, dt: Tensor, B: Tensor, C: Tensor, A: Tensor, state: Tensor, state_indices: Tensor,
    num_accepted: Tensor, query_start_loc: Tensor, out: Tensor,
    z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None, D: Optional[Tensor] = None,
    dt_softplus: bool = True, pdl: bool = False,
) -> None:
    """Classic speculative path: the window T is state_indices.shape[1]; the state after window token t
    goes to slot state_indices[i][t]. pdl: as mamba2_decode's (ClassicSpecArgs::pdl)."""
    window = _sizes(state_indices, "state_indices", 2, "[rows, window]")[1]
    _launch_pdl(pdl, "replayssm_mamba2_classic_spec_decode", x.device, *_m2_geometry(x, B), window, x, dt, B, C, z,
                A, dt_bias, D, int(dt_softplus), state, state_indices, num_accepted, query_start_loc, out)


# ---------------- Gated DeltaNet ----------------


@_op("state", "out")
def gdn_decode(
    q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Tensor,
    state: Tensor, slot_idx: Tensor, out: Tensor, scale: float = 0.0, qk_l2norm: bool = True, pdl: bool = False,
) -> None:
    """Classic gated-delta-rule step (scale 0 means 1/sqrt(head_k_dim)).
    pdl: launch as a programmatic dependent of the previous kernel (gdn.hpp, DecodeArgs::pdl)."""
    _launch_pdl(pdl, "replayssm_gdn_decode", q.device, *_gdn_geometry(q, v), q, k, v, a, b, A_log, dt_bias,
                float(scale), int(qk_l2norm), state, slot_idx, out)


@_op("checkpoint", "d_ring", "k_ring", "g_ring", "out")
def gdn_replay_decode(
    q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Tensor,
    checkpoint: Tensor, d_ring: Tensor, k_ring: Tensor, g_ring: Tensor, cursor: Tensor,
    slot_idx: Tensor, out: Tensor, scale: float = 0.0, qk_l2norm: bool = True, pdl: bool = False,
) -> None:
    """ReplaySSM gated-delta-rule step. pdl: launch as a programmatic dependent of the previous kernel (gdn.hpp,
    ReplayDecodeArgs::pdl)."""
    _launch_pdl(pdl, "replayssm_gdn_replay_decode", q.device, *_gdn_geometry(q, v), q, k, v, a, b, A_log, dt_bias,
                float(scale), int(qk_l2norm), checkpoint, d_ring, k_ring, g_ring, cursor, slot_idx, out)


@_op("checkpoint")
def gdn_materialize(
    checkpoint: Tensor, d_ring: Tensor, k_ring: Tensor, g_ring: Tensor, cursor: Tensor, slot_idx: Tensor,
) -> None:
    """The small-batch route: folds each listed slot's ring tokens 0..w-1 into its checkpoint (the cursor is only
    read). After it on every layer, reset_cursors() once; then gdn_decode(state=checkpoint) is exact for as long as
    the cursors stay at 0, and gdn_replay_decode can resume at any step."""
    _, v_heads, head_v_dim, head_k_dim = _sizes(checkpoint, "cache.checkpoint", 4, "[slots, v_heads, head_v_dim, head_k_dim]")
    k_heads = _sizes(k_ring, "cache.k_ring", 4, "[slots, k_heads, ring, head_k_dim]")[1]
    launch("replayssm_gdn_materialize", checkpoint.device, k_heads, v_heads, head_k_dim, head_v_dim, checkpoint, d_ring,
           k_ring, g_ring, cursor, slot_idx)


@_op("dst")
def gdn_export_state(
    checkpoint: Tensor, d_ring: Tensor, k_ring: Tensor, g_ring: Tensor, cursor: Tensor, slot_idx: Tensor,
    dst: Tensor, dst_idx: Tensor,
) -> None:
    """As mamba2_export_state, for Gated DeltaNet (gdn.hpp, export_state)."""
    _, v_heads, head_v_dim, head_k_dim = _sizes(checkpoint, "cache.checkpoint", 4, "[slots, v_heads, head_v_dim, head_k_dim]")
    k_heads = _sizes(k_ring, "cache.k_ring", 4, "[slots, k_heads, ring, head_k_dim]")[1]
    launch("replayssm_gdn_export_state", checkpoint.device, k_heads, v_heads, head_k_dim, head_v_dim, checkpoint,
           d_ring, k_ring, g_ring, cursor, slot_idx, dst, dst_idx)


@_op("checkpoint", "d_ring", "k_ring", "g_ring", "out")
def gdn_spec_verify(
    q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Tensor,
    checkpoint: Tensor, d_ring: Tensor, k_ring: Tensor, g_ring: Tensor, cursor: Tensor,
    slot_idx: Tensor, query_start_loc: Tensor, out: Tensor, history: int, window: int,
    scale: float = 0.0, qk_l2norm: bool = True, pdl: bool = False, tree_parent: Optional[Tensor] = None,
) -> None:
    """ReplaySSM gated-delta-rule speculative verify. pdl: as gdn_replay_decode's (gdn.hpp, VerifyArgs::pdl).
    tree_parent: [tokens] int32, a draft tree (each window token's parent within its window, -1 at token 0); then
    gdn_accept_tree_path on every layer before commit_cursors (gdn.hpp, VerifyArgs::tree_parent). Both gate kinds."""
    # One C entry for both: a null tree_parent is a chain (replayssm_gdn_spec_verify forwards there too).
    _launch_pdl(pdl, "replayssm_gdn_spec_verify_tree", q.device, *_gdn_geometry(q, v), history, window, q, k, v, a, b,
                A_log, dt_bias, float(scale), int(qk_l2norm), checkpoint, d_ring, k_ring, g_ring, cursor, slot_idx,
                query_start_loc, tree_parent, out)


@_op("d_ring", "k_ring", "g_ring")
def gdn_accept_tree_path(
    d_ring: Tensor, k_ring: Tensor, g_ring: Tensor, cursor: Tensor, slot_idx: Tensor, query_start_loc: Tensor,
    tree_parent: Tensor, accepted_leaf: Tensor, num_accepted: Tensor, history: int, window: int,
) -> None:
    """As mamba2_accept_tree_path, for Gated DeltaNet: after gdn_spec_verify(tree_parent=...) on every layer, the
    accepted path's d, k and g ring entries move to w, w + 1, ..; the cursor is only read; then commit_cursors once
    (gdn.hpp, accept_tree_path)."""
    _, v_heads, _, head_v_dim = _sizes(d_ring, "cache.d_ring", 4, "[slots, v_heads, ring, head_v_dim]")
    _, k_heads, _, head_k_dim = _sizes(k_ring, "cache.k_ring", 4, "[slots, k_heads, ring, head_k_dim]")
    launch("replayssm_gdn_accept_tree_path", d_ring.device, k_heads, v_heads, head_k_dim, head_v_dim, history, window,
           d_ring, k_ring, g_ring, cursor, slot_idx, query_start_loc, tree_parent, accepted_leaf, num_accepted)


@_op("state", "out")
def gdn_classic_spec_decode(
    q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Tensor,
    state: Tensor, state_indices: Tensor, num_accepted: Tensor, query_start_loc: Tensor, out: Tensor,
    scale: float = 0.0, qk_l2norm: bool = True,
) -> None:
    window = _sizes(state_indices, "state_indices", 2, "[rows, window]")[1]
    launch("replayssm_gdn_classic_spec_decode", q.device, *_gdn_geometry(q, v), window, q, k, v, a, b, A_log,
           dt_bias, float(scale), int(qk_l2norm), state, state_indices, num_accepted, query_start_loc, out)


# ---------------- cursors (shared by all layers of a model) ----------------


@_op("cursor")
def advance_cursors(cursor: Tensor, slot_idx: Tensor, ring_len: int, pdl: bool = False) -> None:
    """Standard decode, after the last layer: w <- (w + 1) mod ring_len for the rows' slots.
    pdl: launch as a programmatic dependent of the previous kernel (cursor.hpp)."""
    _launch_pdl(pdl, "replayssm_advance_cursors", cursor.device, cursor, slot_idx, ring_len)


@_op("cursor")
def commit_cursors(
    cursor: Tensor, slot_idx: Tensor, num_accepted: Tensor, query_start_loc: Tensor, history: int, window: int,
    pdl: bool = False,
) -> None:
    """Speculative decode, after verify: keep the accepted prefix (rollback = the cursor staying put).
    pdl: launch as a programmatic dependent of the previous kernel (cursor.hpp)."""
    _launch_pdl(pdl, "replayssm_commit_cursors", cursor.device, cursor, slot_idx, num_accepted, query_start_loc,
                history, window)


@_op("cursor")
def reset_cursors(cursor: Tensor, slot_idx: Tensor) -> None:
    """New requests in these slots: every cursor column <- 0."""
    launch("replayssm_reset_cursors", cursor.device, cursor, slot_idx)


def load_checkpoint(checkpoint: Tensor, slot: int, state: Tensor) -> None:
    """Copies a prefill's final state into checkpoint[slot], converting dtype (round to nearest even).
    CPU tensors go through the C++ op (serving::load_checkpoint); others are copied with torch on
    the current stream after the same shape checks. Not a custom op: admission is outside graphs."""
    if checkpoint.device.type == "cpu" and state.device.type == "cpu":
        return call("replayssm_load_checkpoint", checkpoint, int(slot), state)
    if checkpoint.dim() != state.dim() + 1 or tuple(checkpoint.shape[1:]) != tuple(state.shape):
        raise ReplaySSMError(f"state: shape {list(state.shape)} does not match a checkpoint slot of "
                             f"{list(checkpoint.shape)}", "state")
    if not 0 <= slot < checkpoint.shape[0]:
        raise ReplaySSMError(f"slot: {slot} is out of range [0, {checkpoint.shape[0]})", "slot")
    checkpoint[slot].copy_(state)
