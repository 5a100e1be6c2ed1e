"""EAGLE-3 draft heads (method 'eagle'): the exact law for every variant, wrong variants the law test catches,
and heads in the published layout (what loads, what is refused)."""
import dataclasses
import json

import pytest
import torch
from safetensors.torch import save_file

import mmspec
from mmspec import HFCausalLM
from mmspec.drafters.eagle import EagleDrafter
from mmspec.drafters.proactive import ModelBranches, NoiseModelBranches, ProactiveDrafter
from mmspec.drafters.tree import TreeDrafter
from mmspec.loading import read_safetensors
from mmspec.reference.eagle import load_head
from mmspec.steps import Draft
from mmspec.verify import BranchVerifier, GumbelMatchVerifier, RejectionVerifier, TreeVerifier
from test_distribution import ALPHA, SAMPLES, IgnoresBranchQ, case
from tiny import CycleWindow, chi_square_pvalue, gpt_law, llama_law, sequence_id, tiny_gpt, tiny_head, tiny_llama

# where the tiny heads' chains stop: after slot 0 in some steps, slot 1 in others, never in the rest
STOP = 0.6
# text takes the lookup's drafts where the head agrees unless told not to (mmspec.drafters.lookup.LookupOrDrafter);
# "lookup" turns it on for grids too (the row above's copies)
VARIANTS = {"chain": {}, "exact": {"exact": True}, "coupled-splice": {"jacobi": 1},
            "exact-splice": {"exact": True, "jacobi": 2}, "branches": {"proactive": [2, 2]},
            "exact-branches": {"exact": True, "proactive": [2, 2]}, "tree": {"tree": [4, 2]},
            "exact-tree": {"exact": True, "tree": [5, 2]}, "head-only": {"lookup": False},
            "lookup": {"lookup": True}, "exact-tree-lookup": {"exact": True, "tree": [5, 2], "lookup": True},
            "stop": {"stop": STOP}, "exact-stop": {"exact": True, "stop": STOP},
            "splice-stop": {"jacobi": 2, "stop": STOP}}
CASES = {}


def eagle_case(name):
    """(target, head, layout, sampling, exact law): a 2x2 grid with CFG, and 1D text without it."""
    if name not in CASES:
        if name == "grid-cfg":
            target, _, layout, sampling, law = case("gpt-grid")
            head = tiny_head(4, 24, rope_axes=2, seed=3)
        else:
            model, layout = tiny_gpt(vocab_size=4, rope_axes=1, num_classes=2, block_size=5, dtype=torch.float32), \
                mmspec.Sequence1D(5)
            target, sampling = mmspec.ReferenceTarget(model), mmspec.Sampling(temperature=0.8, top_p=0.9)
            head = tiny_head(4, 24, seed=3)
            law = gpt_law(model, 0, layout, sampling)
        CASES[name] = target, head, layout, sampling, law
    return CASES[name]


def _sample(name, method, window=4):
    target, head, layout, sampling, _ = eagle_case(name)
    if isinstance(method, dict):
        method = {"name": "eagle", "head": head, **method}
    return mmspec.generate(target, torch.tensor([0]), layout, method=method, window=window, sampling=sampling,
                           seed=0, num_samples=SAMPLES)


