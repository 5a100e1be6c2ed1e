"""The `mmspec` command (and `python -m mmspec`): Ctrl-C is handled from its first moment (mmspec.interrupt), before
mmspec.cli imports torch and the models' libraries."""
import sys

from mmspec import interrupt


def main() -> int:
    interrupt.install()
    try:
        from mmspec.cli import main as command
        status = command()
    except KeyboardInterrupt:  # (before the command's own handling: loading it, reading its arguments)
        status = interrupt.report()
    if interrupt.received():
        interrupt.end(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
