"""Janus and Janus-Pro as deepseek releases them (`model_type: multi_modality`) -> transformers' Janus folder.

deepseek's folder holds its own module tree (`MultiModalityCausalLM`: a timm SigLIP `vision_model`, `aligner`, a
LlamaGen VQ as `gen_vision_model`, `gen_aligner`, `gen_head`, `gen_embed` and a `language_model` Llama) in
`pytorch_model*.bin` pickles or safetensors, and a config of its own. `convert_janus` renames every weight to
`JanusForConditionalGeneration`'s names (fused qkv of the vision tower split), builds the JanusConfig from the
deepseek config and the weights' shapes, and writes safetensors, a generation config that keeps its BOI token
(`_from_model_config: false`: transformers drops `generation_kwargs`, where Janus reads the BOI id, from a generation
config derived from the model config) and the processor's files (tokenizer, image processor from deepseek's
preprocessor_config.json, a chat template writing deepseek's conversation format), so `AutoProcessor` loads the
folder.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import torch

from mmspec.loading import read_checkpoint

DEEPSEEK_TYPE = "multi_modality"
# attention heads of the timm vision towers deepseek names (their weights do not show it)
VISION_HEADS = {"siglip_large_patch16_384": 16, "siglip_so400m_patch14_384": 16}
BOI, EOI, IMAGE, PAD = "<begin_of_image>", "<end_of_image>", "<image_placeholder>", "<｜▁pad▁｜>"
# deepseek's default sampling for image generation (generation_inference.py): CFG 5 on logits, temperature 1
GUIDANCE, TEMPERATURE = 5.0, 1.0

_RULES = [  # deepseek key -> transformers key, in order
    (r"^vision_model\.vision_tower\.blocks\.(\d+)\.attn\.proj\.", r"model.vision_model.encoder.layers.\1.self_attn.projection_layer."),
    (r"^vision_model\.vision_tower\.blocks\.(\d+)\.attn\.qkv\.", r"model.vision_model.encoder.layers.\1.self_attn.qkv."),
    (r"^vision_model\.vision_tower\.blocks\.(\d+)\.norm(\d)\.", r"model.vision_model.encoder.layers.\1.layer_norm\2."),
    (r"^vision_model\.vision_tower\.blocks\.(\d+)\.mlp\.", r"model.vision_model.encoder.layers.\1.mlp."),
    (r"^vision_model\.vision_tower\.patch_embed\.proj\.", "model.vision_model.embeddings.patch_embedding."),
    (r"^vision_model\.vision_tower\.pos_embed$", "model.vision_model.embeddings.position_embedding.weight"),
    (r"^vision_model\.vision_tower\.norm\.", "model.vision_model.post_layernorm."),
    # an MLP projector's Linear layers sit at 0, 2, 4... between its activations
    (r"^(gen_)?aligner\.layers\.0\.", lambda m: f"model.{_ALIGNER[m[1]]}.fc1."),
    (r"^(gen_)?aligner\.layers\.(\d+)\.", lambda m: f"model.{_ALIGNER[m[1]]}.hidden_layers.{int(m[2]) // 2 - 1}."),
    (r"^gen_vision_model\.(encoder|decoder)\.mid\.0\.", r"model.vqmodel.\1.mid.block_1."),
    (r"^gen_vision_model\.(encoder|decoder)\.mid\.1\.", r"model.vqmodel.\1.mid.attn_1."),
    (r"^gen_vision_model\.(encoder|decoder)\.mid\.2\.", r"model.vqmodel.\1.mid.block_2."),
    (r"^gen_vision_model\.encoder\.conv_blocks\.(\d+)\.res\.", r"model.vqmodel.encoder.down.\1.block."),
    (r"^gen_vision_model\.decoder\.conv_blocks\.(\d+)\.res\.", r"model.vqmodel.decoder.up.\1.block."),
    (r"^gen_vision_model\.encoder\.conv_blocks\.", "model.vqmodel.encoder.down."),
    (r"^gen_vision_model\.decoder\.conv_blocks\.", "model.vqmodel.decoder.up."),
    (r"^gen_vision_model\.", "model.vqmodel."),
    (r"^gen_head\.output_mlp_projector\.", "model.generation_head.proj_out."),
    (r"^gen_head\.vision_head\.", "model.generation_head.vision_head."),
    (r"^gen_embed\.", "model.generation_embeddings."),
    (r"^language_model\.model\.", "model.language_model."),
    (r"^language_model\.lm_head\.", "lm_head."),
]
_ALIGNER = {None: "aligner", "gen_": "generation_aligner"}
_DROPPED = (r"^vision_model\.vision_tower\.attn_pool\.", r"\.quantize\.codebook_used$")


def is_deepseek_janus(path: "str | Path") -> bool:
    config = Path(path) / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("model_type") == DEEPSEEK_TYPE


def transformers_key(key: str) -> str:
    for pattern, repl in _RULES:
        key = re.sub(pattern, repl, key)
    return key


def convert_state_dict(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """deepseek's weights -> JanusForConditionalGeneration's: renamed, the vision tower's qkv split in three, its
    position table [1, N, D] -> [N, D]."""
    out = {}
    for key, value in sd.items():
        if any(re.search(p, key) for p in _DROPPED):
            continue
        new = transformers_key(key)
        if not new.startswith(("model.", "lm_head.")):
            raise ValueError(f"deepseek Janus weight {key!r} has no place in transformers' Janus")
        if ".self_attn.qkv." in new:
            for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3)):
                out[new.replace(".qkv.", f".{name}.")] = part
        else:
            out[new] = value
    table = "model.vision_model.embeddings.position_embedding.weight"
    if table in out:
        out[table] = out[table].reshape(out[table].shape[-2:])
    return out


def weight_files(path: Path) -> list[Path]:
    """A deepseek folder's weight files: its safetensors, else its pytorch_model*.bin."""
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin"))
    if not files:
        raise FileNotFoundError(f"{path} has neither *.safetensors nor pytorch_model*.bin weights: copy the release's "
                                "weight files beside its config.json")
    return files