@pytest.mark.parametrize("name", ["grid-cfg", "text-1d"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("window", [4, CycleWindow((4, 2, 1, 3))], ids=["window-4", "changing"])
def test_eagle_matches_exact_law(name, variant, window):
    g = _sample(name, VARIANTS[variant], window)
    law = eagle_case(name)[4]
    pvalue = chi_square_pvalue(sequence_id(g.tokens, 4), law)
    assert pvalue > ALPHA, f"eagle {variant} on {name}: chi-square p = {pvalue:.2e}"
    # the head's slot 0 is both accepted and rejected often: the test runs both paths of every step
    assert 0.15 < g.stats.acceptance_per_position[0] < 0.85


@pytest.mark.parametrize("variant", VARIANTS)
def test_eagle_keeps_the_law_with_given_tokens_and_widened_windows(variant):
    """Given tokens are drafted as they are; a run of them as long as the window widens it, the first window
    included (before the head has features): one forward takes the run and the token after it."""
    target, head, layout, sampling, _ = eagle_case("text-1d")
    places = {0: 2, 1: 0}
    given = torch.tensor([[places.get(i, -1) for i in range(layout.length)]])
    g = mmspec.generate(target, torch.tensor([0]), layout, method={"name": "eagle", "head": head, **VARIANTS[variant]},
                        window=CycleWindow((2, 3)), sampling=sampling, seed=0, num_samples=SAMPLES, given=given)
    assert (g.stats.commit_step[:, :3] == 0).all()  # the first forward, widened from 2 to 3: the run and one more
    law = gpt_law(target.model, 0, layout, sampling, given=places)
    assert chi_square_pvalue(sequence_id(g.tokens, 4), law) > ALPHA
    assert g.stats.accepted.sum() > 0


def test_a_chain_that_stops_where_the_head_is_unsure_drafts_less_and_keeps_the_law():
    """The head's chain ends after a slot where its most likely token is below `stop`: steps with 1, 2 and 3 drafts
    in one run (a function of the head's output, never of the verifier's draws), the law as without it."""
    full = _sample("text-1d", {"lookup": False})
    g = _sample("text-1d", {"lookup": False, "stop": STOP})
    slots = g.stats.forwards_at.sum(0)  # [3] forwards whose window had slot j
    assert slots[0] > slots[1] > slots[2] > 0 and full.stats.forwards_at.sum(0).unique().numel() == 1
    assert chi_square_pvalue(sequence_id(g.tokens, 4), eagle_case("text-1d")[4]) > ALPHA


class PadsAStoppedChain(EagleDrafter):
    """Wrong: a chain that stopped early is padded to the window with copies of its last draft, each reported under
    the last slot's q, which did not draw them."""

    def propose(self, state, window):
        draft = super().propose(state, window)
        short = window.D - draft.slots
        if draft.q is None or draft.slots == 0 or short == 0:
            return draft
        pad = lambda x: torch.cat([x, x[:, -1:].expand(-1, short, *x.shape[2:])], 1)  # noqa: E731
        return Draft(pad(draft.tokens), pad(draft.q), pad(draft.onehot))


def test_the_law_test_has_power_against_a_stopped_chain_padded_with_copies():
    head = eagle_case("text-1d")[1]
    method = mmspec.Method("eagle-wrong", lambda layout: PadsAStoppedChain(head, stop=STOP), RejectionVerifier())
    assert chi_square_pvalue(sequence_id(_sample("text-1d", method).tokens, 4), eagle_case("text-1d")[4]) < ALPHA


class NotRenormalised(EagleDrafter):
    """Wrong: q is the head's softmax masked to the top-k / top-p afterwards, never renormalised. The draws are
    still right (sample_from normalises its weights); the q reported to the verifier is too small."""

    def _q(self, state, z):
        B, untruncated = state.batch_size, dataclasses.replace(state.sampling, top_k=None, top_p=None)
        whole = untruncated.logp(z[:B], z[B:] if self.rows == 2 else None)
        return whole.masked_fill(super()._q(state, z) == -torch.inf, -torch.inf)


class ReportsAnotherTemperature(EagleDrafter):
    """Wrong: drafts are drawn from q, and the verifier is told q sharpened as by a lower temperature."""

    def propose(self, state, window):
        draft = super().propose(state, window)
        if draft.q is None:
            return draft
        sharper = draft.q ** 1.5
        return dataclasses.replace(draft, q=sharper / sharper.sum(-1, keepdim=True))


@pytest.mark.parametrize("wrong, name", [(NotRenormalised, "grid-cfg"), (NotRenormalised, "text-1d"),
                                         (ReportsAnotherTemperature, "grid-cfg")],
                         ids=["not-renormalised-grid", "not-renormalised-text", "another-temperature-grid"])
def test_the_law_test_has_power_against_a_head_that_reports_another_q(wrong, name):
    head = eagle_case(name)[1]
    method = mmspec.Method("eagle-wrong", lambda layout: wrong(head), RejectionVerifier())
    g = _sample(name, method)
    assert chi_square_pvalue(sequence_id(g.tokens, 4), eagle_case(name)[4]) < ALPHA


class BranchesNotRenormalised(NotRenormalised):
    """Wrong on the branches only: their children's q is the head's softmax masked to the top-k / top-p afterwards,
    never renormalised (the chain's q is right)."""

    branching = False

    def _q(self, state, z):
        return super()._q(state, z) if self.branching else EagleDrafter._q(self, state, z)

    def continue_branches(self, state, siblings, D):
        self.branching = True
        try:
            return super().continue_branches(state, siblings, D)
        finally:
            self.branching = False


@pytest.mark.parametrize("wrong, name, proactive, window", [("not-renormalised", "text-1d", (3, 2), 5),
                                                             ("chains-q", "grid-cfg", (2, 3), 4)], ids=str)
def test_the_law_test_has_power_against_branches_tested_under_another_q(wrong, name, proactive, window):
    """Branch children tested under a q that is not theirs: their own not renormalised over the top-p, or the chain's
    q of the same slot (the law of children that followed d_0, not the sibling)."""
    head, law = eagle_case(name)[1], eagle_case(name)[4]
    nodes = ModelBranches(*proactive).nodes

    def method(drafter, verifier=BranchVerifier(RejectionVerifier())):
        return mmspec.Method("eagle", lambda layout: ProactiveDrafter(drafter(head, tree_nodes=nodes),
                                                                      ModelBranches(*proactive)), verifier,
                             tree_nodes=nodes)

    wrong = method(BranchesNotRenormalised) if wrong == "not-renormalised" else \
        method(EagleDrafter, IgnoresBranchQ(RejectionVerifier()))
    assert chi_square_pvalue(sequence_id(_sample(name, method(EagleDrafter), window).tokens, 4), law) > ALPHA
    assert chi_square_pvalue(sequence_id(_sample(name, wrong, window).tokens, 4), law) < ALPHA


class ReplaysItsBranches(EagleDrafter):
    """Checks the forest against the head run along each branch one pair at a time, as the chain is drafted (in the
    same cache slots, which the next update rewrites), and counts the branches the verifier took."""

    def __init__(self, head, draw):
        super().__init__(head, draw, tree_nodes=3 * 3)
        self.gap, self.replayed, self.taken = 0.0, 0, 0

    def continue_branches(self, state, siblings, D):
        branches, branch_q = super().continue_branches(state, siblings, D)
        for i in range(branches.shape[1] if D > 1 else 0):
            h = self.h
            for t in range(D - 1):
                out, logits = self.session.forward(h[:, None], self._rows(branches[:, i, t:t + 1]),
                                                   self._rows(state.n + t))
                h = out[:, 0]
                q = self._q(state, logits[:, 0]).exp()
                self.gap = max(self.gap, float((q - branch_q[:, i, t]).abs().max()))
                self.replayed += 1
        return branches, branch_q

    def update(self, state, draft, verdict, logp, k):
        self.taken += int((verdict.branch > 0).sum()) if verdict.branch is not None else 0
        super().update(state, draft, verdict, logp, k)


class FirstSlotLaws(EagleDrafter):
    """Keeps q at the first slot of every window, by the index it drafts (one row), one dict per generation, with
    the number of branches the verifier had taken before."""

    def __init__(self, head, draw, tree_nodes):
        super().__init__(head, draw, tree_nodes)
        self.first = []

    def start(self, state, context):
        super().start(state, context)
        self.first.append({})
        self.taken = 0

    def propose(self, state, window):
        draft = super().propose(state, window)
        if draft.q is not None:
            self.first[-1][int(state.n[0])] = draft.q[0, 0], self.taken
        return draft

    def update(self, state, draft, verdict, logp, k):
        self.taken += int((verdict.branch > 0).sum()) if verdict.branch is not None else 0
        super().update(state, draft, verdict, logp, k)


@pytest.mark.parametrize("layout, axes", [(mmspec.Sequence1D(14), 1), (mmspec.Grid2D(4, 4), 2)], ids=["1d", "2d"])
@pytest.mark.parametrize("exact", [False, True], ids=["sample", "exact"])
def test_head_branches_are_the_head_run_along_each_branch(layout, axes, exact):
    """The forest in the head's cache gives each child the q the head gives it along its own branch; after a branch
    was taken the head's cache holds the committed pairs only: q at a window's first slot is the q a run without
    branches has at the same index (`exact`: both commit ar's tokens), so no branch entry is ever attended."""
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=axes))
    head = tiny_head(16, 24, rope_axes=axes, seed=3, dtype=torch.float64)
    sampling = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)
    draw, kind = ("gumbel", NoiseModelBranches) if exact else ("sample", ModelBranches)
    verifier = BranchVerifier(GumbelMatchVerifier() if exact else RejectionVerifier())
    replays = ReplaysItsBranches(head, draw)
    method = mmspec.Method("eagle-branches", lambda layout: ProactiveDrafter(replays, kind(4, 3)), verifier,
                           tree_nodes=9)
    mmspec.generate(target, torch.tensor([0, 1]), layout, method=method, window=5, sampling=sampling, seed=0,
                    num_samples=4)
    assert replays.replayed > 20 and replays.taken > 0 and replays.gap < 1e-9
    if not exact:
        return
    runs = []
    for nodes, proactive in ((9, kind(4, 3)), (0, None)):
        drafter = FirstSlotLaws(head, draw, nodes)
        wrap = (lambda d=drafter, p=proactive: ProactiveDrafter(d, p)) if proactive else (lambda d=drafter: d)
        method = mmspec.Method("eagle", lambda layout, wrap=wrap: wrap(), verifier, tree_nodes=nodes)
        for seed in range(6):
            mmspec.generate(target, torch.tensor([1]), layout, method=method, window=5, sampling=sampling, seed=seed)
        runs.append(drafter.first)
    same = [(a[n], b[n][0]) for a, b in zip(*runs) for n in a.keys() & b.keys() if n > 0]
    assert len(same) > 10 and sum(taken > 0 for (_, taken), _ in same) > 3  # indices drafted after branches were taken
    assert max(float((a - b).abs().max()) for (a, _), b in same) < 1e-9


