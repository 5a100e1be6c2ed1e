"""Janus in deepseek's released layout: converted, it loads and gives the same logits as the module it was written
from; unconverted, and without a BOI id, it is refused at load with one line."""
import copy
import json
import re

import pytest
import torch
from safetensors.torch import save_file

import mmspec
from mmspec.adapters.janus import JanusImage
from mmspec.adapters.janus_release import convert_janus
from mmspec.cli import main
from mmspec.loading import decode_layout
from tiny import BOI, BOS, PAD, tiny_janus

IMAGE_TOKEN, EOI_TOKEN = 4, 8
# deepseek's module names (MultiModalityCausalLM) for transformers' Janus names, written from deepseek's side
DEEPSEEK_NAMES = [
    (r"^model\.vision_model\.embeddings\.patch_embedding\.", "vision_model.vision_tower.patch_embed.proj."),
    (r"^model\.vision_model\.embeddings\.position_embedding\.weight", "vision_model.vision_tower.pos_embed"),
    (r"^model\.vision_model\.encoder\.layers\.(\d+)\.layer_norm(\d)\.", r"vision_model.vision_tower.blocks.\1.norm\2."),
    (r"^model\.vision_model\.encoder\.layers\.(\d+)\.self_attn\.projection_layer\.",
     r"vision_model.vision_tower.blocks.\1.attn.proj."),
    (r"^model\.vision_model\.encoder\.layers\.(\d+)\.mlp\.", r"vision_model.vision_tower.blocks.\1.mlp."),
    (r"^model\.vision_model\.post_layernorm\.", "vision_model.vision_tower.norm."),
    (r"^model\.aligner\.fc1\.", "aligner.layers.0."), (r"^model\.aligner\.hidden_layers\.0\.", "aligner.layers.2."),
    (r"^model\.generation_aligner\.fc1\.", "gen_aligner.layers.0."),
    (r"^model\.generation_aligner\.hidden_layers\.0\.", "gen_aligner.layers.2."),
    (r"^model\.vqmodel\.(encoder|decoder)\.mid\.block_1\.", r"gen_vision_model.\1.mid.0."),
    (r"^model\.vqmodel\.(encoder|decoder)\.mid\.attn_1\.", r"gen_vision_model.\1.mid.1."),
    (r"^model\.vqmodel\.(encoder|decoder)\.mid\.block_2\.", r"gen_vision_model.\1.mid.2."),
    (r"^model\.vqmodel\.encoder\.down\.(\d+)\.block\.", r"gen_vision_model.encoder.conv_blocks.\1.res."),
    (r"^model\.vqmodel\.decoder\.up\.(\d+)\.block\.", r"gen_vision_model.decoder.conv_blocks.\1.res."),
    (r"^model\.vqmodel\.encoder\.down\.", "gen_vision_model.encoder.conv_blocks."),
    (r"^model\.vqmodel\.decoder\.up\.", "gen_vision_model.decoder.conv_blocks."),
    (r"^model\.vqmodel\.", "gen_vision_model."),
    (r"^model\.generation_head\.proj_out\.", "gen_head.output_mlp_projector."),
    (r"^model\.generation_head\.vision_head\.", "gen_head.vision_head."),
    (r"^model\.generation_embeddings\.", "gen_embed."),
    (r"^model\.language_model\.", "language_model.model."), (r"^lm_head\.", "language_model.lm_head."),
]


def deepseek_state_dict(model) -> dict:
    """The weights of a transformers Janus as deepseek's checkpoint holds them: its own names, the vision tower's
    q, k, v in one qkv, its position table [1, N, D], and the modules transformers drops (attention pooling,
    the codebook usage)."""
    sd, qkv = {}, {}
    for key, value in model.state_dict().items():
        if m := re.match(r"model\.vision_model\.encoder\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(\w+)", key):
            qkv.setdefault((m[1], m[3]), {})[m[2]] = value
            continue
        for pattern, repl in DEEPSEEK_NAMES:
            key = re.sub(pattern, repl, key)
        sd[key] = value.clone()
    for (layer, kind), parts in qkv.items():
        sd[f"vision_model.vision_tower.blocks.{layer}.attn.qkv.{kind}"] = torch.cat([parts[c] for c in "qkv"])
    sd["vision_model.vision_tower.pos_embed"] = sd["vision_model.vision_tower.pos_embed"][None]
    sd["vision_model.vision_tower.attn_pool.latent"] = torch.zeros(1, 1, 32)
    sd["gen_vision_model.quantize.codebook_used"] = torch.zeros(8)
    return sd


