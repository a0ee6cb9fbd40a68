#!/usr/bin/env bash
# The GPU check (issue 48): the paper profile at reduced steps on one CUDA GPU in bf16 (SFT 20 steps, stage-3 PPO
# 2 batches of rollouts, the evaluation of 64 questions), one JSON with tokens/s, step times and peak GPU memory.
#
#   bench/gpu_check.sh --dry-run [options]   here, on the CPU: the same sequence with tiny random models (~1 min)
#   bench/gpu_check.sh [options]             on a GPU machine (options: bench/gpu_check.py --help)
#   bench/gpu_check.sh --unpack-only         on a lent device: take in the carried part, run nothing else
#
# What it needs carried to a lent device without network: the parts .gpu/p1 ... .gpu/pN that
# `python bench/gpu_carry.py prepare` makes here (trl, datasets, pydantic, polars, lancedb, gguf, the project's
# transformers and peft, the SmolLM2 GGUF, the all-MiniLM-L6-v2 encoder; ~250 MB packed), one per `run` call;
# `python bench/gpu_carry.py calls` prints the calls. Once all parts are there it unpacks them into .gpu/site and puts
# that first on PYTHONPATH. Results: $OUT/gpu_check.json and $OUT/gpu_check.log when $OUT is set, else
# bench/results/gpu_check.json. PYTHON picks the interpreter (default: .venv/bin/python here, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
case "${1:-}" in
  --dry-run) exec "$PYTHON" bench/gpu_check.py "$@" ;;
  --unpack-only) "$PYTHON" bench/gpu_carry.py unpack || [ $? -eq 3 ]; exit 0 ;;
esac
if [ -d .gpu ] && ls -d .gpu/p[0-9]* >/dev/null 2>&1; then
  "$PYTHON" bench/gpu_carry.py unpack || { echo "gpu_check: carry the missing parts first" >&2; exit 3; }
  export PYTHONPATH=$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
if [ -n "${OUT:-}" ]; then
  set -o pipefail
  "$PYTHON" bench/gpu_check.py --work "${WORK:-/tmp/omne-gpu-check}" "$@" 2>&1 | tee "$OUT/gpu_check.log"
else
  exec "$PYTHON" bench/gpu_check.py "$@"
fi
