#!/usr/bin/env bash
# Train emoji-image and emoji-video at once on a GPU machine that has this checkout but not the emoji art, from the
# tokenized data `train_gpt.py --write-pack` wrote where the art is:
#
#   python models/recipes/train_gpt.py --model emoji-image --write-pack packs/image.npz               # here
#   python models/recipes/train_gpt.py --model emoji-video --clips 15000 --write-pack packs/video.npz
#   MINUTES=3.8 bash models/recipes/train_on_gpu.sh packs OUT_DIR                                     # there
#
# Each model is exported into this checkout's models/ (its samples drawn there), then tarred into OUT_DIR with its
# training log; the video trains 0.3 min longer, so that its samples' frame 0 comes from the new emoji-image. On an
# H200 (2026-12-04), 3.8 minutes gave 10,952 image steps of batch 64 and 11,814 video steps of batch 32. Draft heads
# and window priors are made afterwards where the models are used (models/README.md). IMAGE_ARGS: more arguments for
# emoji-image's run (e.g. "--gpt dim=256 n_layer=8 n_head=8" for a larger model).
set -u
packs=${1:?the folder with image.npz and video.npz}
out=${2:?the folder for emoji-image.tar and emoji-video.tar}
M=${MINUTES:-3.8}
mkdir -p "$out" /tmp/train
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
rm -f models/emoji-image/window-prior.json models/emoji-video/window-prior.json  # measured again for new models
python3 models/recipes/train_gpt.py --model emoji-image --pack "$packs/image.npz" --device "${DEVICE:-cuda}" --bf16 \
  --batch "${IMAGE_BATCH:-64}" --max-minutes "$M" --patience 12 --fresh --save-every 60 --work /tmp/train/emoji-image ${IMAGE_ARGS:-} \
  > /tmp/train/emoji-image.log 2>&1 &
python3 models/recipes/train_gpt.py --model emoji-video --pack "$packs/video.npz" --device "${DEVICE:-cuda}" --bf16 \
  --batch "${VIDEO_BATCH:-32}" --max-minutes "$(python3 -c "print($M + 0.3)")" --fresh --save-every 60 \
  --work /tmp/train/emoji-video > /tmp/train/emoji-video.log 2>&1 &
wait
for name in emoji-image emoji-video; do
  tail -n 1 "/tmp/train/$name.log"
  [ -f "/tmp/train/$name/log.jsonl" ] && cp "/tmp/train/$name/log.jsonl" "models/$name/train-log.jsonl"  # (every 10 steps)
  tar cf "$out/$name.tar" --exclude=head "models/$name"
done
