"""The README is what a newcomer runs first: its commands parse, its Python runs, its links lead somewhere."""
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
# without an NVIDIA GPU, torch's CPU wheels first (the commands themselves take only the package registries, as CI)
CPU_TORCH = "# no NVIDIA GPU? first: pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu (no CUDA)"
TEST_COMMAND = 'pip install -e ".[dev]" && python -m pytest'


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def needs_your_checkpoint(code: str) -> bool:
    """Blocks about bringing your own model name folders that are not in the repository."""
    return "path/to/" in code or ".safetensors\"" in code


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    lines = README.splitlines()
    assert lines[2:7] == ["```bash", CPU_TORCH, 'pip install -e . && mmspec generate video "bounce red apple" '
                          '--window 64 --out out/ --compare',
                          TEST_COMMAND, "```"]
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == TEST_COMMAND


def test_readme_reads_in_five_minutes():
    assert len(README.splitlines()) <= 150


@pytest.mark.parametrize("index", range(len(blocks(README, "python"))))
def test_readme_python_runs(index, tmp_path, monkeypatch, capsys):
    """Every block runs on the bundled models (in a scratch folder: they save files); blocks that load your own
    checkpoint are compiled only."""
    code = blocks(README, "python")[index]
    compiled = compile(code, f"README.md python block {index}", "exec")
    if needs_your_checkpoint(code):
        return
    monkeypatch.chdir(tmp_path)
    exec(compiled, {})
    out = capsys.readouterr().out
    if "mmspec.generate(" in code:
        for method in ("ar", "jacobi", "coupled"):
            assert re.search(rf"^{method} .*NFE +\d+ .*mean acceptance length \d", out, re.M)
    if "ImagePipeline" in code:
        assert (tmp_path / "heart.png").is_file() and "'window': 'auto, mean" in out


def test_readme_commands_parse_and_their_files_exist():
    from mmspec.cli import build_parser

    parser = build_parser()
    commands = [line.split("#")[0].strip() for block in blocks(README, "bash") for line in block.splitlines()]
    commands = [c for c in commands if c.startswith("mmspec ")]
    assert len(commands) >= 5
    for command in commands:
        args = parser.parse_args(shlex.split(command)[1:])
        for name in ("image", "mask", "job"):
            if getattr(args, name, None) is not None:
                assert (ROOT / getattr(args, name)).is_file(), command


@pytest.mark.parametrize("page", ["README.md", "docs/methods.md", "docs/usage.md", "docs/engine.md", "docs/cosmos.md", "docs/serving.md",
                                  "benchmarks/README.md"])
def test_links_lead_to_files(page):
    text = (ROOT / page).read_text()
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / page).parent.joinpath(target).exists(), f"{page} links to missing {target}"


@pytest.mark.parametrize("page", ["docs/methods.md", "docs/usage.md"])
def test_the_docs_python_compiles(page):
    for i, code in enumerate(blocks((ROOT / page).read_text(), "python")):
        compile(code, f"{page} python block {i}", "exec")


@pytest.mark.parametrize("page", ["README.md", "docs/methods.md"])
def test_the_methods_table_is_the_registrys(page):
    # the table is written by mmspec.methods.method_table(): paste its output where the page differs
    from mmspec.methods import method_table

    assert method_table() in (ROOT / page).read_text(), f"{page}'s methods table is not method_table()'s"


def test_benchmark_scripts_are_named_as_they_run():
    """`python benchmarks/x.py` puts benchmarks/, not the clone, on Python's path: a script that imports the clone's
    `benchmarks` package runs only as `python -m benchmarks.x`, so that is how every page and docstring names it."""
    importing = {p.stem for p in (ROOT / "benchmarks").glob("*.py")
                 if re.search(r"^\s*(from|import) benchmarks[. ]", p.read_text(), re.M)}
    assert {"window_synthetic", "projection"} <= importing  # (the check below reads something)
    pages = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("benchmarks/**/*.md"),
             *ROOT.glob("benchmarks/**/*.py")]
    wrong = {f"{page.relative_to(ROOT)}: python benchmarks/{name}.py"
             for page in pages for name in re.findall(r"python benchmarks/(\w+)\.py", page.read_text())
             if name in importing}
    assert not wrong, sorted(wrong)
