"""Per-step time of the Mamba-2 ops called from Python (through torch.ops.replayssm), captured in a
torch.cuda.CUDAGraph and replayed, timed with CUDA events; eager (uncaptured) time beside it, so the
binding's overhead is visible. The cases mirror the C++ benchmarks for comparison on the same GPU:

  classic decode, ReplaySSM decode amortised over a ring cycle (L = 8)
      ~ replayssm bench --model nemotron3-super-120b --batch 8 64 256 --dtypes f32/bf16 --L 8
  ReplaySSM speculative verify + commit (T = 4, the ring's best history by count: 28)
      ~ replayssm bench-spec --models nemotron3-super-120b --windows 4 --batches 8,64,256

As there, cache sets rotate so that one graph touches more memory than L2 holds, cursors are
staggered over the ring, and accepted counts are random in 1..T.

  python -m replayssm.bench [--batch 8 64 256] [--json out.json]
"""
import argparse
import json
import math
import statistics

import torch

import replayssm
from replayssm import ops

SUPER = "nemotron3-super-120b"


def _rand(shape, lo, hi, dtype, gen, device):
    return (torch.rand(shape, generator=gen, device=device) * (hi - lo) + lo).to(dtype)


def time_steps(body, steps, reps, graph=True):
    """Median microseconds per step of body(i) for i in range(steps): captured in one graph and
    replayed `reps` times (graph=True), or run eagerly `reps` times."""
    torch.cuda.synchronize()
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up outside the capture, as torch.cuda.graph wants
            for i in range(steps):
                body(i)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(steps):
                body(i)
        run = g.replay
    else:
        def run():
            for i in range(steps):
                body(i)
    run()
    run()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / steps)
    return statistics.median(times)


