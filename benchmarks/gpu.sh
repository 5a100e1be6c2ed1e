#!/usr/bin/env bash
# One run on a machine with one NVIDIA GPU (under 8 minutes): the lossless tests on CUDA (bf16 weights, fp32
# verification), then the quick benchmark suite on CUDA at 1, 8 and 32 rows, proactive branches, and the compiled
# step (CUDA graphs) against eager, everything into one folder.
#
#   bash benchmarks/gpu.sh [OUT_DIR]     # default: $OUT if set, else benchmarks/results/gpu
#
# With MMSPEC_TABLE_MODEL=FOLDER (a tiny or a real image model folder, e.g. Lumina-mGPT or Anole with its vqgan/)
# it also writes the field's table on that folder (`mmspec bench --model FOLDER --prompts FILE`, compiled) over
# MMSPEC_TABLE_PROMPTS (a prompt file or a PartiPrompts .tsv; default: this script's three prompts), the first
# MMSPEC_TABLE_LIMIT of them (default 3), within MMSPEC_TABLE_SECONDS (default 120).
#
# Each step has its own time limit, and the suite runs one model kind at a time into its own subfolder, so a
# step that runs long loses only itself. Nothing is downloaded except by `pip install -e .[dev]`, and only when
# mmspec or its test tools are missing.
set -uo pipefail

cd "$(dirname "$0")/.."
out="${1:-${OUT:-benchmarks/results/gpu}}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's mmspec, whatever is installed
status=0

step() {  # step NAME LIMIT_SECONDS COMMAND...: run with a time limit, log to $out/NAME.log, keep going
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0))s; log: $out/$name.log"
  tail -n 3 "$out/$name.log" | sed 's/^/   | /'
  [ "$rc" -eq 0 ] || status=1
}

if ! python -c "import mmspec, pytest, xdist, matplotlib" 2>/dev/null; then
  pip install -e ".[dev]" > "$out/pip.log" 2>&1 || { echo "pip install -e .[dev] failed: $out/pip.log"; exit 1; }
fi
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device visible to torch (torch.cuda.is_available() is False): this script is for a GPU machine"
  exit 1
fi
{ nvidia-smi; python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
  > "$out/environment.txt" 2>&1

# limits: 90 + 90 + 160 + 90 + 45 + 90 + 120 = 685 s at most; on an H200 (2026-12-04, cf730a6) the steps took 42 + 77 +
# 128 + 52 + 27 s, then the compiled step (working since 0c1dc6e) 22 s to compile and run `ar` at 1 row alone and
# Cosmos's CUDA tests 53 s: about 8 minutes in all; best of 1 timed run after the warm-up (GPU timings vary little)
# -n 0: one process (pyproject's -n auto would start a worker per core, each with its own CUDA context, in 90 s)
step cuda-tests 90 python -m pytest tests/test_cuda.py -n 0 -q -rs -p no:cacheprovider --junitxml="$out/cuda-tests.xml"
for kind_limit in image:90 video:160 text:90; do
  kind=${kind_limit%:*}
  step "suite-$kind" "${kind_limit#*:}" python -m mmspec.cli bench "$kind" --suite quick --device cuda \
    --rows 1,8,32 --repeats 1 --out "$out/suite-$kind"
done

# proactive branches cost width, which a GPU forward nearly does not charge: pac against coupled, wall-clock
step proactive-image 45 python -m mmspec.cli bench image --methods coupled,pac,exact --window 32 --num 4 \
  --device cuda --out "$out/proactive-image.json"

# the compiled step (torch.compile, mode reduce-overhead: CUDA graphs) against eager, same run; the first compiled
# call of each width pays inductor's compile time, reported apart
step compile-image 90 python benchmarks/compile_step.py models/emoji-image --device cuda --rows 1 \
  --methods ar:1,exact:16 --repeats 1 --out "$out/compile"

# Cosmos-1 on CUDA (tiny random models): exact == ar with given frames, eager and compiled
step cosmos-cuda-tests 120 python -m pytest tests/adapters/test_cosmos.py -k cuda -n 0 -q -rs -p no:cacheprovider

# a real Cosmos-1 folder (`mmspec convert cosmos ... --tokenizer DIR`, docs/cosmos.md) over a folder of clips, if
# named: MMSPEC_COSMOS=FOLDER MMSPEC_COSMOS_VIDEOS=DIR. As SCD reports it: coupled at window 64 against AR, steps
# compression and latency. Outside the 8 minutes above: AR alone makes 10,240 forwards a clip of 5 latent frames
if [ -n "${MMSPEC_COSMOS:-}" ]; then
  step cosmos-bench 3000 python -m mmspec.cli bench video --model "$MMSPEC_COSMOS" \
    --videos "${MMSPEC_COSMOS_VIDEOS:?set MMSPEC_COSMOS_VIDEOS to a folder of input clips}" --allow-torchscript \
    --device cuda --out "$out/cosmos-bench.json"
fi

# the field's table on a folder the caller names (docs/usage.md, "The field's table")
if [ -n "${MMSPEC_TABLE_MODEL:-}" ]; then
  prompts="${MMSPEC_TABLE_PROMPTS:-$out/table-prompts.txt}"
  [ -n "${MMSPEC_TABLE_PROMPTS:-}" ] || printf 'a red apple on a wooden table\na lighthouse at dusk\na cat reading a book\n' \
    > "$prompts"
  step table "${MMSPEC_TABLE_SECONDS:-120}" python -m mmspec.cli bench --model "$MMSPEC_TABLE_MODEL" \
    --prompts "$prompts" --limit "${MMSPEC_TABLE_LIMIT:-3}" --device cuda --repeats 1 --out "$out/table"
fi

echo "== done in ${SECONDS}s, exit $status; results in $out"
exit $status
