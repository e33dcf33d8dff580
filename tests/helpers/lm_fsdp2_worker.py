"""One rank of a torchrun job that trains ``lm train`` settings (argv: out, then ``KEY=VALUE``
overrides) and, when the environment names ``CTXSTAIR_TEST_KILL_AT``, SIGKILLs itself when that
step begins: every rank stops at once, as when a job is killed."""

import os
import signal
import sys

from ctxstair.config import apply_overrides, parse_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.lm.train import train_lm


def main() -> None:
    out, *settings = sys.argv[1:]
    cfg = apply_overrides(LMConfig(), parse_overrides(settings))
    kill_at = int(os.environ.get("CTXSTAIR_TEST_KILL_AT", "-1"))

    def hook(step: int) -> None:
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    train_lm(cfg, out, resume=True, hook=hook)


if __name__ == "__main__":
    main()