class NearestChild(TreeVerifier):
    """Wrong: where no child is AR's draw, the path still goes on, into the child p gives most mass (its token the
    output), instead of ending at the draw."""

    def descend(self, state, draft, logp, y_all, node):
        y, below, found = super().descend(state, draft, logp, y_all, node)
        mine = draft.parent == node[:, None]  # [B, N] the node's children
        p = logp.gather(1, node[:, None, None].expand(-1, 1, logp.shape[2]))[:, 0].exp()  # [B, V] p at the node
        best = p.gather(1, draft.tokens).masked_fill(~mine, -1.0).argmax(1)  # [B]
        take = ~found & mine.any(1)
        return (torch.where(take, draft.tokens.gather(1, best[:, None])[:, 0], y), torch.where(take, best + 1, below),
                found | take)


class CoinPerChild(TreeVerifier):
    """Wrong: each child of the node passes on its own coin with probability p(child), the first that does taken,
    and where none does the output is AR's draw from the whole p, not from what the coins left."""

    def descend(self, state, draft, logp, y_all, node):
        mine = draft.parent == node[:, None]
        p = logp.gather(1, node[:, None, None].expand(-1, 1, logp.shape[2]))[:, 0].exp()
        hit = mine & (state.streams.uniform(draft.tokens.shape[1]) < p.gather(1, draft.tokens))  # [B, N]
        found, first = hit.any(1), hit.long().argmax(1)
        y = y_all.gather(1, node[:, None])[:, 0]
        y = torch.where(found, draft.tokens.gather(1, first[:, None])[:, 0], y)
        return y, torch.where(found, first + 1, node), found


