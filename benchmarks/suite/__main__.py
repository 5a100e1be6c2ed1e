"""python -m benchmarks.suite NAME [KIND] [options]: a whole suite into a folder, in a clone (NAME: quick,
acceptance, overhead; the options are `mmspec bench`'s, see `mmspec bench --help`). The suites are the clone's
benchmarks, not the package's: this hands them to mmspec.cli, which runs them as `mmspec bench KIND --suite NAME`."""
import sys

import benchmarks.suite
from mmspec.cli import main as cli_main


def main(argv: "list[str] | None" = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        print("usage: python -m benchmarks.suite NAME [KIND] [options of mmspec bench]; NAME: "
              f"{', '.join([*benchmarks.suite.SUITES, 'overhead'])}", file=sys.stderr)
        return 2
    name, *rest = argv
    return cli_main(["bench", *rest, "--suite", name], suites=benchmarks.suite)


if __name__ == "__main__":
    sys.exit(main())
