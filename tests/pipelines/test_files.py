import pytest

from mmspec.pipelines.files import numbered, unused, write_file


def test_numbers_go_on_after_the_folder_s_and_start_over_only_when_told(tmp_path):
    assert numbered(tmp_path / "none", "image", 2, ("png",)) == [[tmp_path / "none" / "image_000.png"],
                                                                   [tmp_path / "none" / "image_001.png"]]
    for name in ("image_000.png", "image_004.png", "video_009.gif", ".image_007.part1.png"):
        (tmp_path / name).write_text("kept")
    assert [p.name for p, in numbered(tmp_path, "image", 2, ("png",))] == ["image_005.png", "image_006.png"]
    assert [p.name for p, in numbered(tmp_path, "image", 1, ("png",), overwrite=True)] == ["image_000.png"]
    assert [p.name for p in numbered(tmp_path, "video", 1, ("gif", "mp4"))[0]] == ["video_010.gif", "video_010.mp4"]


def test_a_file_is_written_whole_or_not_at_all_and_replaces_nothing_unasked(tmp_path):
    path = tmp_path / "image_000.png"
    write_file(path, lambda tmp: tmp.write_text("first"))
    with pytest.raises(FileExistsError, match="nothing replaced it"):
        write_file(path, lambda tmp: tmp.write_text("second"))
    assert path.read_text() == "first"
    write_file(path, lambda tmp: tmp.write_text("third"), overwrite=True)
    assert path.read_text() == "third"

    def interrupted(tmp):
        tmp.write_text("par")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        write_file(tmp_path / "image_001.png", interrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image_000.png"]


def test_results_go_beside_earlier_ones_unless_told_to_overwrite(tmp_path):
    assert unused(tmp_path / "table") == tmp_path / "table"
    (tmp_path / "table").mkdir()
    assert unused(tmp_path / "table") == tmp_path / "table"  # (an empty folder holds no results)
    (tmp_path / "table" / "table.json").write_text("{}")
    (tmp_path / "table-001").mkdir()
    assert unused(tmp_path / "table") == tmp_path / "table-002"
    assert unused(tmp_path / "table", overwrite=True) == tmp_path / "table"
    (tmp_path / "bench.json").write_text("{}")
    assert unused(tmp_path / "bench.json") == tmp_path / "bench-001.json"
