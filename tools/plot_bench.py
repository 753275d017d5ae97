#!/usr/bin/env python3
"""Plot `replayssm bench --json` results: achieved bandwidth and speedup over classic vs batch."""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print("usage: plot_bench.py bench.json out.png [state/act L]")
        return 1
    data = json.load(open(sys.argv[1]))
    want = sys.argv[3] if len(sys.argv) > 3 else "f32/bf16"
    want_L = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    res = [r for r in data["results"] if f"{r['state_dtype']}/{r['act_dtype']}" == want and r["L"] == want_L]
    models = sorted({(r["model"], r["tp"]) for r in res})
    fig, ax = plt.subplots(1, 2, figsize=(13, 5))
    for m, tp in models:
        rr = sorted([r for r in res if r["model"] == m and r["tp"] == tp], key=lambda r: r["batch"])
        b = [r["batch"] for r in rr]
        lab = m + (f"/tp{tp}" if tp > 1 else "")
        l1, = ax[0].plot(b, [r["classic"]["tbps"] for r in rr], "--", marker="o", label=f"{lab} classic")
        ax[0].plot(b, [r["amortised"]["tbps"] for r in rr], "-", marker="s", color=l1.get_color(),
                   label=f"{lab} ReplaySSM amortised")
        ax[1].plot(b, [r["speedup_amortised"] for r in rr], "-", marker="s", color=l1.get_color(), label=lab)
    ax[0].axhline(data["copy_tbps"], color="k", lw=0.8, label="D2D copy")
    for a in ax:
        a.set_xscale("log", base=2)
        a.set_xlabel("batch (rows)")
        a.grid(alpha=0.3)
    ax[0].set_ylabel("achieved TB/s (kernel byte count)")
    ax[1].set_ylabel("speedup over classic (amortised over an L cycle)")
    ax[1].axhline(1.0, color="k", lw=0.8)
    ax[0].legend(fontsize=7)
    ax[1].legend(fontsize=7)
    fig.suptitle(f"{data['device']}: Mamba-2 decode, {want}, L={want_L}")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print("wrote", sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
