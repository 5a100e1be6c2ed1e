import pytest


@pytest.fixture(scope="module")
def folder(request, tmp_path_factory):
    """The module's tiny family folder, written once by its `BUILD` (a tiny.tiny_*_folder) with its defaults."""
    build = request.module.BUILD
    path = tmp_path_factory.mktemp(build.__name__) / "model"
    build(path)
    return path
