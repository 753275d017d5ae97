#!/usr/bin/env bash
# H200 only: the session's GDN verify against main's CLI at the start (replayssm_c), fp32 and bf16 state; the
# per-channel later-CTA prefetch patch (replayssm_b) against this build. Exits at once on any other card.
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$NAME" | tee "$OUT/summary.txt"
[[ $NAME == *H200* ]] || { echo "not an H200: skipped"; exit 0; }
python3 -c "import tarfile; tarfile.open('.gpubin/bins.tar.xz').extractall('.gpubin')" && chmod +x .gpubin/*
A=.gpubin/replayssm; B=.gpubin/replayssm_b; C=.gpubin/replayssm_c
{ for x in "$A" "$C" "$A" "$C"; do
    echo "==== $x fp32"; timeout 60 $x bench-gdn --batches 8,64,256,512 --windows 4,6
    echo "==== $x bf16"; timeout 60 $x bench-gdn --batches 64,256,512 --windows 4 --state-dtype bfloat16 --ring-dtype bfloat16
  done; } >"$OUT/ab.log" 2>&1
for x in "$A:-" "$B:REPLAYSSM_GDN_PC_PREFETCH_WAVES=0" "$B:REPLAYSSM_GDN_PC_PREFETCH_WAVES=0.5" \
         "$B:REPLAYSSM_GDN_PC_PREFETCH_WAVES=1" "$B:REPLAYSSM_GDN_PC_PREFETCH_WAVES=0" "$A:-"; do
  cli=${x%%:*}; e=${x#*:}; echo "==== $cli $e"
  if [ "$e" = - ]; then timeout 60 $cli bench-gdn --models qwen3.5-4b --gates per-channel --batches 64,512 --windows 4
  else env "$e" timeout 60 $cli bench-gdn --models qwen3.5-4b --gates per-channel --batches 64,512 --windows 4; fi
done >"$OUT/pc.log" 2>&1
echo "done $(grep -c '^====' "$OUT/ab.log") + $(grep -c '^====' "$OUT/pc.log") runs" | tee -a "$OUT/summary.txt"
