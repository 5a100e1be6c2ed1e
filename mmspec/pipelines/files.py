"""Where a pipeline output's save() puts its files: numbered names that replace nothing unless asked, each written
whole or not at all."""
from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Callable


def numbered(folder: "str | Path", stem: str, count: int, suffixes: tuple[str, ...],
             overwrite: bool = False) -> list[list[Path]]:
    """Paths of `count` outputs, each with one file per suffix: stem_000.suffix, stem_001.suffix... With
    `overwrite`, from 000; else numbered on after the highest number the folder already holds for the stem, so that
    a second run beside a first keeps both."""
    folder = Path(folder)
    taken = [int(m.group(1)) for p in (folder.iterdir() if folder.is_dir() else ())
             if (m := re.fullmatch(rf"{re.escape(stem)}_(\d+)\.[^.]+", p.name))]
    first = 0 if overwrite or not taken else max(taken) + 1
    return [[folder / f"{stem}_{i:03d}.{suffix}" for suffix in suffixes] for i in range(first, first + count)]


def write_file(path: Path, write: Callable[[Path], None], overwrite: bool = False) -> Path:
    """write(temporary path) fills a file beside `path` with the same suffix, which then takes the name: never a
    partial file at `path` (an interrupted write removes its temporary file), and without `overwrite` never one
    that replaces a file already there (FileExistsError)."""
    tmp = path.with_name(f".{path.stem}.part{os.getpid()}{path.suffix}")
    try:
        write(tmp)
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails where a file is: no run replaces another's output
            except FileExistsError:
                raise FileExistsError(f"{path} exists (another run wrote it meanwhile); nothing replaced it") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def unused(path: "str | Path", overwrite: bool = False) -> Path:
    """Where results go that replace nothing: `path` when nothing is there (or an empty folder), or with `overwrite`;
    else the first free of path-001, path-002... (a file: stem-001.suffix), so that a rerun beside a first keeps both
    (`mmspec bench` wrote over its earlier results)."""
    path = Path(path)
    if overwrite or not path.exists() or path.is_dir() and not any(path.iterdir()):
        return path
    stem, suffix = (path.name, "") if path.is_dir() else (path.stem, path.suffix)
    return next(p for n in itertools.count(1) if not (p := path.with_name(f"{stem}-{n:03d}{suffix}")).exists())
