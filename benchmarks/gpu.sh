#!/usr/bin/env bash
# The first thing to run on a machine with one NVIDIA GPU: within 10 minutes, in priority order, each step with its
# own time limit and its results written as it goes (a step cut short loses only itself):
#   1. the lossless tests on CUDA (bf16 weights, fp32 verification; Cosmos-1's too)
#   2. the compiled speculative step at 1 row against eager, image (ar, exact@16) and video (ar, exact@64), and an
#      image render job at 32 places of one engine against `ar` (issue 60's >= 1.3x AR's throughput)
#   3. real-size cost curves c(B, L) with random weights (benchmarks/cost_curve.py): the 7B families eager, the
#      compiled forward at 1 output and L = 1, 64, then the projection of the papers' acceptance on them
#   4. LlamaGen's own loop against mmspec on GPT-XXL (MMSPEC_LLAMAGEN=DIR, a LlamaGen checkout; skipped without)
#   5. the quick suite on CUDA at 1, 8 and 32 rows (image, video, text), as earlier GPU runs measured it
# and, outside the budget, the named folders' runs: MMSPEC_COSMOS (docs/cosmos.md), MMSPEC_TABLE_MODEL (docs/usage.md).
# A step starts only while the budget (BUDGET seconds, default 570) has room for it, and is cut at what remains.
# Then, as a separate call with its own minutes, the 16x16-code emoji-video training run (models/README.md), from a
# pack and a tokenizer written here beforehand (MMSPEC_VIDEO16_PACK=FILE MMSPEC_VIDEO16_VQ=DIR; see `train` below):
#
#   bash benchmarks/gpu.sh [OUT_DIR]            # default: $OUT if set, else benchmarks/results/gpu
#   bash benchmarks/gpu.sh --train [OUT_DIR]    # the training run (MINUTES, default 6)
#   bash benchmarks/gpu.sh --dry-run [OUT_DIR]  # the same steps on this CPU, tiny models and few repeats: a rehearsal
#
# Nothing is downloaded except by `pip install -e .[dev]`, and only when mmspec or its test tools are missing.
set -uo pipefail

mode=gpu
case "${1:-}" in
  --dry-run) mode=dry; shift ;;
  --train) mode=train; shift ;;
esac
cd "$(dirname "$0")/.."
out="${1:-${OUT:-benchmarks/results/gpu}}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's mmspec, whatever is installed
budget=${BUDGET:-570}
status=0

step() {  # step NAME LIMIT_SECONDS COMMAND...: run within min(limit, budget left), log to $out/NAME.log, keep going
  local name=$1 limit=$2
  shift 2
  local left=$((budget - SECONDS))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, ${left}s of the budget left"
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0))s; log: $out/$name.log"
  tail -n 3 "$out/$name.log" | sed 's/^/   | /'
  [ "$rc" -eq 0 ] || status=1
}

if [ "$mode" = dry ]; then  # the same commands on the CPU: tiny models, one repeat, inductor's tracing only
  # (an option given twice: argparse keeps the last, so `few` cuts every step's sizes to a rehearsal's)
  device=cpu dtype=fp32 scaled=--scaled repeats=1 backend="--backend eager" tests=(--co)
  few=(--rows 1,2 --windows 1,4) few_methods=(--methods ar:1,exact:4 --repeats 1)
  engine_job=(--outputs 4 --batch 2 --rounds 1)
