"""Token-stream drivers shared by test_mamba2.py and test_gdn.py: each runs an op step after step on
random inputs, steps the float64 truth alongside and returns the errors (the tests assert them
against their own tolerances); exact bookkeeping (cursors, untouched padding) is asserted here.

`wd` is a test file's World, the model-specific part: gen (the draws), rows, slots, slot_of_row,
slot_idx, live, live_slots, state_dtype, device, ref (the truth's float64 state pool, updated in
place), tokens(n) -> (op inputs, float64 inputs), out(n), caches(**mode) and
truth_step(S, t64) -> (S, out): one token per row through the float64 recurrence. The op itself
comes in as a callable."""
import torch

from conftest import SENTINEL, int32, rel_err, rounded


def sel(t64, rows):
    """The float64 inputs of some tokens (entries may be None: an absent optional input)."""
    return {k: (v[rows] if v is not None else None) for k, v in t64.items()}


def check_padding(out, tokens):
    if tokens:
        assert bool((out[tokens] == SENTINEL).all()), "a padding row's out was written"


def pad_rows(wd):
    return [r for r in range(wd.rows) if r not in wd.live]


def random_windows(wd, T, full=False):
    """Tokens per row (1..T for a live row, 0..T for a padding row; T each when `full`) and the
    query_start_loc that packs them."""
    n = [T if full else int(torch.randint(1 if s >= 0 else 0, T + 1, (1,), generator=wd.gen)) for s in wd.slot_of_row]
    qsl = [0]
    for k in n:
        qsl.append(qsl[-1] + k)
    return n, qsl


def decode_stream(wd, steps, decode):
    """Classic decode: decode(tok, state, out) updates a pool in the state dtype one token a step; the
    truth stores its state rounded to that dtype every token too. Slots no row maps to must stay
    bitwise as they were. Returns the per-step output errors and the final state error."""
    state = wd.ref.to(wd.state_dtype).to(wd.device, copy=True)
    unused = [s for s in range(wd.slots) if s not in wd.live_slots]
    state_unused = state[unused].clone()
    errs = []
    for _ in range(steps):
        tok, t64 = wd.tokens(wd.rows)
        out = wd.out(wd.rows)
        decode(tok, state, out)
        S, o = wd.truth_step(wd.ref[wd.live_slots], sel(t64, wd.live))
        wd.ref[wd.live_slots] = rounded(S, wd.state_dtype)
        errs.append(rel_err(out[wd.live], o))
        check_padding(out, pad_rows(wd))
    assert torch.equal(state[unused], state_unused)
    return errs, rel_err(state[wd.live_slots], wd.ref[wd.live_slots])


def replay_stream(wd, L, steps, step):
    """ReplaySSM decode with ring length L: step(tok, out, caches) runs one step (op + cursor advance).
    The truth keeps the exact state and rounds it to the state dtype where a slot's step flushes (every
    L-th), when the checkpoint is compared; the cursors must count w = steps mod L. Returns the per-step
    output errors, the worst checkpoint error and the number of flushes."""
    c = wd.caches(ring_len=L)
    w = {s: 0 for s in wd.live_slots}
    errs, ckpt_err, flushes = [], 0.0, 0
    for _ in range(steps):
        tok, t64 = wd.tokens(wd.rows)
        out = wd.out(wd.rows)
        step(tok, out, c)
        S, o = wd.truth_step(wd.ref[wd.live_slots], sel(t64, wd.live))
        wd.ref[wd.live_slots] = S
        errs.append(rel_err(out[wd.live], o))
        check_padding(out, pad_rows(wd))
        for s in wd.live_slots:
            if w[s] == L - 1:  # the flush step rewrote the checkpoint, rounded once
                wd.ref[s] = rounded(wd.ref[s], wd.state_dtype)
                ckpt_err = max(ckpt_err, rel_err(c.layers[0]["checkpoint"][s], wd.ref[s]))
                flushes += 1
            w[s] = (w[s] + 1) % L
        assert c.cursor[wd.live_slots].tolist() == [w[s] for s in wd.live_slots]
    return errs, ckpt_err, flushes


def flush_due(w, history, window):
    """The fold rule: at history fill w, verify folds the history into the checkpoint when w + 2T > B + T."""
    return w + 2 * window > history + window


