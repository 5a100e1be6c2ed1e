"""Emu3's prompt as transformers' `Emu3Processor` writes it: a processor built here, offline, on the tiny folder's
tokenizer, gives the very ids Emu3Pipeline conditions on, for the image prompt and the negative prompt."""
import pytest

from mmspec.pipelines import ImagePipeline
from mmspec.pipelines.emu3 import NEGATIVE_PROMPT
from tiny import tiny_emu3_folder

BUILD = tiny_emu3_folder  # the tiny folder of conftest.py's `folder`

# what Emu3-Gen-hf's tokenizer names (its tokenizer_config.json's extra special tokens), for Emu3Processor
SPECIAL = {"image_token": "<image>", "boi_token": "<|image start|>", "eoi_token": "<|image end|>",
           "image_wrapper_token": "<|image token|>", "eof_token": "<|extra_201|>"}


def emu3_processor(folder):
    from transformers import Emu3ImageProcessor, Emu3Processor, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, local_files_only=True, extra_special_tokens=SPECIAL)
    return Emu3Processor(image_processor=Emu3ImageProcessor(), tokenizer=tokenizer)


@pytest.mark.parametrize("text", ["a red cat", "a dog at dusk", " a  cat "])
def test_the_prompt_is_the_one_emu3processor_builds(folder, text):
    """`processor(text, return_for_image_generation=True)` at the image area of the pipeline's grid (the processor
    counts 8 pixels a token, Emu3's VQ-VAE; the tiny one has 4, so the area is the grid's at 8) and `processor(text=
    negative prompt)` as the Emu3 docs build CFG's null condition: the pipeline's ids, equal."""
    pipe = ImagePipeline.from_pretrained(folder, window_cache="off")
    processor = emu3_processor(folder)
    h, w = pipe.layout.h, pipe.layout.w
    assert (h, w) == (3, 3)
    condition = pipe.condition([text])
    made = processor(text=[text], return_for_image_generation=True, image_area=h * 8 * w * 8, return_tensors="pt")
    assert made["image_sizes"] == [[h, w]] and condition["prompt"] == made.input_ids.tolist()
    negative = processor(text=[NEGATIVE_PROMPT], return_tensors="pt").input_ids
    assert condition["negative_prompt"] == negative.tolist()
