"""Tiny seeded components for the tests: a tabular target, tiny GPTs, and an exact reference law."""
from __future__ import annotations

import itertools
import math

import torch

import mmspec
from mmspec.adapters.base import repeat_condition, window_index


class TabularTarget:
    """Every prefix has its own random logit vector, per condition and for the null condition: the
    sharpest instrument for lossless tests, since any context change really changes p."""

    def __init__(self, vocab_size: int, length: int, num_conditions: int = 2, scale: float = 1.0,
                 seed: int = 0, null: bool = True):
        g = torch.Generator().manual_seed(seed)
        self.vocab_size, self.length, self.null = vocab_size, length, null
        self.num_conditions = num_conditions
        self.table = torch.randn(num_conditions + null, (vocab_size + 1) ** length, vocab_size, generator=g,
                                 dtype=torch.float64) * scale

    def code(self, prefix: torch.Tensor) -> torch.Tensor:
        """[..., t] tokens -> [...] prefix ids, unique per (length, tokens)."""
        weights = (self.vocab_size + 1) ** torch.arange(prefix.shape[-1])
        return ((prefix + 1) * weights).sum(-1)

    def logits(self, cond: int, prefix: tuple[int, ...]) -> torch.Tensor:
        return self.table[cond, int(self.code(torch.tensor(prefix, dtype=torch.long)))]

    def session(self, condition, layout, *, cfg, num_samples=1, max_window=1):
        if cfg and not self.null:
            raise ValueError("this target has no null condition, so it cannot run CFG")
        if layout.length != self.length:
            raise ValueError(f"layout has {layout.length} tokens, the table covers {self.length}")
        return _TabularSession(self, repeat_condition(torch.as_tensor(condition), num_samples), cfg, max_window)


class _TabularSession:
    def __init__(self, target, cond, cfg, max_window):
        self.t, self.cond, self.cfg = target, cond, cfg
        self.batch_size, self.vocab_size, self.device, self.prompt = len(cond), target.vocab_size, "cpu", None
        self.draft_vocab = None
        self.buf = torch.zeros(len(cond), target.length + max_window + 1, dtype=torch.long)  # token at index i -> i+1

    def forward(self, tokens, start, tree=None):
        W, N, V = tokens.shape[1], self.t.length, self.vocab_size
        chain = W if tree is None else tree.chain
        self.buf.scatter_(1, window_index(start, chain) + 1, tokens[:, :chain].clamp(min=0))
        self._last = tokens, start
        offset = torch.arange(W) if tree is None else tree.offset
        visible = torch.ones(W, W, dtype=torch.bool).tril() if tree is None else tree.visible  # [W, W]
        index = start[:, None] + offset  # [B, W]
        weights = (V + 1) ** torch.arange(N)
        terms = (self.buf[:, 1:N + 1] + 1) * weights  # prefix of length m = indices 0..m-1
        codes = torch.cat([torch.zeros(len(terms), 1, dtype=torch.long), terms.cumsum(1)], 1)  # [B, N+1]
        before = codes.gather(1, start.clamp(0, N)[:, None])  # [B, 1] indices before the window's first node
        # node w sees the nodes visible to it at their own indices (index -1, the condition, adds nothing)
        own = torch.where((index >= 0) & (index < N), (tokens.clamp(min=0) + 1) * weights[index.clamp(0, N - 1)], 0)
        q_codes = (before + (visible[None] * own[:, None, :]).sum(-1)).clamp(max=self.t.table.shape[1] - 1)
        logits = self.t.table[self.cond[:, None], q_codes]
        null = self.t.table[self.t.num_conditions, q_codes] if self.cfg else None
        return logits, null

    def buffers(self):
        return [self.buf]

    def adopt(self, nodes):
        tokens, start = self._last
        index = start[:, None] + 1 + torch.arange(nodes.shape[1])
        ok = index < self.buf.shape[1] - 1
        self.buf.scatter_(1, (index + 1).clamp(max=self.buf.shape[1] - 1),
                          torch.where(ok, tokens.gather(1, nodes).clamp(min=0), self.buf.gather(1, (index + 1).clamp(max=self.buf.shape[1] - 1))))


def tiny_gpt(vocab_size=16, rope_axes=2, num_classes=4, seed=0, dim=24, n_layer=2, dtype=torch.float64,
             block_size=64, **kw) -> mmspec.GPT:
    torch.manual_seed(seed)
    cfg = mmspec.GPTConfig(vocab_size=vocab_size, dim=dim, n_layer=n_layer, n_head=2, multiple_of=16,
                           rope_axes=rope_axes, block_size=block_size, num_classes=num_classes, **kw)
    model = mmspec.GPT(cfg).to(dtype)
    with torch.no_grad():  # larger than default init so p is far from uniform and context matters
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5)
    return model.eval()


