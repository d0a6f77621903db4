"""Bisect: hunts that re-run commands (layers, flags, precision) or split tensors (elements).

DESIGN.md part 5; docs/BISECT.md shows each command. One module per job:

- ``state``: the state file (arguments, runs, verdicts, answer) that makes a bisect resumable;
- ``runner``: runs a command (no shell unless asked), files it under good/ or bad/, keeps the budget;
- ``oracle``: exit code or compare verdicts, and the crash policy; ``trial``: run + judge + file;
- ``ddmin``: delta debugging; ``toggles``: ``NAME=GOOD:BAD`` and the model plug-ins;
- ``layers``, ``flags``, ``precision``, ``elements`` (+ ``sources``): the four searches.

The searches report progress through a ``progress(event, info)`` callback; only the CLI
(``inkling_probe/cli/bisect/``) prints. Nothing here imports torch; compare does, when it runs.
"""
