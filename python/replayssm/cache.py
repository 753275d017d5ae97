"""Owners of the ReplaySSM cache tensors of a model's SSM layers for a pool of slots.

Per layer: a checkpoint pool plus the input rings; one cursor tensor for all layers (the cursor ops
run once per model step, after the last layer). Standard decode keeps a linear ring of ``ring_len``
(L) entries and cursors [slots] int32; speculative decode (``history``, ``window`` given) keeps a
circular ring of next_pow2(history + window) entries and cursors [slots, 2] (w, origin). Shapes
are those of mamba2::ReplayCache / SpecCache and gdn::ReplayCache / SpecCache.
"""
import torch

from . import ops


def _next_pow2(v):
    p = 1
    while p < v:
        p <<= 1
    return p


class _ReplayCaches:
    _names = ()  # per-layer tensor names, as the ops call them

    def __init__(self, num_layers, slots, ring_len, history, window, device):
        if (ring_len is None) == (history is None or window is None):
            raise ValueError("give ring_len (standard decode) or history and window (speculative decode)")
        self.slots = slots
        self.device = torch.device(device)
        self.speculative = ring_len is None
        self.history, self.window = history, window
        self.ring_len = _next_pow2(history + window) if self.speculative else ring_len
        self.cursor = torch.zeros((slots, 2) if self.speculative else (slots,), dtype=torch.int32, device=self.device)
        self.layers = [dict(zip(self._names, self._make_layer())) for _ in range(num_layers)]

    def _empty(self, shape, dtype):
        return torch.zeros((self.slots,) + tuple(shape), dtype=dtype, device=self.device)

    def layer(self, i):
        """Layer i's cache tensors and the shared cursor, keyed by the ops' argument names."""
        return dict(self.layers[i], cursor=self.cursor)

    def nbytes_by_tensor(self):
        """Bytes of each kind of tensor, summed over layers, and of the cursors."""
        out = {n: sum(L[n].numel() * L[n].element_size() for L in self.layers) for n in self._names}
        out["cursor"] = self.cursor.numel() * self.cursor.element_size()
        return out

    def nbytes(self):
        return sum(self.nbytes_by_tensor().values())

    def _slots(self, slot_idx):
        if isinstance(slot_idx, torch.Tensor):
            return slot_idx
        return torch.tensor(list(slot_idx), dtype=torch.int32, device=self.device)

    # ---- cursor moves, once per model step ----
    def advance(self, slot_idx, pdl=False):
        """Standard decode: after every layer ran the step. pdl: see ops.advance_cursors."""
        ops.advance_cursors(self.cursor, slot_idx, self.ring_len, pdl=pdl)

    def commit(self, slot_idx, num_accepted, query_start_loc, pdl=False):
        """Speculative decode: after every layer verified the windows. pdl: see ops.commit_cursors."""
        ops.commit_cursors(self.cursor, slot_idx, num_accepted, query_start_loc, self.history, self.window, pdl=pdl)

    def commit_tree(self, slot_idx, query_start_loc, tree_parent, accepted_leaf, num_accepted, pdl=False):
        """Tree speculation, after every layer verified with tree_parent: each layer's accepted paths moved in its
        rings (ops.*_accept_tree_path), then the cursors advanced by num_accepted once (commit)."""
        for L in self.layers:
            self._accept_tree_path(L, slot_idx, query_start_loc, tree_parent, accepted_leaf, num_accepted)
        self.commit(slot_idx, num_accepted, query_start_loc, pdl=pdl)

    # ---- admission ----
    def reset_slots(self, slot_idx):
        """New requests in these slots (slot ids, < 0 ignored): cursors to 0, so each checkpoint is
        taken as the request's whole state (zero unless load_prefill wrote one)."""
        ops.reset_cursors(self.cursor, self._slots(slot_idx))

    def load_prefill(self, slot, states):
        """A request admitted into ``slot`` with its prefill's final state of every layer
        (``states[i]`` shaped like one checkpoint slot, any float dtype): copies them into the
        checkpoints and resets the slot's cursor."""
        if len(states) != len(self.layers):
            raise ValueError(f"expected {len(self.layers)} layer states, got {len(states)}")
        for layer, state in zip(self.layers, states):
            ops.load_checkpoint(layer["checkpoint"], slot, state)
        self.reset_slots([slot])


    # ---- a request's current state out of the cache: prefix caching, swap-out, forking ----
    def export_states(self, slot_idx, dsts, dst_idx, **weights):
        """Layer i's current state of slot slot_idx[j] into dsts[i][dst_idx[j]] (dsts: one pool per layer shaped
        [n, *checkpoint slot], any state dtype); < 0 skips. The cache is only read (ops.*_export_state)."""
        if len(dsts) != len(self.layers):
            raise ValueError(f"expected {len(self.layers)} layer pools, got {len(dsts)}")
        src, dst = self._slots(slot_idx), self._slots(dst_idx)
        for i, pool in enumerate(dsts):
            self._export(i, src, pool, dst, **weights)

    def state_of(self, slot, dtype=None, **weights):
        """The current state of every layer for one slot, as new tensors shaped like a checkpoint slot (``dtype``:
        the state dtype by default): to save a prefix or swap the request out; ``load_prefill(slot, states)`` puts
        them back into a slot."""
        pools = [torch.empty_like(L["checkpoint"][:1], dtype=dtype or self.state_dtype) for L in self.layers]
        self.export_states([slot], pools, [0], **weights)
        return [p[0] for p in pools]

    def fork(self, src_slots, dst_slots, **weights):
        """Requests in dst_slots that continue from src_slots' current states (n > 1 sampling, beam search): every
        layer's current state goes into the destinations' checkpoints and their cursors are reset; the sources decode
        on unchanged. A destination may not be a source."""
        src, dst = self._slots(src_slots), self._slots(dst_slots)
        for i, L in enumerate(self.layers):
            self._export(i, src, L["checkpoint"], dst, **weights)
        self.reset_slots(dst)


