"""Train `code-text` (target) or `code-text-draft` (draft): transformers LlamaForCausalLM on Python stdlib source.

    python models/recipes/train_text.py --model code-text          # ~7M params
    python models/recipes/train_text.py --model code-text-draft    # ~1M params

Data: the running interpreter's standard library (no tests), byte-level BPE (4096 ids, trained by
data.py with `tokenizers`), files joined by <|endoftext|>, ~5% of files held out. Random 256-token
windows. The exported folder is a plain `save_pretrained` folder (config, bf16 safetensors,
generation config) with the PreTrainedTokenizerFast beside it: `AutoModelForCausalLM.from_pretrained`.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import data  # noqa: E402

MODELS = {
    "code-text": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=6, num_attention_heads=8,
                      num_key_value_heads=8, tie_word_embeddings=False),
    "code-text-draft": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, tie_word_embeddings=True),
}
SEQ = 256
DEFAULT_SAMPLING = {"temperature": 0.8, "top_p": 0.95}


def make_model(name: str, vocab_size: int, eos: int):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=vocab_size, max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0,
                      bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, **MODELS[name])
    return LlamaForCausalLM(cfg)


def hf_tokenizer(tok_path: Path):
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_file=str(tok_path), eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token=None,
                                   model_max_length=1024, clean_up_tokenization_spaces=False)


@torch.no_grad()
def heldout_loss(model, test: np.ndarray, device, max_chunks: int | None = None, batch: int = 16) -> float:
    model.eval()
    n = (len(test) - 1) // SEQ
    starts = np.arange(n) * SEQ
    if max_chunks:
        starts = starts[:: max(1, n // max_chunks)][:max_chunks]
    tot, cnt = 0.0, 0
    for i in range(0, len(starts), batch):
        x = torch.from_numpy(np.stack([test[s:s + SEQ + 1] for s in starts[i:i + batch]]).astype(np.int64)).to(device)
        logits = model(x[:, :-1]).logits.float()
        tot += F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="sum").item()
        cnt += x[:, 1:].numel()
    model.train()
    return tot / cnt


@torch.no_grad()
def entropy_heldout(model, test: np.ndarray, device, sampling: dict, max_chunks: int = 64) -> float:
    """Mean entropy (nats) of the processed p (temperature, top-p) at held-out positions, teacher-forced."""
    import mmspec
    s = mmspec.Sampling.coerce(sampling)
    model.eval()
    n = (len(test) - 1) // SEQ
    starts = (np.arange(n) * SEQ)[:: max(1, n // max_chunks)][:max_chunks]
    ents = []
    for i in range(0, len(starts), 16):
        x = torch.from_numpy(np.stack([test[s0:s0 + SEQ] for s0 in starts[i:i + 16]]).astype(np.int64)).to(device)
        lp = s.logp(model(x).logits.float())
        p = lp.exp()
        ents.append(-(p * lp.clamp_min(-1e30)).nan_to_num().sum(-1).flatten())
    return torch.cat(ents).mean().item()


def main():
    p = common.base_parser("code-text", minutes=40, lr=1e-3, batch=16)
    p.add_argument("--model", choices=list(MODELS), default="code-text")
    argv = sys.argv[1:]
    args = p.parse_args(argv)
    if "--out" not in argv:
        args.out = str(common.ROOT / "models" / args.model)
    if "--work" not in argv:
        args.work = str(common.CACHE / "train" / args.model)
    device = common.setup(args)
    d = data.build_text()
    train = np.fromfile(d / "train.bin", dtype=np.uint16)
    test = np.fromfile(d / "test.bin", dtype=np.uint16)
    tok = hf_tokenizer(d / "tokenizer.json")
    eos = tok.eos_token_id
    model = make_model(args.model, len(tok), eos).to(device)
    decay = [p_ for n_, p_ in model.named_parameters() if p_.dim() >= 2]
    no_decay = [p_ for n_, p_ in model.named_parameters() if p_.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    run = common.Run(args, model, opt)
    print(f"{args.model}: {common.count_params(model) / 1e6:.2f}M params, train {len(train)} tokens, "
          f"held out {len(test)}", flush=True)
    rng = np.random.default_rng(args.seed + run.step)
    lr = common.lr_at(args, run.step, run.elapsed)
    model.train()
    while not run.done and not args.export_only:
        run.set_lr(lr)
        starts = rng.integers(0, len(train) - SEQ - 1, size=args.batch)
        x = torch.from_numpy(np.stack([train[s:s + SEQ + 1] for s in starts]).astype(np.int64)).to(device)
        logits = model(x[:, :-1]).logits
        loss = F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
        run.backward_step(loss)
        lr = run.tick()
        if run.step % 10 == 0:
            run.log(loss=round(loss.item(), 4), lr=round(lr, 6))
        if run.step % 250 == 0:
            run.log(heldout_loss=round(heldout_loss(model, test, device, max_chunks=48), 4))
    run.save()
    export(model, tok, test, device, args, run)


def portable_tokenizer_config(out: Path):
    """Name the class PreTrainedTokenizerFast (transformers 5 writes TokenizersBackend, unknown to 4.x)."""
    import json
    p = out / "tokenizer_config.json"
    cfg = json.loads(p.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    p.write_text(json.dumps(cfg, indent=2) + "\n")


def export(model, tok, test, device, args, run):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    loss = heldout_loss(model, test, device)
    gc = model.generation_config
    gc.do_sample, gc.temperature, gc.top_p = True, DEFAULT_SAMPLING["temperature"], DEFAULT_SAMPLING["top_p"]
    gc.eos_token_id = gc.pad_token_id = gc.bos_token_id = tok.eos_token_id
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    portable_tokenizer_config(out)
    from transformers import AutoModelForCausalLM
    m16 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).to(device)
    loss16 = heldout_loss(m16, test, device)
    ent = {f"t{s.get('temperature', 1.0)}_topp{s.get('top_p', 1.0)}": round(entropy_heldout(m16, test, device, s), 3)
           for s in ({"temperature": 1.0}, DEFAULT_SAMPLING)}
    metrics = {"heldout_loss_nats": round(loss, 4), "heldout_loss_nats_bf16": round(loss16, 4),
               "heldout_ppl_bf16": round(math.exp(loss16), 2), "heldout_tokens": int(len(test)),
               "mean_entropy_nats": ent, "default_sampling": DEFAULT_SAMPLING, "steps": run.step,
               "batch": args.batch, "seq": SEQ, "tokens_seen": run.step * args.batch * SEQ,
               "train_minutes": round(run.elapsed / 60, 1), "threads": args.threads, "device": args.device,
               "params": common.count_params(m16), "python": sys.version.split()[0]}
    # a sample, for the card
    torch.manual_seed(0)
    prompt = "def fibonacci(n):\n"
    ids = tok(prompt, return_tensors="pt").input_ids.to(device)
    gen = m16.generate(ids, max_new_tokens=96, do_sample=True, temperature=DEFAULT_SAMPLING["temperature"],
                       top_p=DEFAULT_SAMPLING["top_p"], pad_token_id=tok.eos_token_id)
    (out / "sample.txt").write_text(tok.decode(gen[0]))
    common.write_json(out / "metrics.json", metrics)
    print(metrics, flush=True)


if __name__ == "__main__":
    main()
