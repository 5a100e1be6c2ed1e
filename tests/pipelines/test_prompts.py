"""What an emoji model cannot take in from a prompt is said in one warning, short enough to read."""
import warnings

import pytest

from mmspec.pipelines import ImagePipeline, TextPipeline
from mmspec.pipelines.prompts import listing, shorten, unreadable


def _warning(pipe, prompt) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe(prompt, method="ar")
    assert len(caught) == 1, [str(w.message) for w in caught]
    return str(caught[0].message)


@pytest.fixture
def pipe(tiny_models):
    return ImagePipeline.from_pretrained(tiny_models / "image", window_cache="off")


@pytest.mark.parametrize("prompt, named", [("красное сердце", "'красное', 'сердце'"), ("赤いハート", "'赤いハート'"),
                                           ("red ❤️ heart", "'❤️'")])
def test_words_in_another_script_or_emoji_are_named(pipe, prompt, named):
    message = _warning(pipe, prompt)
    assert f"cannot read {named} (it reads only ASCII letters and digits: dropped)" in message


def test_a_huge_unknown_word_is_named_short_and_a_long_prompt_says_what_was_kept(pipe):
    message = _warning(pipe, "x" * 20000)
    assert len(message) < 300 and "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (19960 more characters)'" in message
    long = " ".join(["red", "heart"] * 5000)
    message = _warning(pipe, long)  # (cond_len 4 words)
    assert len(message) < 400 and "reads 4 words of a prompt: it kept 'red heart red heart' of" in message
    assert "(9996 words dropped)" in message


def test_each_word_and_prompt_is_warned_about_once(pipe):
    _warning(pipe, "purple котик")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe("red heart purple котик", method="ar")


def test_an_empty_prompt_is_refused_by_every_pipeline(pipe, tiny_text):
    text = TextPipeline.from_pretrained(tiny_text / "target", window_cache="off")
    for p, prompt in ((pipe, ""), (pipe, ["red heart", "  "]), (text, "\n")):
        with pytest.raises(ValueError, match="the prompt is empty"):
            p(prompt, method="ar")


def test_text_models_keep_their_tokenizer_s_behaviour(tiny_text):
    text = TextPipeline.from_pretrained(tiny_text / "target", window_cache="off")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text("<s> w3 котик", method="ar", max_new_tokens=2)


def test_listing_and_shorten():
    assert shorten("abc", 5) == "abc" and shorten("abcdefg", 5) == "abcde... (2 more characters)"
    assert listing([str(i) for i in range(10)], 3) == "'0', '1', '2' and 7 more"
    assert unreadable("a 😀b ü") == ["😀", "ü"]