def plain_case(geo, batch, L, state_dtype, act_dtype, rotate_mb, reps, dev, gen):
    """Classic decode and ReplaySSM decode (amortised over a ring cycle), as `replayssm bench`."""
    H, P, N, G = geo
    sb, ab = torch.empty(0, dtype=state_dtype).element_size(), torch.empty(0, dtype=act_dtype).element_size()
    set_bytes = batch * (H * P * N * sb + H * L * P * ab + H * L * 4 + G * L * N * ab)
    nsets = int(min(max(math.ceil(rotate_mb * 1e6 / set_bytes), 2), 64))
    slots = nsets * batch
    c = replayssm.Mamba2ReplayCaches(1, slots, *geo, ring_len=L, state_dtype=state_dtype, act_dtype=act_dtype,
                                     device=dev)
    layer = c.layer(0)
    layer["checkpoint"].copy_(_rand(layer["checkpoint"].shape, -1, 1, state_dtype, gen, dev))
    layer["x_ring"].copy_(_rand(layer["x_ring"].shape, -1, 1, act_dtype, gen, dev))
    layer["dt_ring"].copy_(_rand(layer["dt_ring"].shape, 0.05, 1, torch.float32, gen, dev))
    layer["B_ring"].copy_(_rand(layer["B_ring"].shape, -1, 1, act_dtype, gen, dev))
    c.cursor.copy_(torch.arange(slots, device=dev, dtype=torch.int32) % batch % L)  # staggered fill levels
    sets = [(torch.randperm(batch, generator=gen, device=dev) + k * batch).to(torch.int32) for k in range(nsets)]
    x = _rand((nsets, batch, H, P), -1, 1, act_dtype, gen, dev)
    dt = _rand((nsets, batch, H), -3, 1, torch.float32, gen, dev)
    B, C = (_rand((nsets, batch, G, N), -1, 1, act_dtype, gen, dev) for _ in range(2))
    out = torch.empty(batch, H, P, dtype=act_dtype, device=dev)
    A = _rand((H,), -2.5, -0.3, torch.float32, gen, dev)
    dt_bias, D = _rand((H,), -0.5, 0.5, torch.float32, gen, dev), _rand((H,), -1, 1, torch.float32, gen, dev)

    def classic(i):
        k = i % nsets
        ops.mamba2_decode(x[k], dt[k], B[k], C[k], A, layer["checkpoint"], sets[k], out, dt_bias=dt_bias, D=D)

    def replay(i):
        k = i % nsets  # a different set every step, as a model's layers (nsets * L steps: a cycle each)
        ops.mamba2_replay_decode(x[k], dt[k], B[k], C[k], A, **layer, slot_idx=sets[k], out=out, dt_bias=dt_bias, D=D)
        ops.advance_cursors(c.cursor, sets[k], L)

    per = max(nsets, 24 // nsets * nsets)
    return {
        "classic_us": time_steps(classic, per, reps), "classic_eager_us": time_steps(classic, per, reps, graph=False),
        "replay_us": time_steps(replay, nsets * L, reps), "replay_eager_us": time_steps(replay, nsets * L, reps, False),
        "sets": nsets,
    }


def spec_case(geo, batch, T, history, state_dtype, act_dtype, footprint_mb, steps, reps, dev, gen):
    """ReplaySSM speculative verify + commit with full windows and random acceptance, as `replayssm bench-spec`."""
    H, P, N, G = geo
    sb = torch.empty(0, dtype=state_dtype).element_size()
    kp = int(min(max(math.ceil(footprint_mb * 2**20 / (batch * H * P * N * sb)), 1), steps))
    c = replayssm.Mamba2ReplayCaches(1, kp * batch, *geo, history=history, window=T, state_dtype=state_dtype,
                                     act_dtype=act_dtype, device=dev)
    layer = c.layer(0)
    layer["checkpoint"].copy_(_rand(layer["checkpoint"].shape, -1, 1, state_dtype, gen, dev))
    layer["x_ring"].copy_(_rand(layer["x_ring"].shape, -1, 1, act_dtype, gen, dev))
    layer["dt_ring"].copy_(_rand(layer["dt_ring"].shape, 0.01, 0.5, torch.float32, gen, dev))
    layer["B_ring"].copy_(_rand(layer["B_ring"].shape, -1, 1, act_dtype, gen, dev))
    tok = batch * T
    x = _rand((tok, H, P), -1, 1, act_dtype, gen, dev)
    dt = _rand((tok, H), -4, 1, act_dtype, gen, dev)
    B, C = (_rand((tok, G, N), -1, 1, act_dtype, gen, dev) for _ in range(2))
    out = torch.empty(tok, H, P, dtype=act_dtype, device=dev)
    A = _rand((H,), -4, -0.3, torch.float32, gen, dev)
    dt_bias, D = _rand((H,), -1, 0.5, torch.float32, gen, dev), _rand((H,), 0.5, 1.5, torch.float32, gen, dev)
    qsl = torch.arange(0, tok + 1, T, dtype=torch.int32, device=dev)
    acc = torch.randint(1, T + 1, (steps, batch), generator=gen, device=dev, dtype=torch.int32)
    slot_sets = torch.arange(kp * batch, dtype=torch.int32, device=dev).view(kp, batch)

    def step(i):
        sl = slot_sets[i % kp]
        ops.mamba2_spec_verify(x, dt, B, C, A, **layer, slot_idx=sl, query_start_loc=qsl, out=out, history=history,
                               window=T, dt_bias=dt_bias, D=D)
        c.commit(sl, acc[i], qsl)

    return {"spec_us": time_steps(step, steps, reps), "spec_eager_us": time_steps(step, steps, reps, False),
            "spec_sets": kp}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--L", type=int, default=8, help="standard ring length")
    ap.add_argument("--T", type=int, default=4, help="speculative window (1 + drafts)")
    ap.add_argument("--history", type=int, default=0,
                    help="speculative history; 0: the ring of 16 + T's best by count (mamba2_best_spec_history)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rotate-mb", type=float, default=256, help="as replayssm bench --rotate-mb")
    ap.add_argument("--footprint-mb", type=float, default=512, help="as replayssm bench-spec --footprint-mb")
    ap.add_argument("--spec-steps", type=int, default=32, help="as replayssm bench-spec --steps")
    ap.add_argument("--json", help="write the results to this file")
    a = ap.parse_args(argv)
    if not (torch.cuda.is_available() and replayssm.built_with_cuda()):
        raise SystemExit("replayssm.bench needs a GPU and a CUDA build of libreplayssm_c.so")
    dev, gen = torch.device("cuda"), torch.Generator(device="cuda").manual_seed(1)
    geo = replayssm.mamba2_preset(SUPER)
    sd, ad = torch.float32, torch.bfloat16
    if a.history == 0:
        a.history = replayssm.mamba2_best_spec_history(geo, 16, a.T, sd, ad)
    print(f"replayssm.bench on {torch.cuda.get_device_name()}, torch {torch.__version__}, {replayssm.library_path()}")
    print(f"{SUPER} {geo}, state float32, act bfloat16; us per step (median of {a.reps}); "
          f"graph = captured + replayed, eager = Python calls")
    hdr = (f"{'batch':>5} | {'classic':>8} {'eager':>8} | {'replay L=' + str(a.L):>11} {'x':>5} {'eager':>8} | "
           f"{'spec T=' + str(a.T):>9} {'eager':>8}")
    print(hdr + "\n" + "-" * len(hdr))
    results = []
    for batch in a.batch:
        r = {"model": SUPER, "batch": batch, "L": a.L, "T": a.T, "history": a.history}
        r.update(plain_case(geo, batch, a.L, sd, ad, a.rotate_mb, a.reps, dev, gen))
        r.update(spec_case(geo, batch, a.T, a.history, sd, ad, a.footprint_mb, a.spec_steps, a.reps, dev, gen))
        results.append(r)
        print(f"{batch:>5} | {r['classic_us']:>8.2f} {r['classic_eager_us']:>8.2f} | {r['replay_us']:>11.2f} "
              f"{r['replay_us'] / r['classic_us']:>5.2f} {r['replay_eager_us']:>8.2f} | {r['spec_us']:>9.2f} "
              f"{r['spec_eager_us']:>8.2f}")
        torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f, indent=1)
        print("wrote", a.json)


if __name__ == "__main__":
    main()