def tiny_release(folder, pickle=False):
    """A tiny Janus-Pro in deepseek's layout (config, weights, tokenizer) -> the transformers Janus it was written from."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    model = tiny_janus(n=2, dtype=torch.float32, vision_heads=16)
    model.model.vision_model.config.image_size = 10
    folder.mkdir()
    sd = deepseek_state_dict(model)
    if pickle:
        torch.save(sd, folder / "pytorch_model.bin")
    else:
        save_file(sd, str(folder / "model.safetensors"))
    text = {k: v for k, v in model.config.text_config.to_dict().items()
            if k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "hidden_act")}
    config = {"model_type": "multi_modality", "language_config": text,
              "vision_config": {"cls": "CLIPVisionTower", "params": {"image_size": 10,
                                                                      "model_name": "siglip_large_patch16_384"}},
              "gen_vision_config": {"cls": "VQ-16", "params": {"image_token_size": 12, "n_embed": 12}}}
    (folder / "config.json").write_text(json.dumps(config))
    words = {f"w{i}": i for i in range(99)}
    names = {BOS: "<｜begin▁of▁sentence｜>", PAD: "<｜▁pad▁｜>", BOI: "<begin_of_image>",
             EOI_TOKEN: "<end_of_image>", IMAGE_TOKEN: "<image_placeholder>", 0: "<｜end▁of▁sentence｜>",
             6: "<|User|>:", 7: "<|Assistant|>:"}
    vocab = {names.get(i, w): i for w, i in words.items()}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="w5"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, bos_token=names[BOS], eos_token=names[0],
                                  pad_token=names[PAD], unk_token="w5",
                                  additional_special_tokens=[names[BOI], names[EOI_TOKEN], names[IMAGE_TOKEN]])
    tok.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(  # deepseek's fields (VLMImageProcessor)
        {"image_processor_type": "VLMImageProcessor", "image_size": 10, "image_mean": [0.5] * 3,
         "image_std": [0.5] * 3, "min_size": 4, "rescale_factor": 1 / 255, "do_normalize": True}))
    return model


def generation_logits(model, prompt, tokens):
    """The generation head's logits [1, T, V] after a prompt and image tokens, teacher-forced."""
    with torch.no_grad():
        h = torch.cat([model.get_input_embeddings()(torch.tensor([prompt])),
                       model.prepare_embeddings_for_image_generation(torch.tensor([tokens]))], 1)
        return model.model.generation_head(model.model.language_model(inputs_embeds=h).last_hidden_state)


@pytest.mark.parametrize("pickle", [False, True])
def test_converted_release_gives_the_original_logits(tmp_path, pickle):
    original = tiny_release(tmp_path / "release", pickle)
    with pytest.raises(ValueError, match="mmspec convert janus"):
        JanusImage.from_pretrained(tmp_path / "release")
    if pickle:
        with pytest.raises(ValueError, match="allow-pickle"):
            convert_janus(tmp_path / "release", tmp_path / "out")
    convert_janus(tmp_path / "release", tmp_path / "out", allow_pickle=pickle)
    target = JanusImage.from_pretrained(tmp_path / "out")
    assert (target.bos_token_id, target.pad_token_id, target.boi_token_id) == (BOS, PAD, BOI)
    assert target.model.config.image_token_id == IMAGE_TOKEN
    converted = target.model.state_dict()
    assert all(torch.equal(converted[k], v) for k, v in original.state_dict().items())
    prompt, tokens = [BOS, 10, 11, BOI], [3, 7, 1]
    # the same weights laid out for decoding as a loaded model's are (mmspec.loading.decode_layout): the same bits
    laid_out = decode_layout(copy.deepcopy(original))
    assert torch.equal(generation_logits(target.model, prompt, tokens), generation_logits(laid_out, prompt, tokens))
    greedy = {"temperature": 0, "cfg_scale": 5.0}
    assert torch.equal(mmspec.generate(target, [prompt], target.layout(), sampling=greedy).tokens,
                       mmspec.generate(JanusImage(original), [prompt], target.layout(), sampling=greedy).tokens)
    torch.testing.assert_close(target.decode(torch.tensor([tokens + [0]])),
                               JanusImage(original).decode(torch.tensor([tokens + [0]])), atol=0, rtol=0)