@pytest.mark.parametrize("name", ["grid-cfg", "text-1d"])
@pytest.mark.parametrize("wrong", [NearestChild, CoinPerChild], ids=["nearest-child", "coin-per-child"])
def test_the_law_test_has_power_against_a_wrong_tree_descent(name, wrong):
    head, law = eagle_case(name)[1], eagle_case(name)[4]

    def method(verifier):
        return mmspec.Method("eagle-tree", lambda layout: TreeDrafter(EagleDrafter(head, "gumbel", tree_level=2), 4, 2),
                             verifier, tree_nodes=4)

    right, wrong = (_sample(name, method(v(RejectionVerifier()))).tokens for v in (TreeVerifier, wrong))
    assert chi_square_pvalue(sequence_id(right, 4), law) > ALPHA
    assert chi_square_pvalue(sequence_id(wrong, 4), law) < ALPHA


class TreeByReplay(EagleDrafter):
    """Grows every token tree twice: as the drafter does (a level per head forward, each node seeing its ancestors in
    the cache) and by running the head along each node's path one pair at a time from n, as the chain is drafted, with
    EAGLE-2's choice made row by row in Python; the two must give the same nodes and parents."""

    def __init__(self, head):
        super().__init__(head, "gumbel", tree_level=3)
        self.trees = 0

    def grow_tree(self, state, window, nodes, top_k):
        tree = super().grow_tree(state, window, nodes, top_k)
        if window.D == 0 or not hasattr(tree, "parent"):
            return tree
        B, K = state.batch_size, top_k
        paths, scores = [[()] for _ in range(B)], [[0.0] for _ in range(B)]  # per row: the level's paths and scores
        found = [[] for _ in range(B)]  # per row: (score, candidate order, path)
        for t in range(window.D):
            width = len(paths[0])
            conf = torch.empty(B, width, self.z.shape[-1], dtype=torch.float64)
            for j in range(width):  # the head along path j of every row, one pair at a time
                h, z = self.h, self.z
                for i in range(t):
                    token = torch.tensor([paths[b][j][i] for b in range(B)])
                    out, logits = self.session.forward(h[:, None], self._rows(token[:, None]), self._rows(state.n + i))
                    h, z = out[:, 0], logits[:, 0]
                conf[:, j] = self._confidence(state, z[:, None], state.index(1, t))[:, 0]
            for b in range(B):
                offered = [(scores[b][j] + float(s), paths[b][j] + (int(c),))
                           for j in range(width) for s, c in zip(*conf[b, j].topk(K))]
                found[b] += [(s, len(found[b]) + i, p) for i, (s, p) in enumerate(offered)]
                best = sorted(range(len(offered)), key=lambda i: -offered[i][0])[:K]
                paths[b], scores[b] = [offered[i][1] for i in best], [offered[i][0] for i in best]
        for b in range(B):
            chosen = sorted(sorted(found[b], key=lambda x: -x[0])[:nodes], key=lambda x: x[1])
            number = {p: i + 1 for i, (_, _, p) in enumerate(chosen)}
            assert tree.tokens[b].tolist() == [p[-1] for _, _, p in chosen]
            assert tree.parent[b].tolist() == [number.get(p[:-1], 0) for _, _, p in chosen]
        self.trees += 1
        return tree