def reference_p(cond: torch.Tensor, uncond: torch.Tensor | None, s: mmspec.Sampling) -> torch.Tensor:
    """Plain, independent re-statement of the processing rule, in float64."""
    z = cond.double()
    if s.cfg_scale != 1.0:
        u = uncond.double()
        if s.cfg_mode == "log_softmax":
            z, u = torch.log_softmax(z, -1), torch.log_softmax(u, -1)
        z = u + s.cfg_scale * (z - u)
    if s.temperature == 0:
        return torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).double()
    z = z / s.temperature
    order = torch.argsort(z, descending=True).tolist()
    if s.top_k is not None:
        z = z.clone()
        z[order[s.top_k:]] = -torch.inf
    if s.top_p is not None:
        probs, mass = torch.softmax(z, -1), 0.0
        for v in order:
            if mass >= s.top_p:
                z[v] = -torch.inf
            mass += probs[v].item()
    return torch.softmax(z, -1)


def tabular_law(target: TabularTarget, cond: int, s: mmspec.Sampling, given: dict | None = None) -> torch.Tensor:
    """Exact law over all V^N sequences (index = sum x_i V^i), prefix by prefix; positions in `given`
    ({index: token}) hold their token instead of a draw."""
    V, N = target.vocab_size, target.length
    law = torch.zeros(V ** N, dtype=torch.float64)
    for seq in itertools.product(range(V), repeat=N):
        prob = 1.0
        for i in range(N):
            if given and i in given:
                prob *= float(seq[i] == given[i])
                continue
            c = target.logits(cond, seq[:i])
            u = target.logits(target.num_conditions, seq[:i]) if target.null else None
            prob *= reference_p(c, u, s)[seq[i]].item()
        law[sequence_id(torch.tensor(seq), V)] = prob
    return law


def gpt_law(model: mmspec.GPT, cond: int, layout, s: mmspec.Sampling, given: dict | None = None) -> torch.Tensor:
    """Exact law over all V^N sequences of a tiny GPT, from teacher-forced passes over every sequence; positions in
    `given` ({index: token}) hold their token instead of a draw."""
    V, N = model.config.vocab_size, layout.length
    seqs = torch.tensor(list(itertools.product(range(V), repeat=N)))  # [V^N, N]
    pos = layout.positions()
    with torch.no_grad():
        c = model.forward_sequence(torch.full((len(seqs),), cond), seqs, pos)
        u = model.forward_sequence(model.null_condition(len(seqs)), seqs, pos)
    return teacher_forced_law(seqs, V, c, u, s, given)


def teacher_forced_law(seqs, V: int, cond, uncond, s: mmspec.Sampling, given: dict | None) -> torch.Tensor:
    """All V^N sequences seqs [V^N, N] and the logits [V^N, N, V] predicting each of their tokens (and the null
    condition's, or None) -> the law of AR sampling with `s`, positions in `given` holding their token."""
    law = torch.zeros(V ** seqs.shape[1], dtype=torch.float64)
    for row, seq in enumerate(seqs):
        prob = 1.0
        for i in range(seqs.shape[1]):
            if given and i in given:
                prob *= float(seq[i] == given[i])
            else:
                prob *= reference_p(cond[row, i], None if uncond is None else uncond[row, i], s)[seq[i]].item()
        law[sequence_id(seq, V)] = prob
    return law


def llama_law(model, prompt: list[int], length: int, s: mmspec.Sampling) -> torch.Tensor:
    """Exact law over all V^N continuations of `prompt` by a transformers causal LM, from teacher-forced passes."""
    V = model.config.vocab_size
    seqs = torch.tensor(list(itertools.product(range(V), repeat=length)))  # [V^N, N]
    with torch.no_grad():
        logits = model(torch.cat([torch.tensor(prompt).expand(len(seqs), -1), seqs[:, :-1]], 1)).logits
    logits = logits[:, len(prompt) - 1:]  # [V^N, N, V]: the logits for each generated index
    law = torch.zeros(V ** length, dtype=torch.float64)
    for row, seq in enumerate(seqs):
        law[sequence_id(seq, V)] = torch.prod(torch.stack([reference_p(logits[row, i], None, s)[seq[i]]
                                                           for i in range(length)]))
    return law


