"""Output names: derived from the output's content only, and always a plain file name.

The id hashes (kind, model, prompt, seed, settings, and the sha256 of the bytes of its image and mask files),
so the same output keeps its name across runs, batch sizes and backends; the readable slug keeps [a-z0-9-]
from the prompt, so no prompt (path separators, '..', control characters, 10,000 characters, nothing) can lead
a name out of the folder.
"""
from __future__ import annotations

import hashlib
import json
import re

EXTENSIONS = {"image": "png", "video": "gif", "text": "txt"}  # formats whose bytes depend on the pixels / text only
SLUG_CHARS = 40


def output_id(identity: dict) -> str:
    text = json.dumps(identity, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def file_name(prompt: str, seed: int, oid: str, kind: str) -> str:
    slug = "-".join(re.findall(r"[a-z0-9]+", prompt.lower()))[:SLUG_CHARS].strip("-") or kind
    return f"{slug}-s{seed}-{oid}.{EXTENSIONS[kind]}"