class HeadAfterUpdate(EagleDrafter):
    """Keeps the head's logits for the next index after every update, by the committed length (one row)."""

    def start(self, state, context):
        super().start(state, context)
        self.z_at = {}

    def update(self, state, draft, verdict, logp, k):
        super().update(state, draft, verdict, logp, k)
        self.next_logq(state)  # (the pairs of a window of 1 wait for a draft: this one asks)
        self.z_at[int(state.n[0])] = self.z[0].clone()


@pytest.mark.parametrize("layout, axes", [(mmspec.Sequence1D(14), 1), (mmspec.Grid2D(4, 4), 2)], ids=["1d", "2d"])
def test_a_head_tree_is_the_head_run_along_each_path_and_its_update_the_chains(layout, axes):
    """The levels of a tree in the head's cache give each node what the head gives it along its own path (so the
    choice is EAGLE-2's), and after the verifier took a path the head's cache holds the committed pairs only: its
    logits for the next index equal those of a chain run that committed the same tokens (both commit ar's)."""
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=axes))
    head = tiny_head(16, 24, rope_axes=axes, seed=3, dtype=torch.float64)
    sampling = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)
    replay = TreeByReplay(head)
    method = mmspec.Method("eagle-tree", lambda layout: TreeDrafter(replay, 7, 3), TreeVerifier(RejectionVerifier()),
                           tree_nodes=7)
    mmspec.generate(target, torch.tensor([0, 1]), layout, method=method, window=4, sampling=sampling, seed=0,
                    num_samples=2)
    assert replay.trees > 5
    runs = []
    for tree in (True, False):
        drafter = HeadAfterUpdate(head, "gumbel", tree_level=3)
        wrap = TreeDrafter(drafter, 9, 3) if tree else drafter
        method = mmspec.Method("eagle", lambda layout, wrap=wrap: wrap, TreeVerifier(GumbelMatchVerifier()),
                               tree_nodes=9)
        for seed in range(4):
            mmspec.generate(target, torch.tensor([1]), layout, method=method, window=5, sampling=sampling, seed=seed)
            runs.append(drafter.z_at)
    pairs = [(a[n], b[n]) for a, b in zip(runs[:4], runs[4:]) for n in a.keys() & b.keys()]
    assert len(pairs) > 10 and max(float((a - b).abs().max()) for a, b in pairs) < 1e-9


def test_eagle_refuses_levers_that_do_not_combine_and_bad_tree_shapes():
    with pytest.raises(ValueError, match="proactive branches or a Jacobi window after the head's slots, not both"):
        mmspec.methods.resolve_method({"name": "eagle", "head": eagle_case("text-1d")[1], "proactive": [3, 2],
                                       "jacobi": 1})
    for other in ({"proactive": [3, 2]}, {"jacobi": 1}):
        with pytest.raises(ValueError, match="token tree takes the whole window"):
            mmspec.methods.resolve_method({"name": "eagle", "head": eagle_case("text-1d")[1], "tree": 8, **other})
    for bad in (0, [8], [8, 0], "8", 2.5):
        with pytest.raises(ValueError, match="tree must be NODES or"):
            mmspec.methods.resolve_method({"name": "eagle", "head": eagle_case("text-1d")[1], "tree": bad})
    for bad in (1.0, -0.1, "0.1", True):
        with pytest.raises(ValueError, match=r"stop must be a probability in \[0, 1\)"):
            mmspec.methods.resolve_method({"name": "eagle", "head": eagle_case("text-1d")[1], "stop": bad})
    with pytest.raises(ValueError, match="no stop with it"):
        mmspec.methods.resolve_method({"name": "eagle", "head": eagle_case("text-1d")[1], "tree": 8, "stop": 0.1})