def sequence_id(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[..., N] -> [...] cell index sum x_i V^i."""
    return (tokens * vocab_size ** torch.arange(tokens.shape[-1])).sum(-1)


def chi_square_pvalue(samples: torch.Tensor, law: torch.Tensor) -> float:
    """Pearson chi-square of sample cells against an exact law; cells expected < 5 are pooled."""
    n = len(samples)
    observed = torch.bincount(samples, minlength=len(law)).double()
    expected = law * n
    small = expected < 5
    obs = torch.cat([observed[~small], observed[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    if (observed[law == 0] > 0).any():
        return 0.0  # a sequence of probability zero was produced
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    dof = len(obs) - 1
    return torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), stat / 2).item()


def tiny_llama(vocab=40, layers=2, hidden=32, seed=0, dtype=torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=1, eos_token_id=None, pad_token_id=0)
    return spread_weights(LlamaForCausalLM(cfg).to(dtype).eval())


BOS, PAD, BOI = 2, 1, 3  # tiny_janus's special ids


def tiny_janus(n=4, codes=12, layers=2, seed=0, dtype=torch.float64, vision_heads=4):
    """A random Janus whose image tokens form an n x n grid over `codes` VQ codes (smoke/tiny_janus.py)."""
    from transformers import JanusConfig, JanusForConditionalGeneration

    torch.manual_seed(seed)
    text = dict(model_type="llama", vocab_size=99, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                intermediate_size=37, max_position_embeddings=512, pad_token_id=PAD)
    vision = dict(image_size=5 * n, patch_size=5, num_image_tokens=n * n, hidden_size=32, projection_dim=32,
                  num_hidden_layers=1, num_attention_heads=vision_heads, mlp_ratio=2)
    vq = dict(embed_dim=12, num_embeddings=codes, latent_channels=12, base_channels=32, channel_multiplier=[1, 1],
              projection_dim=32, image_token_embed_dim=32)
    model = JanusForConditionalGeneration(JanusConfig(text_config=text, vision_config=vision, vq_config=vq,
                                                      image_token_id=0)).to(dtype).eval()
    spread_weights(model, skip=("model.vqmodel", "model.vision_model"))
    model.generation_config.bos_token_id = BOS
    model.generation_config.pad_token_id = PAD
    model.generation_config.generation_kwargs = {"boi_token_id": BOI}
    return model


def deepseek_greedy(model, prompt: list[int], scale: float, n: int) -> torch.Tensor:
    """deepseek's `generate` (generation_inference.py), restated with argmax for the draw and without a KV cache: the
    unconditional row is the prompt with tokens[1:-1] padded, image tokens embedded by the generation embedding, logits
    from the generation head, mixed u + s (c - u) -> [1, n * n]."""
    rows = torch.tensor([prompt, [prompt[0]] + [PAD] * (len(prompt) - 2) + [prompt[-1]]])
    embeds = model.get_input_embeddings()(rows)
    out = []
    with torch.no_grad():
        for _ in range(n * n):
            h = model.model.language_model(inputs_embeds=embeds).last_hidden_state
            logits = model.model.generation_head(h[:, -1])
            token = (logits[1] + scale * (logits[0] - logits[1])).argmax()
            out.append(int(token))
            embeds = torch.cat([embeds, model.prepare_embeddings_for_image_generation(token.expand(2, 1))], 1)
    return torch.tensor([out])


E_V, E_START = 99, 30  # tiny_emu3's text vocabulary; visual token of code c is E_START + c
E_PAD, E_BOS, E_EOS, E_IMAGE, E_EOL, E_EOF, E_EOI, E_BOI, E_WRAP = 0, 1, 2, 3, 4, 5, 6, 7, 8
E_H, E_W = 2, 3


def tiny_emu3(codes=20, layers=2, seed=0, dtype=torch.float64, names=True, vocab_size=E_V, start=E_START):
    """A random Emu3 with a clean vocabulary map (smoke/tiny_emu3.py): visual tokens start.., EOL, EOF, EOI named."""
    from transformers import Emu3Config, Emu3ForConditionalGeneration, Emu3TextConfig

    torch.manual_seed(seed)
    vocab = {f"<tok{i}>": i for i in range(vocab_size)}
    special = {f"<|visual token{c:06d}|>": start + c for c in range(codes)}
    special |= {"<image>": E_IMAGE, "<|extra_200|>": E_EOL}
    if names:
        special |= {"<|extra_201|>": E_EOF, "<|image end|>": E_EOI}
    for name, i in special.items():
        vocab.pop(f"<tok{i}>")
        vocab[name] = i
    text = Emu3TextConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                          num_key_value_heads=2, intermediate_size=37, max_position_embeddings=512, pad_token_id=E_PAD,
                          bos_token_id=E_BOS, eos_token_id=E_EOS)
    vq = dict(codebook_size=codes, temporal_downsample_factor=1, base_channels=32, channel_multiplier=[1, 2, 1],
              hidden_size=32, attn_resolutions=[])
    model = Emu3ForConditionalGeneration(Emu3Config(text_config=text, vq_config=vq, vocabulary_map=vocab))
    model = model.to(dtype).eval()
    return spread_weights(model, skip=("model.vqmodel",))


def emu3_allowed_tokens(model, h, w):
    """The prefix_allowed_tokens_fn of the transformers Emu3 docs."""
    visual = model.vocabulary_mapping.image_tokens

    def allowed(batch_id, input_ids):
        offset = input_ids.shape[0] - torch.nonzero(input_ids == E_WRAP, as_tuple=True)[0][0]
        if offset % (w + 1) == 0:
            return [E_EOL]
        end = (w + 1) * h
        return {end + 1: [E_EOF], end + 2: [E_EOI], end + 3: [E_EOS]}.get(int(offset),
                                                                   [E_PAD] if offset > end + 3 else visual)
    return allowed


PROMPT_WORDS = ["a", "red", "cat", "dog", "green", "lighthouse", "at", "dusk"]  # what the folders' tokenizers know


def save_word_tokenizer(path, names: dict, special: list, unk: str, bos: str, add_bos: bool, **tokens) -> None:
    """A word-level tokenizer over {id: name} into `path` (tokenizer.json, tokenizer_config.json): `special` split out
    before the whitespace split, BOS prepended to every text with `add_bos` (as Llama's tokenizers do, and not
    GPT-2's), `tokens` (pad, eos...) named in its config."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({name: i for i, name in names.items()}, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if add_bos:
        bos_id = next(i for i, name in names.items() if name == bos)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, bos_id)])
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=unk, bos_token=bos, additional_special_tokens=special,
                            **tokens).save_pretrained(path)