class Mamba2ReplayCaches(_ReplayCaches):
    """Mamba-2 layers of geometry (heads, headdim, dstate, groups): per layer checkpoint
    [slots, H, P, N] (state_dtype), x_ring [slots, H, R, P] and B_ring [slots, G, R, N] (act_dtype),
    dt_ring [slots, H, R] float32."""

    _names = ("checkpoint", "x_ring", "dt_ring", "B_ring")

    def __init__(self, num_layers, slots, heads, headdim, dstate, groups, *, ring_len=None, history=None,
                 window=None, state_dtype=torch.float32, act_dtype=torch.bfloat16, device="cpu"):
        self.geometry = (heads, headdim, dstate, groups)
        self.state_dtype, self.act_dtype = state_dtype, act_dtype
        super().__init__(num_layers, slots, ring_len, history, window, device)

    def _accept_tree_path(self, L, slot_idx, query_start_loc, tree_parent, accepted_leaf, num_accepted):
        ops.mamba2_accept_tree_path(L["x_ring"], L["dt_ring"], L["B_ring"], self.cursor, slot_idx, query_start_loc,
                                    tree_parent, accepted_leaf, num_accepted, self.history, self.window)

    def _export(self, i, src, dst_pool, dst, A):
        """A: the layer's A (float32 [heads]), or a list with one per layer."""
        L = self.layers[i]
        ops.mamba2_export_state(A[i] if isinstance(A, (list, tuple)) else A, L["checkpoint"], L["x_ring"],
                                L["dt_ring"], L["B_ring"], self.cursor, src, dst_pool, dst)

    def _make_layer(self):
        H, P, N, G = self.geometry
        R = self.ring_len
        return (self._empty((H, P, N), self.state_dtype), self._empty((H, R, P), self.act_dtype),
                self._empty((H, R), torch.float32), self._empty((G, R, N), self.act_dtype))


class GdnReplayCaches(_ReplayCaches):
    """Gated DeltaNet layers of geometry (k_heads, v_heads, head_k_dim, head_v_dim): per layer
    checkpoint [slots, HV, V, K] (state_dtype), d_ring [slots, HV, R, V] and k_ring [slots, H, R, K]
    (ring_dtype: float32, exact, or the activation dtype, fewer bytes), g_ring [slots, HV, R] float32
    ([slots, HV, R, head_k_dim] with ``per_channel_gates=True``: the Kimi Delta Attention form, a [tokens, HV, K])."""

    _names = ("checkpoint", "d_ring", "k_ring", "g_ring")

    def __init__(self, num_layers, slots, k_heads, v_heads, head_k_dim, head_v_dim, *, ring_len=None,
                 history=None, window=None, state_dtype=torch.float32, ring_dtype=torch.float32, device="cpu",
                 per_channel_gates=False):
        self.geometry = (k_heads, v_heads, head_k_dim, head_v_dim)
        self.state_dtype, self.ring_dtype = state_dtype, ring_dtype
        self.per_channel_gates = per_channel_gates
        super().__init__(num_layers, slots, ring_len, history, window, device)

    def _accept_tree_path(self, L, slot_idx, query_start_loc, tree_parent, accepted_leaf, num_accepted):
        ops.gdn_accept_tree_path(L["d_ring"], L["k_ring"], L["g_ring"], self.cursor, slot_idx, query_start_loc,
                                 tree_parent, accepted_leaf, num_accepted, self.history, self.window)

    def _export(self, i, src, dst_pool, dst):
        L = self.layers[i]
        ops.gdn_export_state(L["checkpoint"], L["d_ring"], L["k_ring"], L["g_ring"], self.cursor, src, dst_pool, dst)

    def _make_layer(self):
        H, HV, K, V = self.geometry
        R = self.ring_len
        return (self._empty((HV, V, K), self.state_dtype), self._empty((HV, R, V), self.ring_dtype),
                self._empty((H, R, K), self.ring_dtype),
                self._empty((HV, R, K) if self.per_channel_gates else (HV, R), torch.float32))