def test_cli_converts_and_refuses_with_one_line(tmp_path, capsys):
    tiny_release(tmp_path / "release", pickle=True)
    assert main(["convert", "janus", str(tmp_path / "release"), str(tmp_path / "out")]) == 2
    assert "--allow-pickle" in capsys.readouterr().err
    assert main(["convert", "janus", str(tmp_path / "release"), str(tmp_path / "out"), "--allow-pickle"]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert main(["generate", "image", "a cat", "--model", str(tmp_path / "release"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "mmspec convert janus" in err and len(err.splitlines()) == 1


def test_boi_dropped_with_a_model_config_generation_config(tmp_path):
    """transformers drops generation_kwargs from a generation config marked `_from_model_config`: the BOI id comes
    from the file; a folder without one fails at load, not at the first CFG call."""
    model = tiny_janus(n=2, dtype=torch.float32)
    model.save_pretrained(tmp_path / "janus")
    file = tmp_path / "janus" / "generation_config.json"
    saved = json.loads(file.read_text())
    assert saved["_from_model_config"] and saved["generation_kwargs"] == {"boi_token_id": BOI}
    assert JanusImage.from_pretrained(tmp_path / "janus").boi_token_id == BOI
    file.write_text(json.dumps({k: v for k, v in saved.items() if k != "generation_kwargs"}))
    with pytest.raises(ValueError, match="BOI token id"):
        JanusImage.from_pretrained(tmp_path / "janus")


@pytest.mark.parametrize("missing, said", [("tokenizer.json", "no tokenizer.json"),
                                           ("model.safetensors", "neither *.safetensors nor pytorch_model*.bin")])
def test_a_release_without_its_tokenizer_or_weights_gets_one_line(tmp_path, capsys, missing, said):
    tiny_release(tmp_path / "release")
    (tmp_path / "release" / missing).unlink()
    assert main(["convert", "janus", str(tmp_path / "release"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_the_converted_folder_loads_with_autoprocessor_and_writes_deepseeks_prompt(tmp_path):
    """AutoProcessor on the converted folder: its chat template and generation_mode="image" give the prompt deepseek's
    generation_inference.py builds ("<|User|>: text\n\n<|Assistant|>:" then BOI), and the same ids; its image
    processor has the release's size."""
    from transformers import AutoProcessor, JanusProcessor, PreTrainedTokenizerFast

    tiny_release(tmp_path / "release")
    convert_janus(tmp_path / "release", tmp_path / "out")
    proc = AutoProcessor.from_pretrained(tmp_path / "out")
    assert isinstance(proc, JanusProcessor) and proc.image_processor.size == {"height": 10, "width": 10}
    prompt = proc.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": "w10 w11"}]}],
                                      add_generation_prompt=True)
    deepseek = "<|User|>: w10 w11\n\n<|Assistant|>:" + "<begin_of_image>"  # sft_format + image_start_tag
    assert prompt + proc.image_start_token == deepseek
    ids = proc(text=prompt, generation_mode="image", return_tensors="pt").input_ids
    release = PreTrainedTokenizerFast.from_pretrained(tmp_path / "release")
    assert ids[0].tolist() == release.encode(deepseek) and ids[0, -1] == BOI


def deepseek_sft_prompt(text: str) -> str:
    """deepseek's image prompt, restated from its code: `apply_sft_template_for_multi_turn_prompts` on
    [{<|User|>: text}, {<|Assistant|>: ""}] (conversation.py's "deepseek" template: each message stripped, "role: message" + "\n\n" for a
    message, "role:" for an empty one), then `image_start_tag`."""
    text = text.strip()
    return (f"<|User|>: {text}\n\n" if text else "<|User|>:") + "<|Assistant|>:" + "<begin_of_image>"


@pytest.mark.parametrize("text", ["w10 w11", "  w10\nw11 \t", "{{ w10 }} {% w11 %}", "w10\n\n<|Assistant|>: w11"])
def test_the_pipelines_prompt_is_the_converted_folders_chat_template(tmp_path, text):
    """One statement of deepseek's turn, CHAT_TEMPLATE: the prompt JanusPipeline writes (`generation_prompt`) is the
    converted folder's chat template rendered by AutoProcessor, and deepseek's own rule, for any text; the same ids."""
    from transformers import AutoProcessor

    from mmspec.adapters.janus_release import generation_prompt
    from mmspec.pipelines import ImagePipeline

    tiny_release(tmp_path / "release")
    convert_janus(tmp_path / "release", tmp_path / "out")
    proc = AutoProcessor.from_pretrained(tmp_path / "out")
    rendered = proc.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": text}]}],
                                        add_generation_prompt=True) + proc.image_start_token
    assert generation_prompt(text) == rendered == deepseek_sft_prompt(text)
    pipe = ImagePipeline.from_pretrained(tmp_path / "out", window_cache="off")
    ids = proc(text=rendered[:-len(proc.image_start_token)], generation_mode="image", return_tensors="pt").input_ids
    assert pipe.condition([text]) == ids.tolist()
