import re
from pathlib import Path


def test_readme_example_runs(capsys):
    text = (Path(__file__).parents[1] / "README.md").read_text()
    lines = text.splitlines()
    assert lines[3] == 'pip install -e ".[dev]"' and lines[4] == "python -m pytest"
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(example, "README.md", "exec"), {})
    out = capsys.readouterr().out
    for method in ("ar", "jacobi", "coupled"):
        assert re.search(rf"^{method} .*NFE +\d+ .*mean acceptance length \d", out, re.M)
