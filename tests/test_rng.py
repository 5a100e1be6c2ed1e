"""Randomness is a pure function of (row seed, position) for noise and (row seed, draw count) for the rest."""
import random

import torch

from mmspec.rng import Streams, mix

V = 50


def _splitmix64_finaliser(x: int) -> int:
    m = (1 << 64) - 1
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def test_mix_is_splitmix64_on_this_platform():
    """torch's int64 arithmetic must wrap mod 2^64 for the hash to be the published one."""
    rnd = random.Random(0)
    values = [rnd.getrandbits(64) for _ in range(2000)] + [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
    signed = torch.tensor([v - (1 << 64) if v >> 63 else v for v in values])
    assert [x & ((1 << 64) - 1) for x in mix(signed).tolist()] == [_splitmix64_finaliser(v) for v in values]


def test_noise_of_a_position_does_not_depend_on_window_step_or_batch():
    """The same positions asked for through different windows, in different orders and steps, and by rows
    in different batches give the same noise rows."""
    s = Streams([7, 3], V)
    whole = s.gumbel(torch.arange(40).expand(2, -1))  # [2, 40, V]
    again = Streams([7, 3], V)
    pieces = [again.gumbel(torch.tensor([[a + j for j in range(w)]] * 2)) for a, w in ((30, 10), (0, 5), (3, 17), (19, 2))]
    for (a, w), piece in zip(((30, 10), (0, 5), (3, 17), (19, 2)), pieces):
        assert torch.equal(piece, whole[:, a:a + w])
    ragged = again.gumbel(torch.tensor([[5, 6, 7], [20, 21, 22]]))  # rows at different positions
    assert torch.equal(ragged[0], whole[0, 5:8]) and torch.equal(ragged[1], whole[1, 20:23])
    alone = Streams([3], V).gumbel(torch.arange(40)[None])
    assert torch.equal(alone[0], whole[1])
    assert not torch.equal(whole[0], whole[1])  # seeds matter


def test_aux_draws_are_a_function_of_the_draw_count():
    a, b = Streams([1, 2], V), Streams([1, 2], V)
    first, second = a.uniform(2, 3), a.uniform(4)
    flat = b.uniform(10)
    assert torch.equal(torch.cat([first.flatten(1), second], 1), flat)
    assert not torch.equal(Streams([1], V).uniform(10), Streams([1], V).gumbel(torch.arange(1)[None])[0, :, :10])


def test_a_few_draws_hashed_in_python_are_the_tensor_hash(monkeypatch):
    import mmspec.rng

    seeds = [5, -3, 2**62, 12345]  # keys of either sign as int64
    few, many = Streams(seeds, V), Streams(seeds, V)
    for shape in [(1,), (7,), (2, 6), (16,), (5, 3)]:
        x = few.uniform(*shape)  # 4 rows x at most 16 draws: the Python path
        monkeypatch.setattr(mmspec.rng, "_FEW_DRAWS", 0)
        assert torch.equal(x, many.uniform(*shape)), shape
        monkeypatch.undo()


def test_draws_have_the_right_laws():
    s = Streams([0, 1, 2, 3], 1000)
    g = s.gumbel(torch.arange(250).expand(4, -1)).flatten().double()  # 1M Gumbel(0, 1) draws
    for x in (-1.0, 0.0, 0.5, 1.0, 2.0, 4.0):
        expected = torch.exp(-torch.exp(torch.tensor(-x, dtype=torch.float64)))
        assert abs((g <= x).double().mean() - expected) < 3e-3, x
    u = s.uniform(250_000).flatten().double()
    assert 0 < u.min() and u.max() < 1
    for x in (0.1, 0.25, 0.5, 0.9):
        assert abs((u <= x).double().mean() - x) < 3e-3
    r = s.randint(7, 100_000).flatten()
    assert r.min() == 0 and r.max() == 6 and (torch.bincount(r).double() / len(r) - 1 / 7).abs().max() < 5e-3


def test_remembered_noise_rows_are_the_hashed_ones(monkeypatch):
    """On a CPU noise rows are hashed once and read back from memory: the same bits as hashing them where asked,
    for windows that move on, go back and jump, with room for all rows, for some of them, or for none."""
    import mmspec.rng as rng

    g = torch.Generator().manual_seed(0)
    windows = []
    for _ in range(60):
        start = torch.randint(0, 300, (3,), generator=g)
        windows.append(start[:, None] + torch.arange(int(torch.randint(1, 17, (1,), generator=g))))
    monkeypatch.setattr(rng, "MEMO_BYTES", 0)
    hashed = Streams([5, 6, 7], V)
    expected = [hashed.gumbel(w) for w in windows]
    assert hashed._remembered == 0
    for budget in (3 * 200 * V * 4, 1 << 30):  # room for the first 200 positions only, then for all
        monkeypatch.setattr(rng, "MEMO_BYTES", budget)
        s = Streams([5, 6, 7], V)
        assert all(torch.equal(s.gumbel(w), e) for w, e in zip(windows, expected))
        assert 0 < s._remembered <= 200 if budget < 1 << 30 else s._remembered >= 316


def test_noise_of_some_rows_is_theirs_in_every_row_s(monkeypatch):
    """`gumbel(index, rows)`: the rows' noise rows alone, read from memory or hashed, equal to theirs among every
    row's; `running` names the live rows only where some are not."""
    import mmspec.rng as rng

    index = torch.tensor([[3, 4, 5], [9, 10, 11], [0, 1, 2]])
    whole = Streams([5, 6, 7], V).gumbel(index)
    rows = torch.tensor([2, 0])
    for budget in (1 << 30, 0):  # remembered, then hashed where asked
        monkeypatch.setattr(rng, "MEMO_BYTES", budget)
        s = Streams([5, 6, 7], V)
        assert torch.equal(s.gumbel(index[rows], rows), whole[rows]) and (s._remembered > 0) == (budget > 0)
    s = Streams([5, 6, 7], V)
    s.live = torch.tensor([True, True, True])
    assert s.running() is None
    s.live[1] = False
    assert s.running().tolist() == [0, 2]