# A head in the published EAGLE-3 layout for a 4-layer tiny llama: vLLM's default layers are (2, 4 // 2, 4 - 3)
VOCAB, DEPTH, HIDDEN = 8, 4, 32
DRAFT_IDS = torch.tensor([0, 2, 3, 5, 6])  # the draft vocabulary as target ids, ascending as EAGLE-3 writes d2t


def write_published_head(path, drop=(), embed=False, **config):
    """A folder as the EAGLE-3 checkpoints vLLM and SGLang serve are written: a Llama config with draft_vocab_size
    and no eagle_config, bf16 weights under the published names, d2t (int64) and t2d (bool), no embed_tokens (the
    target's embedding is used) unless `embed`. `drop`: weights left out; `config`: keys to change."""
    heads, kv_heads, head_dim, inner, Vd = 4, 2, 8, 64, len(DRAFT_IDS)
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.3).to(torch.bfloat16)

    def norm():
        return (1 + torch.randn(HIDDEN, generator=g) * 0.1).to(torch.bfloat16)

    weights = {
        "fc.weight": w(HIDDEN, 3 * HIDDEN),
        "midlayer.input_layernorm.weight": norm(), "midlayer.hidden_norm.weight": norm(),
        "midlayer.post_attention_layernorm.weight": norm(), "norm.weight": norm(),
        "midlayer.self_attn.q_proj.weight": w(heads * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": w(kv_heads * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": w(kv_heads * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": w(HIDDEN, heads * head_dim),
        "midlayer.mlp.gate_proj.weight": w(inner, HIDDEN), "midlayer.mlp.up_proj.weight": w(inner, HIDDEN),
        "midlayer.mlp.down_proj.weight": w(HIDDEN, inner),
        "lm_head.weight": w(Vd, HIDDEN),
        "d2t": DRAFT_IDS - torch.arange(Vd),  # target id = draft id + d2t[draft id]
        "t2d": torch.isin(torch.arange(VOCAB), DRAFT_IDS),
    }
    if embed:  # (drawn last: the other weights stay those of the same head without it)
        weights["embed_tokens.weight"] = w(VOCAB, HIDDEN)
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": HIDDEN, "intermediate_size": inner, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "num_hidden_layers": 1, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "vocab_size": VOCAB, "draft_vocab_size": Vd,
           **config}
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v for k, v in weights.items() if k not in drop}, str(path / "model.safetensors"))
    return path


class Recording(EagleDrafter):
    """The head's drafter, keeping every draft it proposed."""

    def __init__(self, head):
        super().__init__(head)
        self.drafts = []

    def propose(self, state, window):
        draft = super().propose(state, window)
        self.drafts.append(draft)
        return draft


def test_a_published_head_reads_vllms_default_layers_and_drafts_its_vocabulary_only(tmp_path):
    head = load_head(write_published_head(tmp_path / "head"), target_layers=DEPTH)
    assert head.config.target_layers == (2, 2, 1) and head.config.draft_vocab_size == len(DRAFT_IDS)
    assert head.embed_tokens is None and head.lm_head.weight.dtype == torch.float32
    target = HFCausalLM(tiny_llama(VOCAB, layers=DEPTH, hidden=HIDDEN, dtype=torch.float32))
    recording = Recording(head)
    method = mmspec.Method("eagle", lambda layout: recording, RejectionVerifier())
    out = mmspec.generate(target, [[1, 2], [1, 4, 5]], mmspec.Sequence1D(10), method=method, window=4,
                          num_samples=8)
    q = torch.cat([d.q.flatten(0, 1) for d in recording.drafts if d.slots])  # [drafts, V]
    tokens = torch.cat([d.tokens.flatten() for d in recording.drafts if d.slots])
    outside = ~torch.isin(torch.arange(VOCAB), DRAFT_IDS)
    assert len(q) > 100 and (q[:, outside] == 0).all() and torch.allclose(q.sum(-1), torch.ones(len(q)))
    assert torch.isin(tokens, DRAFT_IDS).all()
    assert 0 < out.stats.accepted.sum() < out.stats.drafted.sum()


def test_a_published_head_with_its_own_embedding_embeds_with_it(tmp_path):
    path = write_published_head(tmp_path / "own", embed=True)
    head, plain = load_head(path, target_layers=DEPTH), load_head(write_published_head(tmp_path / "plain"), DEPTH)
    embedding = read_safetensors(path / "model.safetensors")["embed_tokens.weight"]
    assert torch.equal(head.embed_tokens.weight, embedding.float())
    target = HFCausalLM(tiny_llama(VOCAB, layers=DEPTH, hidden=HIDDEN, dtype=torch.float32))
    drafters = [Recording(head), Recording(plain)]
    for drafter in drafters:
        method = mmspec.Method("eagle", lambda layout: drafter, RejectionVerifier())
        mmspec.generate(target, [[1, 2]], mmspec.Sequence1D(4), method=method, window=3, seed=0)
    own, shared = (torch.cat([d.q for d in drafter.drafts if d.slots], 1) for drafter in drafters)
    assert not torch.allclose(own, shared)  # the same head and features, another embedding: another q