def tiny_janus_folder(path, n=2):
    """A Janus folder in transformers' layout, as `mmspec convert janus` writes one: tiny_janus (fp32, n x n
    tokens), its generation config with the BOI id, and a word-level tokenizer that adds BOS and knows deepseek's
    turn (<|User|>, <|Assistant|>, <begin_of_image>) and PROMPT_WORDS."""
    import json

    path.mkdir(parents=True, exist_ok=True)
    model = tiny_janus(n=n, dtype=torch.float32)
    model.save_pretrained(path)
    generation = path / "generation_config.json"  # (kept whole on loading, BOI id included, as convert janus has it)
    generation.write_text(json.dumps({**json.loads(generation.read_text()), "_from_model_config": False}))
    names = {0: "<eos>", PAD: "<pad>", BOS: "<bos>", BOI: "<begin_of_image>", 4: "<|User|>", 5: "<|Assistant|>",
             6: ":", 7: "<unk>"} | {8 + i: w for i, w in enumerate(PROMPT_WORDS)}
    names |= {i: f"w{i}" for i in range(99) if i not in names}
    save_word_tokenizer(path, names, ["<begin_of_image>", "<|User|>", "<|Assistant|>"], "<unk>", "<bos>", True,
                        pad_token="<pad>", eos_token="<eos>")
    return model


def tiny_emu3_folder(path, image_size=12):
    """An Emu3 folder (transformers' layout): tiny_emu3 (fp32; a VQ-VAE of 4 pixels a token, so image_size 12 is
    3 x 3 tokens; not 2 x 2, where the docs' prefix_allowed_tokens_fn, emu3_allowed_tokens, forces a row end in EOS's
    place) with config.json's image_size, and a word-level tokenizer that knows Emu3's image prompt tokens, its grid
    size and PROMPT_WORDS."""
    import json

    path.mkdir(parents=True, exist_ok=True)
    model = tiny_emu3(dtype=torch.float32)
    model.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "image_size": image_size}))
    side = image_size // 4
    names = {E_PAD: "<pad>", E_BOS: "<|extra_203|>", E_EOS: "<|extra_204|>", E_BOI: "<|image start|>",
             E_WRAP: "<|image token|>", 9: "<unk>", 10: f"{side}*{side}"} | {11 + i: w for i, w in enumerate(PROMPT_WORDS)}
    names |= {i: f"<tok{i}>" for i in range(E_V) if i not in names}
    save_word_tokenizer(path, names, ["<|image start|>", "<|image token|>"], "<unk>", "<|extra_203|>", False,
                        pad_token="<pad>", eos_token="<|extra_204|>")
    return model


def tiny_head(vocab: int, dim: int, layers=(0, 1, 2), rope_axes: int = 1, seed: int = 0, dtype=torch.float32, **kw):
    """A random EAGLE-3 head over a target of width `dim` reading its layers `layers` (hidden_states[i]), embedding
    tokens with the target's embedding; its weights spread as the targets' are: q neither matches p nor misses it,
    so a test sees accepts and rejects."""
    from mmspec.reference.eagle import EagleHead, HeadConfig

    torch.manual_seed(seed)
    cfg = HeadConfig(hidden_size=dim, num_attention_heads=2, intermediate_size=2 * dim, vocab_size=vocab,
                     target_hidden_size=dim, target_layers=layers, rope_axes=rope_axes, **kw)
    return spread_weights(EagleHead(cfg)).to(dtype).eval()


