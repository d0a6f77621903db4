"""What the eval commands (paired, health, parity) share: bad input as one line, JSON or a printer, an exit code."""
from __future__ import annotations

from inkling_probe.cli.common import BadInput, emit_json


def conclude(ctx, compute, as_json: bool, printer, failed, to_json=None) -> None:
    """Run ``compute()`` (bad eval input: one line, exit 2), show the result as JSON (``to_json``, else
    its ``to_dict()``) or through ``printer``, and exit 1 when ``failed(result)``, else 0."""
    from inkling_probe.evals.jsonl import EvalInputError

    try:
        result = compute()
    except EvalInputError as e:
        raise BadInput(str(e)) from None
    if as_json:
        emit_json(to_json(result) if to_json else result.to_dict())
    else:
        printer(result)
    ctx.exit(1 if failed(result) else 0)
