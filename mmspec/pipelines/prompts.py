"""Prompt words for the bundled emoji models: lowercase letters/digits, a few stop words dropped,
ids from the model's vocab.json (0 = padding and the null condition, 1 = unknown word).

The training recipes (models/recipes) import these same functions, so training and generation
cannot encode a prompt differently."""
from __future__ import annotations

import re

STOPWORDS = {"and", "of", "with", "the", "a", "an", "in", "on", "for", "to"}
PAD, UNKNOWN = 0, 1  # ids of the two reserved words at the head of every vocab.json
PAD_WORD, UNKNOWN_WORD = "<pad>", "<unk>"


def words(text: str) -> list[str]:
    """Lowercase word tokens: letters and digits; underscores, colons, '&' and punctuation split."""
    return [w for w in re.findall(r"[a-z0-9]+", text.lower().replace("'", "")) if w not in STOPWORDS]


def encode_prompt(text_or_words, vocab: "list[str] | dict[str, int]", cond_len: int) -> list[int]:
    index = vocab if isinstance(vocab, dict) else {w: i for i, w in enumerate(vocab)}
    ws = words(text_or_words) if isinstance(text_or_words, str) else list(text_or_words)
    ids = [index.get(w, UNKNOWN) for w in ws][:cond_len]
    return ids + [PAD] * (cond_len - len(ids))


def unknown_words(text: str, vocab: "list[str] | dict[str, int]") -> list[str]:
    """The words of a prompt that the vocabulary lacks (encode_prompt gives them the unknown id)."""
    known = vocab if isinstance(vocab, dict) else set(vocab)
    return [w for w in words(text) if w not in known]


def unreadable(text: str) -> list[str]:
    """The runs of a prompt outside ASCII (another script, emoji...), which `words` drops: the model never sees them."""
    return re.findall(r"[^\x00-\x7f]+", text)


def shorten(text: str, limit: int = 40) -> str:
    """`text` cut to `limit` characters for a message, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def listing(items: list[str], limit: int = 8) -> str:
    """At most `limit` items, each shortened and quoted, then how many more there were."""
    shown = ", ".join(repr(shorten(item)) for item in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def check_prompt(prompt) -> None:
    """A text prompt must say something: an empty one is refused (a picture of nothing in particular is no answer to
    a typo), as the demo does."""
    if isinstance(prompt, str) and not prompt.strip():
        raise ValueError("the prompt is empty: say what to generate")
