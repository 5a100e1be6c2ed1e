import numpy as np
import pytest
from PIL import Image

from mmspec.pipelines.scene import BACKGROUNDS, SPRITE_EDGES, STEP, cut_out, first_frame, parse, place, pose


@pytest.mark.parametrize("prompt,expected", [
    ("bounce red apple", ("bounce", None, "red apple")),
    ("slide right racing car", ("slide right", None, "racing car")),
    ("Zoom in red heart on a blue background", ("zoom in", "blue", "red heart")),
    ("zoom out pizza", ("zoom out", None, "pizza")),
    ("zoom red heart", ("zoom in", None, "red heart")),  # how training captions read ("in" is a stop word)
    ("red heart", (None, None, "red heart")),
    ("rotate sun magenta background", ("rotate", None, "sun magenta")),  # not a trained colour: left in the subject
])
def test_parse_finds_motion_background_and_subject(prompt, expected):
    assert parse(prompt) == expected


def _emoji(background=(255, 255, 255)):
    """A red disc with a white eye on a plain background."""
    a = np.full((64, 64, 3), background, np.uint8)
    yy, xx = np.mgrid[:64, :64]
    a[(yy - 32) ** 2 + (xx - 32) ** 2 < 24 ** 2] = (220, 20, 20)
    a[(yy - 28) ** 2 + (xx - 26) ** 2 < 4 ** 2] = 255
    return Image.fromarray(a)


@pytest.mark.parametrize("colour", ["white", "blue", "yellow"])
def test_cut_out_makes_the_surrounding_background_transparent_and_keeps_white_inside(colour):
    alpha = np.asarray(cut_out(_emoji(BACKGROUNDS[colour])))[..., 3]  # the disc's square: pixels 9..55
    assert alpha.shape == (47, 47)
    assert alpha[0, 0] == 0 and alpha[46, 46] == 0 and alpha[23, 23] == 255 and alpha[19, 17] == 255


def test_cut_out_cuts_a_small_subject_off_centre_to_its_square():
    """emoji-image draws a subject at any size and place: frame 0's sprite is the subject, not the canvas."""
    a = np.full((64, 64, 3), 255, np.uint8)
    a[40:52, 6:14] = (20, 20, 220)  # 12 tall, 8 wide, near the bottom left
    sprite = np.asarray(cut_out(Image.fromarray(a)))
    assert sprite.shape == (12, 12, 4)
    assert (sprite[:, 2:10, 3] == 255).all() and (sprite[:, :2, 3] == 0).all() and (sprite[:, 10:, 3] == 0).all()


@pytest.mark.parametrize("motion,where", [("slide left", "right"), ("slide right", "left"), ("bounce", "bottom"),
                                          ("slide down", "top")])
def test_first_frame_puts_the_sprite_where_the_motion_starts(motion, where):
    frame = np.asarray(first_frame(_emoji(), motion, "green"))  # [32, 32, 3]
    red = (frame[..., 0] > 150) & (frame[..., 1] < 100)
    ys, xs = np.nonzero(red)
    assert tuple(frame[0, 0]) == BACKGROUNDS["green"] and red.sum() > 50
    centre = {"right": xs.mean() > 20, "left": xs.mean() < 12, "bottom": ys.mean() > 20, "top": ys.mean() < 12}
    assert centre[where]


def test_a_slide_starts_at_a_side_and_travels_whole_patches():
    assert pose("slide right", 0.0, 16, 4, 8, 32)[2:] == (0, 8.0)
    assert pose("slide right", 1.0, 16, 4, 8, 32)[2:] == (12, 8.0)  # as far as the largest sprite can go
    assert pose("slide left", 0.0, 16, 4, 8, 32)[2:] == (16, 8.0)


@pytest.mark.parametrize("motion", ["slide left", "slide right", "slide up", "slide down", "bounce"])
def test_copy_motions_stay_on_the_patch_grid_and_move_at_the_same_frames_for_every_edge(motion):
    # so every code of a later frame is a code of frame 0, moved, and when it moves is the frame's index alone
    moves = set()
    for edge in range(SPRITE_EDGES[0], SPRITE_EDGES[1] + 1):
        track = [pose(motion, i / 7, edge, 8, 8, 32)[2:] for i in range(8)]
        assert all(v % STEP == 0 for xy in track for v in xy)
        moves.add(tuple(np.abs(np.diff(np.array(track, dtype=float), axis=0)).sum(1)))
    assert len(moves) == 1 and sum(next(iter(moves))) > 0


def test_a_pose_is_drawn_on_the_frame():
    sprite = cut_out(_emoji())
    assert place(sprite, pose("zoom in", 0.0, 16, 8, 8, 32), (0, 0, 0), 32).shape == (32, 32, 3)