def spread_weights(model, skip: tuple = ()):
    """Larger than default init, so p is far from uniform and context matters; `skip`: name prefixes left alone."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1 and not name.startswith(skip):
                p.normal_(0, 0.3)
    return model


def left_pad(rows: list, pad: int) -> tuple:
    """Ragged id lists -> (ids [B, W] left-padded with `pad`, attention mask [B, W]), as transformers expects."""
    width = max(map(len, rows))
    return (torch.tensor([[pad] * (width - len(r)) + r for r in rows]),
            torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows]))


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>"] + [f"w{i}" for i in range(37)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


class CycleWindow:
    """A window policy that changes L at every step (for lossless tests of changing windows)."""

    in_step = False

    def __init__(self, sizes):
        self.sizes, self.max_window = list(sizes), max(sizes)

    def start(self, session, state):
        pass

    def __call__(self, state):
        return self.sizes[state.step % len(self.sizes)]

    def observe(self, state, k, seconds):
        pass


def tiny_cosmos(video2world: bool = False, vocab: int = 8, latent_shape=(3, 2, 2), seed: int = 0, dim: int = 24,
                dtype=torch.float64, spread: float = 0.4, **kw):
    """A random Cosmos-1 AR transformer: 2 layers, grouped-query attention with q/k norms, 3D RoPE; Video2World adds
    cross-attention to 12-wide features, the absolute embedding before every layer and <bov> = vocab."""
    from mmspec.reference.cosmos import Cosmos, CosmosConfig

    torch.manual_seed(seed)
    extra = dict(insert_cross_attn=True, context_dim=12, apply_abs_pos_emb=True, bov_token=vocab,
                 embedding_size=vocab + 8) if video2world else {}
    cfg = CosmosConfig(vocab_size=vocab, dim=dim, n_layers=2, n_heads=2, n_kv_heads=1, ffn_hidden_size=40,
                       rope_theta=100.0, latent_shape=list(latent_shape), **{**extra, **kw})
    model = Cosmos(cfg)
    with torch.no_grad():  # norms too: q/k norms at 1 would hide a wrong head split
        for p in model.parameters():
            p.normal_(1.0 if p.dim() == 1 else 0.0, 0.1 if p.dim() == 1 else spread)
    return model.to(dtype).eval()


def cosmos_law(model, s: mmspec.Sampling, given: dict | None = None, context=None, mask=None) -> torch.Tensor:
    """Exact law over all V^N grids of a tiny Cosmos, from teacher-forced passes (`forward_sequence`); positions in
    `given` ({index: token}) hold their token instead of a draw (a base model's token 0 must be given)."""
    V, N = model.config.vocab_size, model.layout.length
    seqs = torch.tensor(list(itertools.product(range(V), repeat=N)))  # [V^N, N]
    ctx = None if context is None else context.expand(len(seqs), -1, -1)
    with torch.no_grad():
        logits = model.forward_sequence(seqs, ctx, None if mask is None else mask.expand(len(seqs), -1))
    return teacher_forced_law(seqs, V, logits, None, s, given)


class TinyVideoEncoder(torch.nn.Module):
    """A discrete video tokenizer's encoder in miniature, for TorchScript: frame 0 alone, then `tc` frames per latent
    frame, 8x8 patches; a latent cell's code is the sign of each channel's mean (8 codes)."""

    def __init__(self, tc: int = 3, s: int = 8):
        super().__init__()
        self.tc, self.s = tc, s

    def forward(self, x: torch.Tensor):  # [B, 3, F, H, W] in [-1, 1]
        B, C, F, H, W = x.shape
        rest = x[:, :, 1:].reshape(B, C, (F - 1) // self.tc, self.tc, H, W).mean(3)
        lat = torch.nn.functional.avg_pool3d(torch.cat([x[:, :, :1], rest], 2), (1, self.s, self.s))
        code = (lat > 0).long()  # [B, 3, t, h, w]
        return code[:, 0] + 2 * code[:, 1] + 4 * code[:, 2], lat, lat.mean()


class TinyVideoDecoder(torch.nn.Module):
    def __init__(self, tc: int = 3, s: int = 8):
        super().__init__()
        self.tc, self.s = tc, s

    def forward(self, idx: torch.Tensor):  # [B, t, h, w] -> [B, 3, F, H, W] in [-1, 1]
        bits = torch.stack([idx % 2, idx // 2 % 2, idx // 4 % 2], 1).float() * 1.6 - 0.8
        frames = torch.cat([bits[:, :, :1], bits[:, :, 1:].repeat_interleave(self.tc, 2)], 2)
        return frames.repeat_interleave(self.s, 3).repeat_interleave(self.s, 4)


def script_tokenizer(folder) -> None:
    """encoder.jit and decoder.jit of the tiny tokenizer in `folder`, as NVIDIA ships a tokenizer."""
    import warnings

    with warnings.catch_warnings():  # (torch deprecates TorchScript; NVIDIA's tokenizer is TorchScript)
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(TinyVideoEncoder()).save(str(folder / "encoder.jit"))
        torch.jit.script(TinyVideoDecoder()).save(str(folder / "decoder.jit"))


def tiny_cosmos_folder(path, video2world: bool = False, tokenizer: bool = True):
    """A Cosmos folder: tiny_cosmos (fp32) over 3 latent frames of 2 x 2 tokens, and a TorchScript tokenizer of
    compression (3, 8, 8): 7 frames of 16 x 16 pixels, of which 1 or 4 may be given."""
    import json
    from pathlib import Path

    from mmspec.reference.cosmos_checkpoint import save_cosmos

    path = Path(path)
    save_cosmos(tiny_cosmos(video2world, dtype=torch.float32), path, tokenizer="tokenizer")
    if tokenizer:
        folder = path / "tokenizer"
        folder.mkdir(parents=True, exist_ok=True)
        script_tokenizer(folder)
        (folder / "config.json").write_text(json.dumps({"model_type": "cosmos-discrete-video", "encoder": "encoder.jit",
                                                        "decoder": "decoder.jit", "compression": [3, 8, 8],
                                                        "vocab_size": 8, "dtype": "float32"}))
    return path


def clip(frames: int = 4, seed: int = 0, size: int = 16):
    """uint8 [frames, size, size, 3]: one saturated colour per 8x8 patch per frame, which the tiny tokenizer reads
    back through an MP4's compression."""
    g = torch.Generator().manual_seed(seed)
    colours = torch.randint(0, 2, (frames, size // 8, size // 8, 3), generator=g).to(torch.uint8) * 255
    return colours.repeat_interleave(8, 1).repeat_interleave(8, 2)


# tiny_chameleon's ids: BOS, pad, EOS; image tokens IMAGE0.. ; Lumina-mGPT's structural tokens; resolution tokens
C_BOS, C_PAD, C_EOS, C_IMAGE0, C_BOI, C_EOI, C_ROW_END, C_SEP, C_RES1 = 0, 1, 2, 4, 30, 31, 32, 33, 34


def chameleon_vocabulary(codes: int, size: int = 64) -> dict:
    """A Chameleon vocabulary map: image token of code c named IMGIMG + c's digits as letters A-J + Z, Lumina-mGPT's
    structural tokens, resolution tokens for 1 and 2 patches, the rest text."""
    names = {C_BOS: "<s>", C_PAD: "<pad>", C_EOS: "</s>", 3: "<image>", C_BOI: "<racm3:break>", C_EOI: "<eoss>",
             C_ROW_END: "<reserved08799>", C_SEP: "<reserved08706>", C_RES1: "<reserved08801>",
             C_RES1 + 1: "<reserved08802>"}
    names |= {C_IMAGE0 + c: "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(c)) + "Z" for c in range(codes)}
    return {names.get(i, f"<tok{i}>"): i for i in range(size)}


def tiny_chameleon(codes=6, layers=2, seed=0, dtype=torch.float64):
    """A random Chameleon (transformers' ChameleonForConditionalGeneration) over a vocabulary of 64 with `codes`
    image tokens."""
    from transformers import ChameleonConfig, ChameleonForConditionalGeneration

    torch.manual_seed(seed)
    vq = dict(embed_dim=4, num_embeddings=codes, latent_channels=4, base_channels=32, channel_multiplier=[1, 1],
              num_res_blocks=1, resolution=16)
    cfg = ChameleonConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=C_BOS,
                          pad_token_id=C_PAD, eos_token_id=C_EOS, vq_config=vq,
                          vocabulary_map=chameleon_vocabulary(codes))
    model = ChameleonForConditionalGeneration(cfg).to(dtype).eval()
    return spread_weights(model, skip=("model.vqmodel",))


def tiny_chameleon_folder(path, codes=6, image_size=32):
    """A Chameleon model folder as mmspec runs it: transformers' folder (config with `image_size` in pixels,
    safetensors), a word-level tokenizer.json over its vocabulary, and a random VQGAN (16 pixels a token) in vqgan/."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from mmspec.tokenizers.chameleon import chameleon_vq

    path.mkdir(parents=True, exist_ok=True)
    model = tiny_chameleon(codes=codes, dtype=torch.float32)
    model.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "image_size": image_size}))
    vocab = chameleon_vocabulary(codes)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<tok40>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                            unk_token="<tok40>", additional_special_tokens=["<reserved08706>"]).save_pretrained(path)
    dd = dict(ch=32, ch_mult=[1] * 5, num_res_blocks=1, attn_resolutions=[], z_channels=4, resolution=image_size)
    torch.manual_seed(1)
    chameleon_vq({"embed_dim": 4, "n_embed": codes, "ddconfig": dd}).save_pretrained(path / "vqgan")
    return model


def llamagen_state_dict(model_type="c2i", caption_dim=12, tokens=3, seed=0, layers=2, dim=32, vocab=24, classes=5):
    """A synthetic checkpoint with LlamaGen's key names and shapes, written from its layout, not ours."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.3  # noqa: E731
    hidden = 256 * math.ceil(int(2 * 4 * dim / 3) / 256)
    sd = {"tok_embeddings.weight": r(vocab, dim), "norm.weight": 1 + r(dim), "output.weight": r(vocab, dim)}
    if model_type == "c2i":
        sd["cls_embedding.embedding_table.weight"] = r(classes + 1, dim)
    else:
        sd["cls_embedding.cap_proj.fc1.weight"] = r(dim, caption_dim)
        sd["cls_embedding.cap_proj.fc2.weight"] = r(dim, dim)
        sd["cls_embedding.uncond_embedding"] = r(tokens, caption_dim)
    for i in range(layers):
        p = f"layers.{i}."
        sd |= {p + "attention.wqkv.weight": r(3 * dim, dim), p + "attention.wo.weight": r(dim, dim),
               p + "feed_forward.w1.weight": r(hidden, dim), p + "feed_forward.w3.weight": r(hidden, dim),
               p + "feed_forward.w2.weight": r(dim, hidden), p + "attention_norm.weight": 1 + r(dim),
               p + "ffn_norm.weight": 1 + r(dim)}
    return sd


class TamingWeights:
    """Writes random weights of taming-transformers' VQGAN blocks into a state dict `sd` under the names given
    (LlamaGen's and Chameleon's VQ tokenizers are both taming VQGANs, under their own module names)."""

    def __init__(self, sd: dict, seed: int = 0):
        self.sd, self.g = sd, torch.Generator().manual_seed(seed)

    def r(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.g) * 0.2

    def res(self, p: str, cin: int, cout: int) -> None:
        r = self.r
        self.sd.update({p + "norm1.weight": 1 + r(cin), p + "norm1.bias": r(cin), p + "conv1.weight": r(cout, cin, 3, 3),
                        p + "conv1.bias": r(cout), p + "norm2.weight": 1 + r(cout), p + "norm2.bias": r(cout),
                        p + "conv2.weight": r(cout, cout, 3, 3), p + "conv2.bias": r(cout)})
        if cin != cout:
            self.sd.update({p + "nin_shortcut.weight": r(cout, cin, 1, 1), p + "nin_shortcut.bias": r(cout)})

    def attn(self, p: str, c: int) -> None:
        self.sd.update({p + "norm.weight": 1 + self.r(c), p + "norm.bias": self.r(c)})
        for name in ("q", "k", "v", "proj_out"):
            self.sd.update({p + f"{name}.weight": self.r(c, c, 1, 1), p + f"{name}.bias": self.r(c)})


def taming_ops(sd: dict):
    """taming's decoder blocks, restated as functions of the weights in `sd` at a name prefix:
    -> (group norm, conv, resnet block, attention block)."""
    import torch.nn.functional as F

    gn = lambda x, p: F.group_norm(x, 32, sd[p + "weight"], sd[p + "bias"], eps=1e-6)  # noqa: E731
    conv = lambda x, p, pad=1: F.conv2d(x, sd[p + "weight"], sd[p + "bias"], padding=pad)  # noqa: E731

    def res(x, p):
        h = conv(F.silu(gn(conv(F.silu(gn(x, p + "norm1.")), p + "conv1."), p + "norm2.")), p + "conv2.")
        return (conv(x, p + "nin_shortcut.", 0) if p + "nin_shortcut.weight" in sd else x) + h

    def attn(x, p):
        h = gn(x, p + "norm.")
        B, C, H, W = h.shape
        q, k, v = (conv(h, p + f"{n}.", 0).reshape(B, C, H * W) for n in "qkv")
        w = torch.softmax(q.transpose(1, 2) @ k * C ** -0.5, -1)  # [B, HW, HW]
        return x + conv((v @ w.transpose(1, 2)).reshape(B, C, H, W), p + "proj_out.", 0)

    return gn, conv, res, attn


def png(image) -> bytes:
    """The PNG file PIL writes for a PIL image or a uint8 array [H, W, 3] (what the families and mmspec save)."""
    import io

    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    (Image.fromarray(image) if isinstance(image, np.ndarray) else image).save(buffer, format="PNG")
    return buffer.getvalue()


def rounded(x: torch.Tensor):
    """mmspec's bundled models' cast of [-1, 1] pixels, as numpy uint8: round((x + 1) * 127.5). Tests of a family's
    own cast check that it gives other bytes on their pictures (the test could fail)."""
    return ((x.float() + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()


def llamagen_vq_state_dict(seed=0, ch=32, mult=(1, 2), z=32, emb=4, codes=10):
    """A LlamaGen VQ's weights (VQ-16's layout at toy sizes), written with LlamaGen's key names."""
    sd = {}
    weights = TamingWeights(sd, seed)
    r, res, attn = weights.r, weights.res, weights.attn

    n, top = len(mult), ch * mult[-1]
    sd.update({"encoder.conv_in.weight": r(ch, 3, 3, 3), "encoder.conv_in.bias": r(ch)})
    cin = ch
    for i, m in enumerate(mult):
        for j in range(2):
            res(f"encoder.conv_blocks.{i}.res.{j}.", cin, ch * m)
            cin = ch * m
            if i == n - 1:
                attn(f"encoder.conv_blocks.{i}.attn.{j}.", cin)
        if i != n - 1:
            sd.update({f"encoder.conv_blocks.{i}.downsample.conv.weight": r(cin, cin, 3, 3),
                       f"encoder.conv_blocks.{i}.downsample.conv.bias": r(cin)})
    for part in ("encoder", "decoder"):
        res(f"{part}.mid.0.", top, top)
        attn(f"{part}.mid.1.", top)
        res(f"{part}.mid.2.", top, top)
    sd.update({"encoder.norm_out.weight": 1 + r(top), "encoder.norm_out.bias": r(top),
               "encoder.conv_out.weight": r(z, top, 3, 3), "encoder.conv_out.bias": r(z),
               "decoder.conv_in.weight": r(top, z, 3, 3), "decoder.conv_in.bias": r(top)})
    cin = top
    for i, lvl in enumerate(reversed(range(n))):
        for j in range(3):
            res(f"decoder.conv_blocks.{i}.res.{j}.", cin, ch * mult[lvl])
            cin = ch * mult[lvl]
            if lvl == n - 1:
                attn(f"decoder.conv_blocks.{i}.attn.{j}.", cin)
        if lvl != 0:
            sd.update({f"decoder.conv_blocks.{i}.upsample.conv.weight": r(cin, cin, 3, 3),
                       f"decoder.conv_blocks.{i}.upsample.conv.bias": r(cin)})
    sd.update({"decoder.norm_out.weight": 1 + r(cin), "decoder.norm_out.bias": r(cin),
               "decoder.conv_out.weight": r(3, cin, 3, 3), "decoder.conv_out.bias": r(3),
               "quant_conv.weight": r(emb, z, 1, 1), "quant_conv.bias": r(emb),
               "post_quant_conv.weight": r(z, emb, 1, 1), "post_quant_conv.bias": r(z),
               "quantize.embedding.weight": r(codes, emb), "quantize.codebook_used": torch.zeros(65536)})
    return sd


def tiny_llamagen_folder(path, model_type="c2i"):
    """A LlamaGen folder at `path` as its converters write one from LlamaGen's own files (kept beside it, in
    PATH-release/): a GPT checkpoint in LlamaGen's layout (2 layers, 2 heads, width 32; 5 classes, or 3 caption tokens
    of 12 features) through `convert_llamagen` (a 4 x 4 grid of 10 codes) and a VQ in LlamaGen's layout (2 pixels a
    token) through `convert_llamagen_vq` into vq/."""
    from safetensors.torch import save_file

    from mmspec.reference.checkpoint import convert_llamagen
    from mmspec.tokenizers.llamagen import convert_llamagen_vq

    release = path.parent / f"{path.name}-release"
    release.mkdir(parents=True, exist_ok=True)
    save_file(llamagen_state_dict(model_type, vocab=10), str(release / "gpt.safetensors"))
    save_file(llamagen_vq_state_dict(), str(release / "vq.safetensors"))
    kind = {"num_classes": 5} if model_type == "c2i" else {"caption_dim": 12, "cls_token_num": 3}
    convert_llamagen(release / "gpt.safetensors", path, model=(2, 2, 32), image_size=16, downsample=4, vocab_size=10,
                     model_type=model_type, **kind)
    convert_llamagen_vq(release / "vq.safetensors", path / "vq", model=(1, 2), codebook_size=10, embed_dim=4,
                        z_channels=32, ch=32)
    return path