def test_a_published_head_keeps_the_law_and_exact_stays_ar(tmp_path):
    head = load_head(write_published_head(tmp_path / "head"), target_layers=DEPTH)
    model = tiny_llama(VOCAB, layers=DEPTH, hidden=HIDDEN, dtype=torch.float32)
    prompts, layout, sampling = [[1, 2], [1, 7, 3]], mmspec.Sequence1D(12), {"temperature": 0.8, "top_k": 6}
    ar = mmspec.generate(HFCausalLM(model), prompts, layout, method="ar", sampling=sampling, seed=0, num_samples=3)
    exact = mmspec.generate(HFCausalLM(model), prompts, layout, method={"name": "eagle", "head": head, "exact": True},
                            window=5, sampling=sampling, seed=0, num_samples=3)
    assert torch.equal(exact.tokens, ar.tokens) and exact.stats.accepted.sum() > 0
    s = mmspec.Sampling(temperature=1.0)  # p has mass outside the draft vocabulary: only corrections reach it
    g = mmspec.generate(HFCausalLM(model), [[1, 2]], mmspec.Sequence1D(3), method={"name": "eagle", "head": head},
                        window=3, sampling=s, seed=0, num_samples=SAMPLES)
    law = llama_law(model, [1, 2], 3, s)
    assert chi_square_pvalue(sequence_id(g.tokens, VOCAB), law) > ALPHA
    assert 0.15 < g.stats.acceptance_per_position[0] < 0.85


def test_published_heads_that_cannot_run_are_refused_clearly(tmp_path):
    with pytest.raises(ValueError, match="RoPE scaling 'llama3' is not supported"):
        load_head(write_published_head(tmp_path / "llama3", rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}), target_layers=DEPTH)
    with pytest.raises(ValueError, match=r"missing \['midlayer.mlp.up_proj.weight'\]"):
        load_head(write_published_head(tmp_path / "missing", drop=("midlayer.mlp.up_proj.weight",)),
                  target_layers=DEPTH)
    with pytest.raises(ValueError, match="names no target layers"):
        load_head(tmp_path / "missing")
    with pytest.raises(ValueError, match="not an EAGLE-3 head"):
        load_head(write_published_head(tmp_path / "medusa", architectures=["MedusaModel"]), target_layers=DEPTH)

    def run(head, **target):
        model = tiny_llama(**{"vocab": VOCAB, "layers": DEPTH, "hidden": HIDDEN, **target})
        return mmspec.generate(HFCausalLM(model), [[1, 2]], mmspec.Sequence1D(6), window=3,
                               method={"name": "eagle", "head": head})

    head = load_head(write_published_head(tmp_path / "head"), target_layers=DEPTH, dtype=torch.float64)
    with pytest.raises(ValueError, match="the head drafts a vocabulary of 8 tokens, the target has 12"):
        run(head, vocab=12)
    with pytest.raises(ValueError, match=r"the head reads features of size 96 \(target layers \[2, 2, 1\]\), "
                                         "the target gave 144"):
        run(head, hidden=48)  # a head for another model of the same vocabulary
    head.config.target_layers = (1, 2, 6)  # as a config naming layers the target lacks would
    with pytest.raises(ValueError, match=r"features of layers \(1, 2, 6\) asked for \(a draft head's\); the model "
                                         "has 4 layers"):
        run(head)


def test_a_head_reading_layers_the_reference_gpt_lacks_is_refused():
    target = mmspec.ReferenceTarget(tiny_gpt(rope_axes=1))
    head = tiny_head(16, 24, layers=(0, 3), dtype=torch.float64)
    with pytest.raises(ValueError, match=r"features of layers \(0, 3\) asked for; the model has 2 layers"):
        mmspec.generate(target, torch.tensor([0]), mmspec.Sequence1D(6), method={"name": "eagle", "head": head},
                        window=3)


@pytest.mark.parametrize("head_dtype, target_dtype", [(torch.float32, torch.float64), (torch.bfloat16, torch.float32),
                                                      (torch.bfloat16, torch.bfloat16)], ids=str)
