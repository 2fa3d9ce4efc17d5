"""allowNonRestoredState: what the runtime does when the query's stateful operators differ from the checkpoint's.

Called by job_runtime.run.runner when the query fails while planning its first
batch with one of Spark's operator checks. `decide` is pure (Spark's error
text in, a decision out); `drop_operator_state` is the I/O.

What Spark 4.3 does (found by running it; tests/savepoints/test_nonrestored_state.py):
- it numbers stateful operators from the sink towards the sources (operator id
  0, 1, ...) and keeps each one's state in ``state/<id>/`` with its name in
  ``state/<id>/_metadata``;
- on restart it compares the names and ids in the checkpoint with the query's
  and refuses any difference (STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA):
  an operator removed, added, replaced, or renumbered because another one went;
- it refuses a query with stateful operators over a checkpoint that has
  committed batches but no state at all (STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY);
- with ``state/<id>/`` removed for exactly the operators the query no longer
  has, it starts, and the remaining operators keep their state.

So with --allow-non-restored-state, when every operator of the query is in the
checkpoint under the same id and name, the state of the other operators is
deleted and the query started again: that state is not restored. Anything
else (added, replaced or renumbered operators) cannot be mapped by Spark and
is refused, flag or not, with exit RESTORE_REFUSED, as is a removal without
the flag. Spark has no way to move state between operator ids.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from streamjob_contract.s3 import S3Config, Store, parse_location

log = logging.getLogger("job_runtime.nonrestored")

NOT_MATCH = "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"
MISSING_STATE = "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"
_OPERATOR = re.compile(r"\(OperatorId:\s*(\d+)\s*->\s*OperatorName:\s*([^)]+?)\s*\)")
_CHECKPOINT_SIDE = "Stateful operators in the metadata:"
_QUERY_SIDE = "Stateful operators in current batch:"


@dataclass(frozen=True)
class Decision:
    """Either drop the state of ``drop`` (operator id -> name) and start again, or refuse."""

    drop: dict[int, str]
    refusal: str | None = None


def _operators(text: str) -> dict[int, str]:
    return {int(op): name for op, name in _OPERATOR.findall(text)}


def _describe(operators: dict[int, str]) -> str:
    return ", ".join(f"{op} {name}" for op, name in sorted(operators.items())) or "none"


def is_operator_check(message: str) -> bool:
    """Whether a query failure is one of Spark's stateful-operator checks (pure)."""
    return MISSING_STATE in message or (NOT_MATCH in message and _QUERY_SIDE in message)


def decide(message: str, *, allow_non_restored_state: bool, checkpoint: str) -> Decision | None:
    """What to do about a query failure; None when it is not one of Spark's operator checks.

    Pure. ``message`` is the failed query's full error text.
    """
    if MISSING_STATE in message:
        query = _operators(message.split(_QUERY_SIDE, 1)[-1])
        return Decision({}, (
            f"checkpoint {checkpoint} has committed batches but no state, and the query has stateful operators "
            f"({_describe(query)}): Spark cannot add state to a query that ran without it; start the job from a "
            "fresh checkpoint location (upgradeMode stateless)"
        ))
    if NOT_MATCH not in message or _QUERY_SIDE not in message:
        return None
    head, _, tail = message.partition(_QUERY_SIDE)
    in_checkpoint = _operators(head.split(_CHECKPOINT_SIDE, 1)[-1])
    in_query = _operators(tail)
    unknown = {op: name for op, name in in_query.items() if in_checkpoint.get(op) != name}
    if unknown or not in_checkpoint:
        return Decision({}, (
            f"the query's stateful operators ({_describe(in_query)}) do not match the state in checkpoint {checkpoint} "
            f"({_describe(in_checkpoint)}): Spark finds an operator's state by its operator id (numbered from the sink) "
            f"and name, so no state can be restored for {_describe(unknown) or 'them'}, with or without "
            "allowNonRestoredState; keep the stateful operators in the same order, or start from a fresh checkpoint "
            "location (upgradeMode stateless)"
        ))
    extra = {op: name for op, name in in_checkpoint.items() if op not in in_query}
    if not allow_non_restored_state:
        return Decision({}, (
            f"checkpoint {checkpoint} holds state for stateful operators the query no longer has ({_describe(extra)}); "
            "set spec.allowNonRestoredState (--allow-non-restored-state) to start without that state"
        ))
    return Decision(extra)


def drop_operator_state(checkpoint: str, operators: dict[int, str], *, job: str, s3: S3Config | None = None) -> int:
    """Deletes ``state/<id>/`` of each operator; returns how many files went."""
    loc = parse_location(checkpoint)
    store = Store(loc, (s3 or S3Config.from_env()).client() if loc.scheme == "s3" else None)
    total = 0
    for op, name in sorted(operators.items()):
        count = store.delete_under(f"state/{op}")
        total += count
        log.warning(
            "dropped non-restored state job=%s checkpoint=%s operatorId=%d operator=%s files=%d "
            "reason=the query no longer has this stateful operator and allowNonRestoredState is set",
            job, checkpoint, op, name, count,
        )
    return total
