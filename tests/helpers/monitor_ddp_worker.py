"""One process of the two-process Trainer run of tests/monitor/test_monitor.py (started by torchrun): the
example's Trainer with the staircase callback; each rank writes what it measured to ``rank<r>.json``."""

import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from monitor_helpers import TINY_ARGS, example  # noqa: E402

if __name__ == "__main__":
    out = Path(sys.argv[1])
    module = example()
    args = module.parser().parse_args([*TINY_ARGS, "--out", str(out), "--corpus", sys.argv[2], "--report-to", "none"])
    tokenizer, windows = module.corpus_windows(module.load_text(args.corpus), args.vocab_size, args.window,
                                               args.max_tokens)
    trainer, callback = module.build_trainer(args, tokenizer, windows)
    trainer.train()
    rank = dist.get_rank()
    record = {"world_size": dist.get_world_size(), "measured_steps": callback.measured_steps,
              "logged_steps": [row["step"] for row in trainer.state.log_history if "staircase/rho_next" in row]}
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    del trainer, callback  # as the example does before it ends the process group
    module.end_distributed()
