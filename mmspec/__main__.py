"""The `mmspec` command (and `python -m mmspec`): Ctrl-C is handled from its first moment (mmspec.interrupt), before
mmspec.cli imports torch and the models' libraries."""
import sys

from mmspec import interrupt


def main() -> int:
    interrupt.install()
    try:
        from mmspec.cli import main as command
    except KeyboardInterrupt:
        return interrupt.report()
    return command()


if __name__ == "__main__":
    sys.exit(main())