def test_a_head_runs_in_its_own_dtype_over_a_target_in_another(tmp_path, head_dtype, target_dtype):
    """load_head gives fp32 by default (bf16 on request), whatever the target runs in: the head takes the target's
    features and embeddings in its own dtype."""
    head = load_head(write_published_head(tmp_path / "head"), target_layers=DEPTH, dtype=head_dtype)
    target = HFCausalLM(tiny_llama(VOCAB, layers=DEPTH, hidden=HIDDEN, dtype=target_dtype))
    kw = {"sampling": {"temperature": 0.8}, "seed": 0, "num_samples": 3}
    ar = mmspec.generate(target, [[1, 2], [1, 7, 3]], mmspec.Sequence1D(12), method="ar", **kw)
    exact = mmspec.generate(target, [[1, 2], [1, 7, 3]], mmspec.Sequence1D(12), window=4,
                            method={"name": "eagle", "head": head, "exact": True}, **kw)
    assert torch.equal(exact.tokens, ar.tokens) and exact.stats.accepted.sum() > 0


class DraftsKept(EagleDrafter):
    """Keeps the drafts (tokens and q) of the rows still running, and by row and committed length the head's logits
    for the next index each time the head has them: after an update that ran, and where a draft was made."""

    def start(self, state, context):
        super().start(state, context)
        self.drafts, self.z_at = [], {}

    def _keep_z(self, state):
        for b in state.active.nonzero()[:, 0].tolist():  # (a row that is done keeps whatever its head last saw)
            self.z_at.setdefault((b, int(state.n[b])), []).append(self.z[b].clone())

    def propose(self, state, window):
        draft = super().propose(state, window)
        running = state.active.nonzero()[:, 0]
        self.drafts.append((draft.tokens[running], None if draft.q is None else draft.q[running]))
        if draft.slots:
            self._keep_z(state)
        return draft

    def update(self, state, draft, verdict, logp, k):
        super().update(state, draft, verdict, logp, k)
        if self.pending.first is None and self.z is not None:  # the update ran (nothing waits)
            self._keep_z(state)


class CycleInStep(CycleWindow):
    """Keeps the rows in step in windows of 1 (mmspec.verify_step.in_step_counts), after wider windows moved them apart:
    rows ahead wait, committing nothing."""

    window = None  # (no step asked yet: in_step is read when the policy is checked)

    def __call__(self, state):
        self.window = super().__call__(state)
        return self.window

    @property
    def in_step(self):
        return self.window == 1


def test_pairs_that_wait_through_windows_of_one_reach_the_head_as_each_steps_update_would():
    """Steps of window 1 leave their pairs waiting; the head forward that writes them when a draft is next asked
    gives the drafts (and their q) of a head updated after every step (`WAIT = 1`), also for rows kept in step,
    which commit nothing in some steps: the head's logits after a committed prefix are those of rows that ran at
    their own pace (`exact`: the same tokens)."""
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=1))
    head = tiny_head(16, 24, seed=3, dtype=torch.float64)
    sampling = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)
    windows = (4, 1, 4, 1, 1, 4, 1, 1, 1, 1, 1, 3, 2, 1)
    runs = {}
    for policy in (CycleWindow, CycleInStep):
        for wait in (EagleDrafter.WAIT, 1):
            drafter = DraftsKept(head, "gumbel")
            drafter.WAIT = wait
            method = mmspec.Method("eagle", lambda layout, d=drafter: d, GumbelMatchVerifier())
            g = mmspec.generate(target, torch.tensor([0, 1, 2]), mmspec.Sequence1D(30), method=method,
                                window=policy(windows), sampling=sampling, seed=0)
            runs[policy, wait] = g.tokens, drafter
    for policy in (CycleWindow, CycleInStep):
        (waited, drafter), (each, every) = runs[policy, EagleDrafter.WAIT], runs[policy, 1]
        assert torch.equal(waited, each)
        assert len(drafter.drafts) == len(every.drafts) and sum(d.shape[1] > 0 for d, _ in drafter.drafts) >= 6
        for (d, q), (e, r) in zip(drafter.drafts, every.drafts):
            assert torch.equal(d, e) and (q is None) == (r is None)
            assert q is None or torch.allclose(q, r, atol=1e-9)
    own, kept = runs[CycleWindow, EagleDrafter.WAIT][1].z_at, runs[CycleInStep, EagleDrafter.WAIT][1].z_at
    shared = own.keys() & kept.keys()
    assert len(shared) >= 6 and max(float((own[i][0] - kept[i][0]).abs().max()) for i in shared) < 1e-9
    # a row that waited, committing nothing, drafts from the logits it had
    again = [z for z in kept.values() if len(z) > 1]
    assert len(again) >= 3 and max(float((z[0] - x).abs().max()) for z in again for x in z[1:]) < 1e-9