else
  device=cuda dtype=bf16 scaled="" repeats=5 backend="" tests=() few=() few_methods=()
  engine_job=(--outputs 96 --batch 32 --rounds 1)
  if ! python -c "import mmspec, pytest, xdist, matplotlib" 2>/dev/null; then
    pip install -e ".[dev]" > "$out/pip.log" 2>&1 || { echo "pip install -e .[dev] failed: $out/pip.log"; exit 1; }
  fi
  if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "no CUDA device visible to torch (torch.cuda.is_available() is False): this script is for a GPU machine"
    exit 1
  fi
  { nvidia-smi; python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
    > "$out/environment.txt" 2>&1
fi

if [ "$mode" = train ]; then
  # 16x16 codes a frame (2,048-token clips). Written beforehand where the emoji art is (models/README.md):
  #   python models/recipes/train_vq.py --frames --codes patch=2 hidden=128 codebook_size=1024 --out vq16
  #   python models/recipes/train_gpt.py --model emoji-video --vq vq16 --clips 15000 --write-pack video16.npz
  : "${MMSPEC_VIDEO16_PACK:?set MMSPEC_VIDEO16_PACK to the pack of 16x16-code clips}"
  : "${MMSPEC_VIDEO16_VQ:?set MMSPEC_VIDEO16_VQ to the 16x16-code frame tokenizer folder}"
  minutes=${MINUTES:-6}
  budget=$((minutes * 60 + 120))
  step train-video16 $((minutes * 60 + 90)) python models/recipes/train_gpt.py --model emoji-video \
    --vq "$MMSPEC_VIDEO16_VQ" --pack "$MMSPEC_VIDEO16_PACK" --device cuda --bf16 --batch "${VIDEO_BATCH:-32}" \
    --max-minutes "$minutes" --fresh --save-every 60 --work "$out/emoji-video16"
  echo "== done in ${SECONDS}s, exit $status; results in $out"
  exit $status
fi

# 1. lossless on CUDA. -n 0: one process (pyproject's -n auto would start a worker per core, each with its own CUDA
# context, in 90 s). On an H200 (2026-12-04, cf730a6): 42 s and 53 s.
step cuda-tests 90 python -m pytest tests/test_cuda.py -n 0 -q -rs -p no:cacheprovider "${tests[@]}" \
  --junitxml="$out/cuda-tests.xml"
step cosmos-cuda-tests 75 python -m pytest tests/adapters/test_cosmos.py -k cuda -n 0 -q -rs -p no:cacheprovider \
  "${tests[@]}"

# 2. the compiled step (torch.compile, reduce-overhead: CUDA graphs) against eager at 1 row, same run; the first
# compiled call of each width pays inductor's compile time, reported apart. Issue 62's target: >= 0.8 of the NFE
# ratio turned into wall-clock (eager on the H200: image 0.77, video 0.27)
step compile-image 75 python benchmarks/compile_step.py models/emoji-image --device "$device" --rows 1 \
  --methods ar:1,exact:16 --repeats 2 $backend "${few_methods[@]}" --out "$out/compile"
step compile-video 90 python benchmarks/compile_step.py models/emoji-video --device "$device" --rows 1 \
  --methods ar:1,exact:64 --repeats 2 $backend "${few_methods[@]}" --out "$out/compile"

# the engine: 96 images at batch_size 32, the default method with rows joining as rows finish, in lockstep, and `ar`
# (the H200 before the engine, lockstep at 32 rows: 0.73-0.84x `ar`)
step engine-image 100 python -m benchmarks.engine_wallclock --out "$out/engine-image.json" job --kind image \
  "${engine_job[@]}"

# 3. real-size cost curves, random weights in bf16: Lumina-mGPT 7B (Chameleon) and Cosmos-1 4B first (the papers'
# acceptance is reported on them), then the compiled forward at one output (2 rows with CFG), then the others
curve() {  # curve NAME LIMIT ARGS...: one model's curve into its own folder
  local name=$1 limit=$2
  shift 2
  step "curve-$name" "$limit" python benchmarks/cost_curve.py "$@" --device "$device" --repeats "$repeats" $scaled \
    "${few[@]}" --out "$out/curve-$name"
}
curve lumina 70 lumina-mgpt-7b --rows 1,2,8,32 --windows 1,4,16,64
curve cosmos 70 cosmos-1-4b --rows 1,8,32 --windows 1,4,16,64,128
curve lumina-compiled 90 lumina-mgpt-7b --rows 2 --windows 1,64 --compiled $backend
step projection-first 40 python -m benchmarks.projection "$out"/curve-*/cost_curve.json --out "$out/projection.md"
curve janus 45 janus-pro-7b --rows 2,8,32 --windows 1,4,16,32,64
curve emu3 55 emu3-gen --rows 2,8 --windows 1,4,16,64
curve llama3 40 llama-3-8b --rows 1,8,32 --windows 1,4,16,64
curve cosmos5b 45 cosmos-1-5b-video2world --rows 1,8 --windows 1,4,16,64
curve llamagen 45 llamagen-gpt-b llamagen-gpt-l llamagen-gpt-xl llamagen-gpt-xxl --rows 2,16,64 --windows 1,4,16,64
step projection 40 python -m benchmarks.projection "$out"/curve-*/cost_curve.json --out "$out/projection.md"

# 4. LlamaGen's own loop on the same weights (a checkout beside this one, never part of it)
if [ -n "${MMSPEC_LLAMAGEN:-}" ]; then
  step llamagen-loop 60 python benchmarks/llamagen_loop.py --model llamagen-gpt-xxl --rows 1,8 --repeats 2 \
    --device "$device" --dtype "$dtype" $scaled "${few[@]:0:2}" --out "$out/llamagen-loop"
else
  echo "== llamagen-loop: skipped (MMSPEC_LLAMAGEN=DIR names a LlamaGen checkout)"
fi

# 5. what earlier runs measured, while the budget lasts: the quick suite at 1, 8 and 32 rows, one kind at a time
for kind_limit in image:90 video:160 text:90; do
  kind=${kind_limit%:*}
  step "suite-$kind" "${kind_limit#*:}" python -m benchmarks.suite quick "$kind" --device "$device" \
    --rows 1,8,32 --repeats 1 "${few[@]:0:2}" --out "$out/suite-$kind"
done

# named folders, each outside the budget above (they take what they take): a real Cosmos-1 folder over a folder of
# clips (MMSPEC_COSMOS=FOLDER MMSPEC_COSMOS_VIDEOS=DIR; docs/cosmos.md), as SCD reports it: coupled at window 64
# against AR, steps compression and latency; the field's table on an image model folder (MMSPEC_TABLE_MODEL=FOLDER,
# MMSPEC_TABLE_PROMPTS, MMSPEC_TABLE_LIMIT, MMSPEC_TABLE_SECONDS; docs/usage.md, "The field's table")
if [ -n "${MMSPEC_COSMOS:-}" ]; then
  budget=$((SECONDS + 3000))
  step cosmos-bench 3000 python -m mmspec.cli bench video --model "$MMSPEC_COSMOS" \
    --videos "${MMSPEC_COSMOS_VIDEOS:?set MMSPEC_COSMOS_VIDEOS to a folder of input clips}" --allow-torchscript \
    --device "$device" --out "$out/cosmos-bench.json"
fi
if [ -n "${MMSPEC_TABLE_MODEL:-}" ]; then
  prompts="${MMSPEC_TABLE_PROMPTS:-$out/table-prompts.txt}"
  [ -n "${MMSPEC_TABLE_PROMPTS:-}" ] || printf 'a red apple on a wooden table\na lighthouse at dusk\na cat reading a book\n' \
    > "$prompts"
  budget=$((SECONDS + ${MMSPEC_TABLE_SECONDS:-120} + 20))
  step table "${MMSPEC_TABLE_SECONDS:-120}" python -m mmspec.cli bench --model "$MMSPEC_TABLE_MODEL" \
    --prompts "$prompts" --limit "${MMSPEC_TABLE_LIMIT:-3}" --device "$device" --repeats 1 --out "$out/table"
fi

echo "== done in ${SECONDS}s, exit $status; results in $out"
exit $status