def read_weights(path: Path, allow_pickle: bool) -> dict[str, torch.Tensor]:
    """Every weight of a deepseek folder (a pickle only with allow_pickle, through the weights-only unpickler)."""
    sd = {}
    for file in weight_files(path):
        sd.update(read_checkpoint(file, allow_pickle, "mmspec convert janus"))
    return sd


def check_release(src: Path) -> None:
    """What converting a deepseek folder reads, there before any work: its config, weights and tokenizer."""
    if not is_deepseek_janus(src):
        raise ValueError(f"{src} is not a deepseek Janus folder (its config.json needs model_type {DEEPSEEK_TYPE!r})")
    weight_files(src)
    if not (src / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{src} has no tokenizer.json: copy tokenizer.json, tokenizer_config.json and "
                                "special_tokens_map.json from the release beside its weights")


# deepseek's conversation format (janus/utils/conversation.py, template "deepseek", empty system prompt), which its
# generation_inference.py builds an image prompt with: "<|User|>: {text}\n\n<|Assistant|>:", then BOI (which
# JanusProcessor appends with generation_mode="image"); an image in a message stands as its placeholder
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- set text = namespace(value='') -%}"
    "{%- if message['content'] is string -%}{%- set text.value = message['content'] -%}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{%- set text.value = text.value + '" + IMAGE + "\\n' -%}"
    "{%- elif part['type'] == 'text' -%}{%- set text.value = text.value + part['text'] -%}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if message['role'] == 'user' -%}<|User|>: {{ text.value | trim }}{{ '\\n\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}<|Assistant|>: {{ text.value | trim }}<｜end▁of▁sentence｜>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|Assistant|>:{%- endif -%}"
)


@functools.lru_cache(maxsize=1)
def _chat_template():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # (the environment transformers' apply_chat_template renders a template in)
    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(CHAT_TEMPLATE)


def generation_prompt(text: str) -> str:
    """deepseek's image-generation prompt (generation_inference.py: sft_format + image_start_tag): CHAT_TEMPLATE, the
    one statement of deepseek's turn, rendered as a converted folder's processor renders it (a user message, the
    generation prompt), then BOI."""
    return _chat_template().render(messages=[{"role": "user", "content": text}], add_generation_prompt=True) + BOI


def janus_processor(src: Path, raw: dict, num_image_tokens: int):
    """transformers' JanusProcessor for a deepseek folder: its tokenizer (told which tokens are the image's), its
    image processor's settings (preprocessor_config.json; else the vision tower's image size) and CHAT_TEMPLATE."""
    from transformers import JanusImageProcessor, JanusProcessor, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(
        src, local_files_only=True, padding_side="left",
        extra_special_tokens={"image_token": IMAGE, "boi_token": BOI, "eoi_token": EOI})
    file = src / "preprocessor_config.json"
    settings = json.loads(file.read_text()) if file.is_file() else {}
    side = settings.get("image_size", ((raw.get("vision_config") or {}).get("params") or {}).get("image_size", 384))
    kept = {k: settings[k] for k in ("do_normalize", "image_mean", "image_std", "min_size", "rescale_factor")
            if k in settings}
    image = JanusImageProcessor(size={"height": side, "width": side}, **kept)
    return JanusProcessor(image_processor=image, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE,
                          num_image_tokens=num_image_tokens)


