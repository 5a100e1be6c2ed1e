import torch

from mmspec.verify import rejection_sample

G = torch.Generator().manual_seed(0)


def _mrs(d, q, p):
    n = len(d)
    return rejection_sample(d, q.expand(n, -1), p.expand(n, -1), torch.rand(n, generator=G), torch.rand(n, generator=G))


def _freq(tokens, v=3):
    return torch.bincount(tokens, minlength=v).double() / len(tokens)


def test_rejection_sampling_turns_q_samples_into_p_samples_and_couples_maximally():
    q, p = torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.2, 0.2, 0.6])
    d = torch.multinomial(q, 200_000, replacement=True, generator=G)
    y, acc = _mrs(d, q, p)
    assert (_freq(y) - p).abs().max() < 0.005
    assert abs((y == d).double().mean() - torch.minimum(p, q).sum()) < 0.005  # 1 - TV
    assert torch.equal(acc, y == d) or (acc <= (y == d)).all()


def test_one_hot_q_accepts_with_probability_p_of_the_draft():
    p = torch.tensor([0.5, 0.2, 0.3])
    d = torch.ones(100_000, dtype=torch.long)
    y, acc = _mrs(d, torch.tensor([0.0, 1.0, 0.0]), p)
    assert abs(acc.double().mean() - 0.2) < 0.005
    assert (_freq(y) - p).abs().max() < 0.005


def test_stored_q_rule_for_a_kept_carried_slot():
    """q_old = (.5, .5, 0) kept under p_new = (0, .5, .5), then verified against (.2, .3, .5): storing
    p_new gives (.2, .3, .5); storing q_old gives (0, .30, .70)."""
    q_old, p_new, p_next = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.0, 0.5, 0.5]), torch.tensor([0.2, 0.3, 0.5])
    d = torch.multinomial(q_old, 200_000, replacement=True, generator=G)
    carried, kept = _mrs(d, q_old, p_new)
    right, _ = _mrs(carried, p_new, p_next)
    assert (_freq(right) - p_next).abs().max() < 0.005
    n = len(d)
    stored = torch.where(kept[:, None], q_old.expand(n, -1), p_new.expand(n, -1))
    wrong, _ = rejection_sample(carried, stored, p_next.expand(n, -1), torch.rand(n, generator=G),
                                torch.rand(n, generator=G))
    assert (_freq(wrong) - torch.tensor([0.0, 0.3, 0.7])).abs().max() < 0.005


def test_residual_is_exact_without_epsilon_leaks():
    p = torch.tensor([0.0, 0.5, 0.5, 0.0])
    q = torch.tensor([0.0, 1.0, 0.0, 0.0])
    y, _ = _mrs(torch.ones(50_000, dtype=torch.long), q, p)
    assert set(y.tolist()) <= {1, 2}


def test_greedy_gumbel_max_skips_the_noise_and_draws_what_the_noise_would():
    import mmspec
    from mmspec.rng import Streams
    from mmspec.state import DecodeState

    greedy = mmspec.Sampling(temperature=0)
    logp = greedy.logp(torch.randn(3, 5, 11, generator=G))  # [B, W, V] one-hot
    state = DecodeState(layout=mmspec.Sequence1D(8), max_window=5, vocab_size=11, sampling=greedy,
                        streams=Streams([0, 1, 2], 11), seq=torch.full((3, 13), -1), forced=torch.full((3, 13), -1))
    index = state.index(5)
    assert torch.equal(state.gumbel_max(logp, index), (logp + state.streams.gumbel(index)).argmax(-1))
    sampled = DecodeState(layout=mmspec.Sequence1D(8), max_window=5, vocab_size=11, sampling=mmspec.Sampling(),
                          streams=Streams([0, 1, 2], 11), seq=torch.full((3, 13), -1), forced=torch.full((3, 13), -1))
    logp = sampled.sampling.logp(torch.zeros(3, 5, 11))  # uniform p: only the noise decides
    assert not torch.equal(sampled.gumbel_max(logp, index), logp.argmax(-1))
