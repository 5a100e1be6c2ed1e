import re
from pathlib import Path


ROOT = Path(__file__).parents[1]
TEST_COMMAND = 'pip install -e ".[dev]" && python -m pytest'


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[2:6] == ["```bash", 'pip install -e . && mmspec generate image "red heart" --out out/ --compare',
                          TEST_COMMAND, "```"]
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == TEST_COMMAND


def test_readme_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(example, "README.md", "exec"), {})
    out = capsys.readouterr().out
    for method in ("ar", "jacobi", "coupled"):
        assert re.search(rf"^{method} .*NFE +\d+ .*mean acceptance length \d", out, re.M)