def janus_config(raw: dict, sd: dict[str, torch.Tensor], tokenizer):
    """The JanusConfig of a deepseek folder: sizes from its config, the rest from the weights' shapes."""
    from transformers import JanusConfig

    def params(name: str) -> dict:
        return (raw.get(name) or {}).get("params", {})

    def count(prefix: str) -> int:  # how many numbered children a module has
        return len({m[1] for k in sd if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))})

    vision = params("vision_config")
    name = vision.get("model_name", "siglip_large_patch16_384")
    if name not in VISION_HEADS:
        raise ValueError(f"deepseek Janus vision tower {name!r}: its attention heads are not known to mmspec "
                         f"(known: {sorted(VISION_HEADS)})")
    patch = sd["vision_model.vision_tower.patch_embed.proj.weight"]  # [D, 3, p, p]
    image_size = vision.get("image_size", 384)
    grid = image_size // patch.shape[-1]
    vision_config = dict(hidden_size=patch.shape[0], patch_size=patch.shape[-1], image_size=image_size,
                         num_hidden_layers=count("vision_model.vision_tower.blocks."),
                         num_attention_heads=VISION_HEADS[name], num_image_tokens=grid * grid,
                         mlp_ratio=sd["vision_model.vision_tower.blocks.0.mlp.fc1.weight"].shape[0] / patch.shape[0],
                         projection_dim=sd["aligner.layers.0.weight"].shape[0], depth=count("aligner.layers."))
    enc = "gen_vision_model.encoder."
    base = sd[enc + "conv_in.weight"].shape[0]
    levels = count(enc + "conv_blocks.")
    vq_config = dict(
        embed_dim=sd["gen_vision_model.quantize.embedding.weight"].shape[1],
        num_embeddings=sd["gen_vision_model.quantize.embedding.weight"].shape[0],
        latent_channels=sd[enc + "conv_out.weight"].shape[0], base_channels=base,
        channel_multiplier=[sd[f"{enc}conv_blocks.{i}.res.0.conv1.weight"].shape[0] // base for i in range(levels)],
        num_res_blocks=count(enc + "conv_blocks.0.res."), num_patches=grid,
        projection_dim=sd["gen_aligner.layers.0.weight"].shape[0], num_hidden_layers=count("gen_aligner.layers."),
        image_token_embed_dim=sd["gen_head.output_mlp_projector.weight"].shape[0])
    language = {k: v for k, v in raw["language_config"].items() if k not in ("model_type", "architectures")}
    text_config = dict(model_type="llama", **language, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    tied = "language_model.lm_head.weight" not in sd
    return JanusConfig(text_config=text_config, vision_config=vision_config, vq_config=vq_config,
                       image_token_id=tokenizer.convert_tokens_to_ids(IMAGE), tie_word_embeddings=tied)


def convert_janus(src: "str | Path", out: "str | Path", allow_pickle: bool = False) -> Path:
    """A deepseek Janus / Janus-Pro folder -> a transformers Janus folder at `out` (config, safetensors, generation
    config with deepseek's default sampling, the processor's files) that `JanusImage.from_pretrained` and
    `AutoProcessor.from_pretrained` load."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig, JanusForConditionalGeneration, PreTrainedTokenizerFast

    from mmspec.loading import check_weights

    src, out = Path(src), Path(out)
    check_release(src)
    raw = json.loads((src / "config.json").read_text())
    tokenizer = PreTrainedTokenizerFast.from_pretrained(src, local_files_only=True)  # (its tokenizer.json)
    ids = {name: tokenizer.convert_tokens_to_ids(token)
           for name, token in (("BOI", BOI), ("EOI", EOI), ("image", IMAGE))}
    unknown = [name for name, i in ids.items() if i is None or i == tokenizer.unk_token_id]
    if unknown or tokenizer.pad_token_id is None or tokenizer.bos_token_id is None:
        raise ValueError(f"the tokenizer in {src} lacks Janus's special tokens ({BOI!r}, {EOI!r}, {IMAGE!r}, a pad and "
                         "a BOS token): copy tokenizer.json, tokenizer_config.json and special_tokens_map.json from "
                         "the release")
    original = read_weights(src, allow_pickle)
    config = janus_config(raw, original, tokenizer)
    sd = {k: v.contiguous() for k, v in convert_state_dict(original).items()}
    with torch.device("meta"):  # its names and shapes, without building a model of the release's size
        expected = JanusForConditionalGeneration(config).state_dict()
    check_weights(expected, sd, str(src), optional=frozenset({"lm_head.weight"}) if config.tie_word_embeddings
                  else frozenset())
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    generation = GenerationConfig(bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id, generation_kwargs={"boi_token_id": ids["BOI"]},
                                  guidance_scale=GUIDANCE, temperature=TEMPERATURE)
    generation._from_model_config = False
    generation.save_pretrained(out)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    janus_processor(src, raw, config.vision_config.num_image_tokens).save_pretrained(out)
    return out
