"""``python -m ctxstair`` runs the command line."""

import sys

from ctxstair.cli import main

sys.exit(main())