def spec_stream(wd, history, window, steps, verify, commit=None, full_windows=False):
    """Speculative decode with random window lengths and random acceptance: verify(tok, qsl, out, caches)
    runs the window, commit(num_accepted, qsl, caches) (default: caches.commit) accepts a random prefix.
    The truth keeps each slot's committed state (the accepted stream), computes every window token's
    output causally from it, rounds it to the state dtype where verify folds the history into the
    checkpoint, and follows the cursor fold rule [w, origin]. Returns the per-step output errors."""
    c = wd.caches(history=history, window=window)
    R, T = c.ring_len, window
    if commit is None:
        def commit(acc, qsl, c):
            c.commit(wd.slot_idx, acc, qsl)
    hw, ho = {s: 0 for s in wd.live_slots}, {s: 0 for s in wd.live_slots}
    errs = []
    for _ in range(steps):
        _, qsl = random_windows(wd, T, full_windows)
        tok, t64 = wd.tokens(qsl[-1])
        out = wd.out(qsl[-1])
        qsl_t = int32(qsl, wd.device)
        verify(tok, qsl_t, out, c)
        acc, worst, pad_tokens = [0] * wd.rows, 0.0, []
        for r, s in enumerate(wd.slot_of_row):
            toks = list(range(qsl[r], qsl[r + 1]))
            if s < 0:
                pad_tokens += toks
                continue
            flush = flush_due(hw[s], history, window)
            if flush and hw[s] > 0:  # verify folded the history into the checkpoint, rounded once
                wd.ref[s] = rounded(wd.ref[s], wd.state_dtype)
            S, after, outs = wd.ref[s:s + 1], [], []
            for t in toks:
                S, o = wd.truth_step(S, sel(t64, [t]))
                after.append(S)
                outs.append(o)
            worst = max(worst, rel_err(out[toks], torch.cat(outs)))
            k = int(torch.randint(1, len(toks) + 1, (1,), generator=wd.gen))
            acc[r] = k
            wd.ref[s] = after[k - 1][0]  # commit the accepted prefix
            if flush:
                ho[s], hw[s] = (ho[s] + hw[s]) % R, k
            else:
                hw[s] += k
        errs.append(worst)
        check_padding(out, pad_tokens)
        commit(int32(acc, wd.device), qsl_t, c)
        assert c.cursor[wd.live_slots].tolist() == [[hw[s], ho[s]] for s in wd.live_slots]
    return errs


def classic_spec_stream(wd, T, steps, decode, carry_stored):
    """The classic speculative path: a float32 state slot per window position of each row,
    decode(tok, state, slot_idx [rows, T], num_accepted, qsl, out) starts each row from its last
    accepted slot and stores every token's state; the number accepted is drawn at random per step.
    carry_stored: the truth's next token starts from the stored (float32) state, else from the exact
    one. Returns the per-token output errors and stored-state errors."""
    state = wd.ref.float().to(wd.device, copy=True)
    perm = torch.randperm(wd.slots, generator=wd.gen).tolist()
    si = [[perm[r * T + t] for t in range(T)] if s >= 0 else [-1] * T for r, s in enumerate(wd.slot_of_row)]
    si_t = int32(si, wd.device)
    na = [1] * wd.rows
    out_errs, state_errs = [], []
    for _ in range(steps):
        n, qsl = random_windows(wd, T)
        tok, t64 = wd.tokens(qsl[-1])
        out = wd.out(qsl[-1])
        decode(tok, state, si_t, int32(na, wd.device), int32(qsl, wd.device), out)
        for r, s in enumerate(wd.slot_of_row):
            if s < 0:
                check_padding(out, list(range(qsl[r], qsl[r + 1])))
                continue
            S = wd.ref[si[r][na[r] - 1]][None]
            for j, t in enumerate(range(qsl[r], qsl[r + 1])):
                S, o = wd.truth_step(S, sel(t64, [t]))
                out_errs.append(rel_err(out[t:t + 1], o))
                wd.ref[si[r][j]] = rounded(S[0], torch.float32)  # the op stores a copy per token
                if carry_stored:
                    S = wd.ref[si[r][j]][None]
                state_errs.append(rel_err(state[si[r][j]], wd.ref[si[r][j]]))
            na[r] = int(torch.randint(1, n[r] + 1, (1,), generator=wd.gen))
    return out_errs, state_errs
