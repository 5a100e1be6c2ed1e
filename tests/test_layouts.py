import torch

from mmspec.layouts import FREE, Grid2D, Grid3D, Sequence1D


def test_sequence():
    s = Sequence1D(5)
    assert len(s) == 5 and s.positions()[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert s.neighbour("left").tolist() == [-1, 0, 1, 2, 3] and (s.forced() == FREE).all()


def test_grid2d_positions_and_neighbours():
    g = Grid2D(2, 3)
    assert g.positions().tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert g.neighbour("above").tolist() == [-1, -1, -1, 0, 1, 2]


def test_grid2d_row_end_tokens_are_structural():
    g = Grid2D(2, 2, row_end_token=99)
    assert len(g) == 6
    assert g.forced().tolist() == [FREE, FREE, 99, FREE, FREE, 99]
    assert g.positions()[2].tolist() == [0, 2]
    assert g.neighbour("above").tolist() == [-1, -1, -1, 0, 1, 2]


def test_grid3d_frames():
    g = Grid3D(2, 2, 2, frame_end_token=7)
    assert len(g) == 10
    assert g.positions()[4].tolist() == [0, 2, 0] and g.positions()[5].tolist() == [1, 0, 0]
    assert g.forced().tolist() == [FREE] * 4 + [7] + [FREE] * 4 + [7]
    assert g.neighbour("prev-frame").tolist() == [-1] * 5 + [0, 1, 2, 3, 4]
    above = g.neighbour("above")
    assert above[5:].tolist() == [-1, -1, 5, 6, 7]  # first row of frame 1 has nothing above in its frame
    assert torch.equal(Grid3D(1, 2, 2).positions()[:, 1:], Grid2D(2, 2).positions())


def test_grid2d_end_tokens_follow_the_grid():
    g = Grid2D(2, 2, row_end_token=9, end_tokens=(5, 6, 2))
    assert len(g) == 9
    assert g.forced().tolist() == [FREE, FREE, 9, FREE, FREE, 9, 5, 6, 2]
    assert g.positions()[-3:].tolist() == [[2, 0], [2, 1], [2, 2]]
