"""Write the model cards (models/<name>/README.md) from each folder's metrics.json.

    python models/recipes/cards.py            # all folders that have a metrics.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"

EMOJI_DATA = """\
- **Noto Emoji** art (Google), from the npm package `emoji-datasource-google` 16.0.0: Apache-2.0.
- **Twemoji** art, Copyright 2020 Twitter, Inc and other contributors, from the npm package
  `emoji-datasource-twitter` 16.0.0: CC-BY-4.0 (https://creativecommons.org/licenses/by/4.0/).
- Names, short names and categories: `emoji.json` of the same packages (emoji-data by iamcal, MIT);
  CLDR English labels ("red heart", not the Unicode name "heavy black heart") from the npm package
  `emojibase-data` 17.0.0 (MIT, Miles Johnson).

Both sets' 64x64 PNGs are used, skin-tone variants included, alpha composited on white; ~5% of the
emoji (chosen by a hash of the code point, the same ones in both sets) are held out. The weights are
derived from this art: keep the attributions above when you redistribute them or their outputs."""

TEXT_DATA = """\
The Python {py} standard library of the interpreter that trained it (`Lib/`, without `test/`,
`idlelib/idle_test`, `lib2to3`, `turtledemo`, `site-packages`): Python Software Foundation License.
Files are joined by `<|endoftext|>`; ~5% of the files (by a hash of their path) are held out.
Tokenizer: byte-level BPE with 4096 ids trained on the training files with Hugging Face `tokenizers`
(`tokenizer.json`, loaded as a `PreTrainedTokenizerFast`)."""


def minutes(m: dict) -> str:
    if m.get("device", "cpu") != "cpu":
        return f"{m['train_minutes']} min on {m.get('gpu', m['device'])}"
    thr = f", {m['threads']} thread{'s' if m.get('threads', 1) > 1 else ''}"
    return f"{m['train_minutes']} min on CPU{thr} (2-core x86 VM, shared with another job)"


def card_patch_vq(name: str, m: dict, cfg: dict) -> str:
    frames = name.endswith("video")  # emoji-vq-video: single frames of the emoji-motion clips
    size, side, k = cfg["sample_size"], cfg["sample_size"] // cfg["patch"], cfg["patch"]
    if frames:
        role = "the tokenizer of `emoji-video`: each 32x32 frame is encoded on its own"
        why = f"""`emoji-video`'s slides and bounces move the sprite by whole {k}-pixel patches
(mmspec/pipelines/scene.py): with codes that see only their own patch, every code of a later frame is a code of frame 0,
moved, a copy the video model learns once for every subject instead of a sprite it would have to redraw at each
shifted pixel. The frames hold a 14-20 pixel sprite on one of 12 colours: {m['codebook_size']} codes, more than
`emoji-image`'s mostly white pictures need."""
        data = """Frames of the synthetic emoji-motion clips `emoji-video` trains on (the clips are described in its
card; the art below). Held-out figures: every frame of the first 200 held-out clips.

""" + EMOJI_DATA
        rows = ""
    else:
        role = "the tokenizer of `emoji-image`"
        why = f"""`emoji-image` draws each subject at many places and sizes. With codes that see only their own
patch, a sprite moved by whole tokens keeps every code ({m['moved_codes_kept']:.0%} of a moved sprite's codes kept;
the diffusers VQModel it replaced, whose 3x3 convolutions and mid-block attention see far beyond a patch, kept 83% by
the same measure, and gave a plain white interior several codes)
and plain white is one code wherever it is, so the image model learns a subject once rather than once per place."""
        data = EMOJI_DATA + """

Beside them, every training staging of the `emoji-image` subjects (the pictures it trains on); a quarter of every batch
is 2x2 mosaics of 32x32 "video frames" (a shrunken sprite on a plain colour)."""
        rows = (f"| held-out staged pictures (bf16 weights) | {m['heldout_staged_psnr_db_bf16']} dB at held-out "
                f"placements |\n| a sprite moved by 2 tokens keeps its codes | {m['moved_codes_kept']:.3f} "
                f"(`train_vq.moved_codes_kept`: 64 subjects at edge 32) |\n")
    return f"""# {name}: a patch VQ tokenizer for emoji {'video frames' if frames else 'images'}

A `PatchVQ` (mmspec/reference/patch_vq.py, {m['params'] / 1e6:.2f}M parameters, codebook of {m['codebook_size']}
{cfg['embed_dim']}-dim codes): a {size}x{size} RGB image becomes a {side}x{side} grid of
code ids, each computed from its own {k}x{k} pixels only (a convolution whose kernel is its
stride, then 1x1 convolutions). The decoder looks {cfg['dec_blocks'] * 2 + 1} tokens around each code, so edges
between patches stay smooth. It is {role}. Weights: bf16 safetensors.

Why a patch tokenizer: {why}

```python
from mmspec.tokenizers import VQTokenizer
vq = VQTokenizer.from_pretrained("models/{name}")
ids = vq.encode(images)          # uint8 [B, {size}, {size}, 3] or PIL -> [B, {side}, {side}]
pixels = vq.decode(ids)          # -> [B, 3, {size}, {size}] in [-1, 1]; vq.decode_pil(ids) -> PIL images
```

![held-out originals (top) and reconstructions (bottom)](reconstructions.png)

| | |
|---|---|
| held-out reconstruction PSNR (bf16 weights) | **{m['heldout_psnr_db_bf16']} dB** on held-out {'frames' if frames else 'emoji'} (fp32: {m['heldout_psnr_db']} dB) |
{rows}| codebook usage | {m['codes_used_heldout']} codes on the held-out {'frames' if frames else 'images'}, {m['codes_used_train_1024']} on 1024 training ones, {m['codes_used_total']} / {m['codebook_size']} together; code perplexity {m['code_perplexity']} |
| training | {m['steps']} steps of batch {m['batch']}, {minutes(m)} |

## Data

{data}

## Training

```bash
python models/recipes/data.py        # npm pack the two art sets into .cache/, build the arrays
python models/recipes/train_vq.py{' --frames' if frames else ''} --max-minutes {m['train_minutes']:.0f} --threads {m['threads']}
```
Loss: MSE + 0.1 L1 + the VQ loss (codebook + 0.25 commitment); unused codes are restarted from encoder outputs every
25 steps. AdamW, lr {m['lr']} on a cosine over the time budget. The run checkpoints to `.cache/train/{name}/` and
resumes when rerun; losses are logged to `.cache/train/{name}/log.jsonl`.
{m.get('remark', '')}"""


def _motion_rows(m: dict) -> str:
    """The rows of recipes/eval_video.py's figures, where the metrics have them."""
    v = m.get("motion")
    if not v:
        return ""
    per = ", ".join(f"{k} {x:.2f}" for k, x in v["motion_shown_per_motion"].items())
    return (f"| PSNR to the ideal clip, frames 1-7 ({v['clips']} clips: 8 motions x 4 subjects x 2; "
            f"`recipes/eval_video.py`) | **{v['psnr_to_ideal_db']} dB** (frame 7: {v['psnr_to_ideal_frame7_db']} dB; "
            f"frame 0 held still: {v['psnr_still_frame0_db']} dB; frame 0 itself, through the tokenizer: "
            f"{v['psnr_frame0_db']} dB) |\n" + _ceiling_row(v) +
            f"| motion shown (the foreground moves the named way and lasts) | **{v['motion_shown']:.2f}** of "
            f"{v['motion_judged']} judged clips ({per}); the opposite motion on the same clips: "
            f"{v['motion_shown_control']:.2f} |\n" + _motion_extra_rows(v))


def _ceiling_row(v: dict) -> str:
    if "tokenizer_ceiling_db" not in v:
        return ""
    return (f"| the ideal clip through the frame tokenizer, frames 1-7 (what a model that generated the ideal clip's "
            f"own codes would score) | {v['tokenizer_ceiling_db']} dB (frame 7: "
            f"{v['tokenizer_ceiling_frame7_db']} dB)" + (
                f"; the subject named in its frame 7: {v['tokenizer_ceiling_subject_named_frame7']:.2f} (in the ideal "
                f"clip's own: {v['ideal_subject_named_frame7']:.2f}; "
                + ", ".join(f"{k} {x:.2f}" for k, x in v["ideal_subject_named_frame7_per_motion"].items()) + ")"
                if "ideal_subject_named_frame7" in v else "") + " |\n")


def _motion_extra_rows(v: dict) -> str:
    """Per-motion PSNR, the subject named, and the figures without CFG, where eval_video.py measured them."""
    rows = ""
    if "psnr_to_ideal_per_motion_db" in v:
        rows += ("| PSNR to the ideal clip by motion, frames 1-7 | "
                 + ", ".join(f"{k} {x:.1f}" for k, x in v["psnr_to_ideal_per_motion_db"].items()) + " dB |\n")
    if "subject_named_frame7" in v:
        rows += (f"| the classifier (`classifier.py`, trained on the art) names the subject | frame 7: "
                 f"**{v['subject_named_frame7']:.2f}** of clips"
                 + (" (" + ", ".join(f"{k} {x:.2f}" for k, x in v["subject_named_frame7_per_motion"].items()) + ")"
                    if "subject_named_frame7_per_motion" in v else "")
                 + f", frame 0 (the image model's picture, staged): {v['subject_named_frame0']:.2f} |\n")
    if "no_cfg" in v:
        n, cfg = v["no_cfg"], v["sampling"].get("cfg_scale")
        rows += (f"| classifier-free guidance (scale {cfg}) against none, same seeds and frames 0 | subject named in "
                 f"frame 7 {v.get('subject_named_frame7', float('nan')):.2f} against "
                 f"{n.get('subject_named_frame7', float('nan')):.2f}; PSNR frames 1-7 {v['psnr_to_ideal_db']} against "
                 f"{n['psnr_to_ideal_db']} dB; motion shown {v['motion_shown']:.2f} against {n['motion_shown']:.2f} |\n")
    return rows


def _image_eval_rows(m: dict) -> str:
    """The rows of recipes/eval_image.py's figures, where the metrics have them."""
    v = m.get("eval_image")
    if not v:
        return ""
    d, loss = v["default"], v["loss"]
    other = v.get("no_cfg") or v.get("cfg_3")
    other_name = "without CFG (same temperature and top-k)" if "no_cfg" in v else "with CFG scale 3"
    return (f"| variety: of {v['prompts']} held-out prompts (training subjects, fresh wordings), those whose 4 seeds give "
            f"3+ visibly different pictures (mean absolute pixel difference >= {v['visibly_different_mean_abs_pixels']:g} "
            f"of 255; `recipes/eval_image.py`) | **{d['prompts_with_3_of_4_different']:.2f}** (mean "
            f"{d['mean_different_of_4']} different pictures of 4) |\n"
            f"| prompt followed: samples whose subject the classifier (`recipes/classifier.py`, trained on the art) "
            f"names, same prompts | **{d['classifier_names_subject']:.2f}** at the default sampling; "
            f"{other['classifier_names_subject']:.2f} {other_name} |\n"
            + (f"| prompt followed, by wording (default sampling, 10 prompts each) | "
               + ", ".join(f'"{w.format("X")}" {share:.2f}' for w, share in d["named_by_wording"].items()) + " |\n"
               if "named_by_wording" in d else "")
            + f"| generalising: loss at placements never trained on / at training placements | "
            f"**{loss['ratio']}** ({loss['heldout_placements']} / {loss['training_placements']} nats/token) |\n")


def card_gpt(name: str, m: dict, cfg: dict) -> str:
    g = cfg["gpt"]
    tokenizer = Path(cfg["tokenizer"]).name
    video = cfg["layout"]["type"] == "Grid3D"
    shape = cfg["layout"]["shape"]
    what = (f"{shape[0]}-frame {cfg['frame_size']}x{cfg['frame_size']} videos ({shape[0]} frames of "
            f"{shape[1]}x{shape[2]} tokens, 3D RoPE over (frame, row, col))" if video else
            f"{cfg['frame_size']}x{cfg['frame_size']} images ({shape[0]}x{shape[1]} tokens, 2D RoPE over (row, col))")
    pic = "samples.gif" if video else "samples.png"
    prompts = (MODELS / name / "samples.txt").read_text().strip().splitlines() if (MODELS / name / "samples.txt").exists() else []
    prompts = ", ".join(p.split(": ", 1)[1] for p in prompts)
    pipe = "VideoPipeline" if video else "ImagePipeline"
    example = '"bounce red apple"' if video else '"red heart"'
    s = cfg["default_sampling"]
    given = m.get("given_tokens", 0)
    data = EMOJI_DATA + (f"""

Videos: {m.get('clips', 6000)} clips of 8 frames at 32x32, each a base emoji (no skin tones) of 14-20 px moving on one
of 12 plain colours: slide left / right / up / down, bounce, zoom in / out, rotate. Slides and bounces move it by
whole 4-pixel patches from a corner on the patch grid, so their later frames are frame 0's codes, moved; zooms and
rotations redraw it. Caption words:
the motion, the emoji's name, the background colour, e.g. "bounce red apple green background". Frames
are tokenized one by one with `{tokenizer}`. The sprite's poses and the scene are defined once in
`mmspec/pipelines/scene.py`, which the video pipeline also uses to stage frame 0.""" if video else "")
    if given:
        usage = (f'out = pipe({example}, num_outputs=4, seed=0)  # frame 0 drawn by emoji-image, then exact = AR\'s tokens\n'
                 f'out = pipe({example}, image="apple.png")          # or your own first frame')
        shown = (f"![frame by frame: per prompt, two samples](samples_sheet.png)\n\nSamples above, frame by frame "
                 f"(two per prompt, one prompt per row) and as GIF below (four per prompt): text -> image -> video "
                 f"through `VideoPipeline` at the default settings, seed 0, plain AR's tokens (`exact`). Frame 0 is "
                 f"drawn by `emoji-image` for the prompt's subject and staged as the scene (the sprite where the named "
                 f"motion starts); the model generates frames 1-7. Prompts: {prompts}.\n\n![samples]({pic})")
        loss_rows = (f"| held-out loss of frames 1-7 given frame 0 (teacher-forced, full prompt, bf16 weights) | "
                     f"**{m['heldout_loss_nats_bf16']} nats/token** over {m['heldout_sequences']} held-out clips |\n")
        what_trained = (" Frame 0 is always given at generation, so the loss covers frames 1-7 only (frame 0 is "
                        "context). ")
    else:
        usage = f'out = pipe({example}, num_outputs=4, seed=0, method="coupled", window={32 if video else 16})'
        shown = (f"![samples]({pic})\n\nSamples above: plain AR sampling at the default settings, 4 per prompt, "
                 f"one prompt per row: {prompts}.")
        loss_rows = (f"| held-out loss (teacher-forced, full prompt, bf16 weights) | **{m['heldout_loss_nats_bf16']} "
                     f"nats/token** over {m['heldout_sequences']} held-out {'clips' if video else 'images'} |\n")
        what_trained = ""
    if "train_loss_nats_bf16" in m:  # what a model that draws named emoji has to know: its training set
        loss_rows += (f"| the same loss on {m['train_sequences_scored']} training {'clips' if video else 'images'} "
                      f"(spread evenly over the training set) | **{m['train_loss_nats_bf16']} nats/token** |\n")
    init = m.get("init")
    if init:
        fit = f"; on training {'clips' if video else 'images'}: {init['train_loss_nats_bf16']}" * ("train_loss_nats_bf16" in init)
        loss_rows += (f"| the same measures for the model it started from (`{init['folder']}`"
                      f"{init.get('about', '')}) | held out: {init['heldout_loss_nats_bf16']}{fit} nats/token |\n")
    gap = m.get("eval_image", {}).get("loss", {}).get("ratio")
    entropy_remark = ("it is much higher than for large, well-trained models, which makes acceptance\nlengths on this "
                      "model a conservative estimate." if m["mean_entropy_nats"]["default"] > 0.3 else
                      "it is low because most of a picture is plain background and the default sampling keeps\n"
                      "few candidates; the model generalises to placements it never saw (the loss ratio above), so "
                      "this is\nnot a memorised picture's certainty, but a sampler of real models keeps more "
                      "candidates." if gap and gap < 2 else
                      "a model that knows its pictures by heart is nearly certain of every token, so drafts are\n"
                      "accepted far more often than on a model that generalises: acceptance on it is an optimistic "
                      "estimate.")
    everyday = m.get("subjects") == "everyday"
    if everyday:
        data += ("\n\nThis model is trained on the everyday subjects only (`--subjects everyday`): the ~650 emoji whose "
                 "emoji.json subcategory is a face, heart, animal, plant, food or drink, vehicle, weather, sport, game "
                 "or event (`SUBJECTS` in `recipes/data.py`), both art sets, without skin-tone variants, "
                 f"{m.get('train_sequences', 'about 1200')} training images. Few enough for a model of this size to "
                 "learn to draw each; other emoji (flags, people, most symbols and objects) it does not draw.")
    staging = m.get("staging")
    if staging:
        data += (f"\n\nThis model draws {staging['subjects']} subjects (`IMAGE_SUBJECTS` in `recipes/data.py`: faces, "
                 "hearts, animals, plants, food, vehicles, weather, sport and things), the base emoji of both art sets, "
                 f"each staged at {staging['per_image']} (`build_staged_images`): an edge of "
                 f"{', '.join(map(str, staging['edges']))} pixels (each drawn as often in training), then a place on "
                 "the 64-pixel white canvas with its corner on the 4-pixel token grid. The seed picks the art set and "
                 "the staging, the prompt the "
                 f"subject. {staging['held_out_placements_percent']}% of the placements below full size (the same "
                 "for every subject) are never trained on: the held-out pictures are the training subjects there.")
    init_flag = ((f" --clips {m['clips']}" if given else "") + " --subjects everyday" * everyday +
                 " --init <previous model folder>" * bool(init) +
                 " --bf16" * bool(m.get("bf16_autocast")) +
                 (f" --lr {m['lr']}" if given or m.get("lr", 1e-3) != 1e-3 else "") +
                 (f" --batch {m['batch']}" if m.get("device", "cpu") != "cpu" or m["batch"] != 16 else "") +
                 (f" --device {m['device']}" if m.get("device", "cpu") != "cpu" else "") +
                 (f" --patience {m['patience']}" if m.get("patience") else ""))
    return f"""# {name}: a small prompt-conditioned AR {'video' if video else 'image'} model

mmspec's reference GPT (LlamaGen-style: RMSNorm, SwiGLU, {'3D' if video else '2D'} RoPE), {m['params'] / 1e6:.2f}M
parameters (dim {g['dim']}, {g['n_layer']} layers, {g['n_head']} heads), generating {what}
with the `{tokenizer}` tokenizer (codebook {g['vocab_size']}). It is conditioned on up to {g['cond_len']}
prompt words (`vocab.json`, {g['cond_vocab_size']} words; id 0 = padding = the null condition for
classifier-free guidance; the condition's rotary angle is 0). Weights: bf16 safetensors.

```python
import mmspec
pipe = mmspec.{pipe}.from_pretrained("models/{name}")
{usage}
```

{shown}

| | |
|---|---|
{loss_rows}{_motion_rows(m)}{_image_eval_rows(m)}| mean per-token entropy of p, default sampling | **{m['mean_entropy_nats']['default']} nats** (raw: t=1, no CFG, no top-k: {m['mean_entropy_nats']['raw_t1_nocfg']} nats) |
| default sampling | temperature {s.get('temperature', 1.0)}, top-k {s.get('top_k')}, {f"CFG scale {s['cfg_scale']} (logit mixing)" if s.get('cfg_scale', 1.0) != 1.0 else "no CFG"} |
| training | {m['steps']} steps of batch {m['batch']} ({m['tokens_seen'] / 1e6:.1f}M tokens), {minutes(m)} |

Entropy is measured at the positions of the sample sequences above (the distributions speculation
has to guess): {entropy_remark}
{m.get('remark', '')}

## Data

{data}

## Training

```bash
python models/recipes/data.py
python models/recipes/train_vq.py{' --frames' if video else ''}                          # models/{tokenizer} first
python models/recipes/train_gpt.py --model {name} --max-minutes {m['train_minutes']:.0f}{init_flag}
```
Teacher-forced cross-entropy through `GPT.forward_sequence(cond, tokens, layout.positions())`.{what_trained}
Prompt words: the CLDR label, then the Unicode name, short names, skin tones and category, e.g.
"red heart heavy black smileys emotion"; the word vocabulary comes from emoji.json (label words
outside it become `<unk>`). {'Each (art set, emoji) is sampled equally often, then one of its skin-tone variants. ' if not (video or staging) else ''}The
condition is dropped (all padding) for {m.get('condition_dropout', 0.1):.0%} of sequences, otherwise it is {'the label alone ("red apple", as users write it), the full word list or a random half of its words (' + format((1 - m.get('condition_dropout', 0.1)) / 3, '.0%') + ' each)' if m.get('label_prompts') else 'the full word list (45%) or a random half of its words (45%)'}, so short prompts are in distribution.{_filler_text(m)} AdamW (0.9, 0.95), weight
decay 0.05, lr {m.get('lr', '1e-3')} on a cosine over the time budget, batch {m['batch']}. Checkpoints in
`.cache/train/{name}/` (rerun to resume), losses in `.cache/train/{name}/log.jsonl`.
"""


def _filler_text(m: dict) -> str:
    """The training prompts' filler words (train_gpt.condition_batch), where the model was trained with them."""
    if not m.get("filler_share"):
        return ""
    return (f" {m['filler_share']:.0%} of the kept prompts also carry one or two filler words at random places: words"
            " of the vocabulary that no training prompt uses (other emoji's names) or the unknown word, never \"emoji\""
            " or \"symbol\" (the held-out wordings of `eval_image.py`).")


def card_text(name: str, m: dict, cfg: dict) -> str:
    draft = name.endswith("draft")
    sample = (MODELS / name / "sample.txt").read_text() if (MODELS / name / "sample.txt").exists() else ""
    ent = m["mean_entropy_nats"]
    ds = m["default_sampling"]
    ent_default = ent.get(f"t{ds['temperature']}_topp{ds['top_p']}")
    return f"""# {name}: a {'tiny draft' if draft else 'small'} Python code model

A Hugging Face `LlamaForCausalLM` with {m['params'] / 1e6:.2f}M parameters (hidden {cfg['hidden_size']},
{cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads, vocabulary {cfg['vocab_size']}{', tied embeddings' if cfg.get('tie_word_embeddings') else ''})
trained on the Python standard library. {'It is the draft model for `code-text` (same tokenizer).' if draft else 'Its draft model is `code-text-draft` (same tokenizer).'}
Weights: bf16 safetensors; the tokenizer sits in the same folder.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained("models/{name}")
model = AutoModelForCausalLM.from_pretrained("models/{name}")
```

| | |
|---|---|
| held-out loss (bf16 weights, {m['seq']}-token windows) | **{m['heldout_loss_nats_bf16']} nats/token** (perplexity {m['heldout_ppl_bf16']}) over {m['heldout_tokens']} held-out tokens |
| mean per-token entropy of p, default sampling (t={ds['temperature']}, top-p {ds['top_p']}) | **{ent_default} nats** (raw t=1: {ent.get('t1.0_topp1.0')} nats), teacher-forced on held-out code |
| training | {m['steps']} steps of batch {m['batch']} x {m['seq']} tokens ({m['tokens_seen'] / 1e6:.1f}M tokens), {minutes(m)} |

Sample (prompt `def fibonacci(n):`, t={ds['temperature']}, top-p {ds['top_p']}, seed 0):

```python
{sample}
```

## Data

{TEXT_DATA.format(py=m.get('python', '3.11'))}

## Training

```bash
python models/recipes/data.py
python models/recipes/train_text.py --model {name} --max-minutes {m['train_minutes']:.0f}
```
Random {m['seq']}-token windows, AdamW (0.9, 0.95), weight decay 0.1, lr 1e-3 on a cosine over the
time budget. Checkpoints in `.cache/train/{name}/` (rerun to resume), losses in
`.cache/train/{name}/log.jsonl`.
"""


def main(names=None):
    for folder in sorted(MODELS.iterdir()):
        if not (folder / "metrics.json").exists() or (names and folder.name not in names):
            continue
        m = json.loads((folder / "metrics.json").read_text())
        cfg = json.loads((folder / "config.json").read_text())
        if cfg.get("_class_name") == "PatchVQ":
            text = card_patch_vq(folder.name, m, cfg)
        elif cfg.get("model_type") == "mmspec-gpt":
            text = card_gpt(folder.name, m, cfg)
        else:
            text = card_text(folder.name, m, cfg)
        (folder / "README.md").write_text(text)
        print("wrote", folder / "README.md")


if __name__ == "__main__":
    main(sys.argv[1:])
