"""Draft-tree helpers shared by test_mamba2_tree.py and test_gdn_tree.py: random trees, the tree stream driver (a
verify with tree_parent, then the caches' commit_tree, checked against the float64 truth along each path) and the
bad-tree rejection checks. `wd` is a test file's World, as in streams.py; the verify op comes in as a callable."""
import torch

from conftest import assert_rejected, int32, rel_err, rounded
from streams import check_padding, flush_due, random_windows, sel


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


def tree_stream(wd, history, window, steps, verify):
    """Speculative decode over random draft trees: verify(tok, qsl, tree_parent, out, caches) runs the windows, then a
    random accepted path per row is committed with caches.commit_tree. The truth computes every window token's output
    along its own path from the slot's committed state, commits the accepted path, rounds the state where verify folds
    the history into the checkpoint, and follows the cursor fold rule [w, origin]. Returns the per-step output errors."""
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
        verify(tok, qsl_t, parent_t, out, c)
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


REJECTION_TOKENS = 7  # the rejection batch: two rows, windows of 3 and 4 tokens


def assert_bad_trees_rejected(device, verify, verify_args, accept, accept_args, out, cache_tensors):
    """verify(**verify_args) and accept(**accept_args) (a model's spec verify and accept_tree_path, the caller's
    arguments for two rows and REJECTION_TOKENS tokens) with broken trees and paths: each must raise ReplaySSMError
    naming the argument, writing none of out and cache_tensors; then the good calls run."""
    qsl, parent = int32([0, 3, 7], device), int32([-1, 0, 0, -1, 0, 1, 1], device)
    assert_rejected(verify, dict(verify_args, query_start_loc=qsl, tree_parent=parent), [
        ("tree_parent", {"tree_parent": int32([0, 0, 0, -1, 0, 1, 1], device)}),   # a root with a parent
        ("tree_parent", {"tree_parent": int32([-1, 0, 2, -1, 0, 1, 1], device)}),  # a parent after its child
        ("tree_parent", {"tree_parent": int32([-1, 0, 0, -1, 0, 1], device)}),     # one entry short
        ("tree_parent", {"tree_parent": torch.zeros(7, device=device)}),            # float
    ], [out] + cache_tensors)
    accept_good = dict(accept_args, query_start_loc=qsl, tree_parent=parent, accepted_leaf=int32([2, 3], device),
                       num_accepted=int32([2, 3], device))
    assert_rejected(accept, accept_good, [
        ("accepted_leaf", {"accepted_leaf": int32([3, 3], device)}),  # past row 0's window of 3
        ("num_accepted", {"num_accepted": int32([3, 3], device)}),    # the path to token 2 is 2 long
    ], cache_tensors)
