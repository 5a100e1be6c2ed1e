"""Jacobi drafters keep the laws of their carried slots only where something reads them."""
import torch

import mmspec
from mmspec import methods
from mmspec.drafters.proactive import ProactiveDrafter
from mmspec.steps import TreeDraft
from tiny import tiny_gpt


def test_exact_keeps_no_laws_and_gives_ars_tokens_without_them():
    layout = mmspec.Grid2D(4, 4)
    assert not methods.exact().make_drafter(layout).laws  # its argmax match reads no q
    for method in (methods.jacobi(), methods.coupled(), methods.gumbel()):  # rejection sampling reads q
        assert method.make_drafter(layout).laws
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=2, seed=0))
    call = dict(sampling=mmspec.Sampling(temperature=0.9, top_k=12), seed=0, num_samples=2)
    ar = mmspec.generate(target, torch.tensor([0, 3]), layout, method="ar", **call)
    exact = mmspec.generate(target, torch.tensor([0, 3]), layout, method="exact", window=5, **call)
    assert torch.equal(exact.tokens, ar.tokens) and exact.stats.nfe.max() < ar.stats.nfe.max()


def test_exact_with_branches_keeps_slot_zeros_law_and_grows_its_branches(monkeypatch):
    """The branches of `exact` are slot 0's runners-up under its law: without it a chain would go out bare, and
    `exact == ar` would still hold, so this checks that trees are drafted."""
    drafter = methods.exact(proactive=(3, 2)).make_drafter(mmspec.Grid2D(4, 4))
    assert isinstance(drafter, ProactiveDrafter) and drafter.chain.laws
    trees = []
    propose = ProactiveDrafter.propose
    monkeypatch.setattr(ProactiveDrafter, "propose",
                        lambda self, state, window: trees.append(isinstance(d := propose(self, state, window), TreeDraft)) or d)
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=2, seed=0))
    mmspec.generate(target, torch.tensor([0, 3]), mmspec.Grid2D(4, 4), method={"name": "exact", "proactive": [3, 2]},
                    sampling=mmspec.Sampling(temperature=0.9, top_k=12), seed=0, num_samples=2, window=5)
    assert sum(trees) > len(trees) // 2
