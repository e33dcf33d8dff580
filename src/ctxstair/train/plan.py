"""The engine's execution plan: how one forward-and-backward pass over the K stacked members is run
(docs/design.md, "Execution plan"; the numbers it computes are SPEC §5's).

A plan names, for every number of samples a pass of the run takes (the full batch, the minibatch
and a last shorter minibatch), how many members one pass takes together (members are run in
groups, each group's backward pass before the next group's forward) and, for CBOW models, how the
embedding sum is computed (``gather`` or ``counts``, :func:`ctxstair.models.cbow.embedding_sum`).

Every grouping in which no group holds a single member gives the same weights bitwise (the
members do not interact, and a batched kernel computes each member alike whatever the batch; a
lone member runs through other kernels and may differ in the last bit), and so does the grouping
of a 1-member ensemble. The two embedding sums agree up to rounding only. So the plan is chosen by
a rule from the shapes alone (:func:`choose_plan`), never from a timing, recorded in the run's
``resources.json`` when training starts and read back from there on ``--resume``
(:func:`ctxstair.train.engine.train_run`), so that a resumed run computes what it started with.

    plan = choose_plan(cfg, model, n=1600)
    plan.as_dict()   # {"passes": [{"samples": 1600, "members_per_group": 6, "embedding_sum": "gather"}]}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ctxstair.config import RunConfig
from ctxstair.errors import InputError
from ctxstair.models import Ensemble
from ctxstair.models.cbow import EMBEDDING_SUM_METHODS, CBOWEnsemble, embedding_sum_method

#: Activation memory of one forward-and-backward pass over a group of members. Members are run in
#: groups that fit it instead of all at once, as few groups as fit and of equal size (at most one
#: member apart). Measured on the 2-core machine (benchmarks/RESULTS.md, "Ensemble training"): the
#: 32 staircase-add members (n = 1,600, V = 81, d = 128; 5.3 MB a member) ran in groups of 8–16 in
#: 0.7× the time of the whole ensemble on a quiet machine, and with the cores oversubscribed groups
#: of 16 took half the time of groups of 6 (every parallel operation waits for a thread that has
#: lost its core, so fewer, larger operations win); 96 MiB gives two groups of 16.
PASS_BYTES = 96 << 20


@dataclass(frozen=True)
class PassPlan:
    """How a pass over ``samples`` samples runs: ``members_per_group`` members at a time (≥ 1) and
    the embedding sum by ``embedding_sum`` (``gather`` or ``counts``; None for a model without one)."""

    samples: int
    members_per_group: int
    embedding_sum: str | None


@dataclass(frozen=True)
class ExecutionPlan:
    """One :class:`PassPlan` for each number of samples a pass of the run takes."""

    passes: tuple[PassPlan, ...]

    def for_samples(self, n: int) -> PassPlan:
        """The pass plan for a batch of ``n`` samples; InputError when the plan has none."""
        for plan in self.passes:
            if plan.samples == n:
                return plan
        raise InputError(f"the execution plan has no pass of {n} samples (it has "
                         f"{[p.samples for p in self.passes]})")

    def as_dict(self) -> dict:
        """The plan as JSON-ready data, as ``resources.json`` records it."""
        return {"passes": [asdict(p) for p in self.passes]}

    @classmethod
    def from_dict(cls, data: dict) -> ExecutionPlan:
        """The plan of :meth:`as_dict`; InputError for data that is not one."""
        try:
            passes = tuple(PassPlan(int(p["samples"]), int(p["members_per_group"]), p["embedding_sum"])
                           for p in data["passes"])
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"not an execution plan: {data!r} ({error})") from None
        if any(p.members_per_group < 1 or p.embedding_sum not in (None, *EMBEDDING_SUM_METHODS) for p in passes):
            raise InputError(f"not an execution plan: {data!r}")
        return cls(passes)

    def apply(self, model: Ensemble) -> None:
        """Make ``model`` compute its embedding sums as the plan says (CBOW models; others have none)."""
        if isinstance(model, CBOWEnsemble):
            model.embedding_sum_by_samples = {p.samples: p.embedding_sum for p in self.passes}


def pass_sizes(cfg: RunConfig, n: int) -> list[int]:
    """The numbers of samples the passes of a run over ``n`` samples take, ascending: the full batch
    (logged every epoch), and with minibatches their size and the last shorter one's."""
    batch = cfg.train.batch_size
    sizes = {n}
    if cfg.train.optimizer != "flow" and 0 < batch < n:
        sizes |= {batch, n % batch} - {0}
    return sorted(sizes)


def choose_plan(cfg: RunConfig, model: Ensemble, n: int) -> ExecutionPlan:
    """The plan the rule picks for ``model`` trained on ``n`` samples under ``cfg`` (docs/design.md,
    "Execution plan"): :func:`pass_plan` for every pass size of :func:`pass_sizes`."""
    return ExecutionPlan(tuple(pass_plan(model, size) for size in pass_sizes(cfg, n)))


def pass_plan(model: Ensemble, n: int) -> PassPlan:
    """The rule for one pass of ``model`` (``W_E`` (K, V, d)) over ``n`` samples: :func:`members_per_group`
    members at a time and, for CBOW, the embedding sum of :func:`ctxstair.models.cbow.embedding_sum_method`."""
    K, V, d = model.W_E.shape
    return PassPlan(n, members_per_group(K, V, d, n, model.W_E.element_size()),
                    embedding_sum_method(n, V, d) if isinstance(model, CBOWEnsemble) else None)


def members_per_group(K: int, V: int, d: int, n: int, itemsize: int) -> int:
    """How many of K members one forward-and-backward pass over ``n`` samples takes: the members are
    split into as few groups as fit :data:`PASS_BYTES` (counting per member four (n, V) and four
    (n, d) activations of ``itemsize`` bytes: logits, probabilities, hidden states and their
    gradients), of equal size but for the last; at least one member."""
    fit = max(1, PASS_BYTES // (4 * n * (V + d) * itemsize))
    return -(-K // -(-K // fit))  # ⌈K / ⌈K / fit⌉⌉
