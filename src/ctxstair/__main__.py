"""The ``ctxstair`` command (also ``python -m ctxstair``): the floating-point mode is chosen from
``--reproducible`` before the command line's modules load numpy and torch (:mod:`ctxstair.numerics`),
and figures are drawn off-screen."""

import os
import sys


def main() -> int:
    """Configure the numerics from ``sys.argv``, then run :func:`ctxstair.cli.main`."""
    from ctxstair import numerics
    from ctxstair.errors import InputError

    try:
        numerics.configure(reproducible=True if "--reproducible" in sys.argv[1:] else None)
    except InputError as error:
        print(f"ctxstair: error: {error}", file=sys.stderr)
        return 2
    os.environ.setdefault("MPLBACKEND", "Agg")  # the command writes figures to files, never to a screen
    from ctxstair.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
