from PIL import Image

from mmspec.demo.views import as_files


def test_pictures_become_files_written_once_under_fresh_names(tmp_path):
    """Identical pictures, and a picture handed out again, get files of their own (gradio rewrote a picture's file in
    place, named by its bytes, while a browser read it); text and paths pass as they are."""
    red = Image.new("RGB", (4, 4), (200, 0, 0))
    first = as_files([red, red.copy()], tmp_path)
    again = as_files({"plot": red, "stats": "3 forwards", "video": "/a/b.mp4"}, tmp_path)
    paths = first + [again["plot"]]
    assert len(set(paths)) == 3 and all(p.startswith(str(tmp_path)) and p.endswith(".png") for p in paths)
    assert all(Image.open(p).convert("RGB").tobytes() == red.tobytes() for p in paths)
    assert again["stats"] == "3 forwards" and again["video"] == "/a/b.mp4"
    assert as_files("text", tmp_path) == "text" and as_files(None, tmp_path) is None
