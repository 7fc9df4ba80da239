"""The answer a script gave from another interpreter: the last line of its stdout, as JSON.

``site`` runs every ``.pth`` line that starts with ``import``, and ``sitecustomize``, before any script:
what they print (a vendor's banner, with or without a newline) lands on stdout ahead of the answer.
So each script wh runs in a target interpreter prints its answer as one JSON line of its own
(:data:`PRINT_ANSWER`), and the caller reads the last line back (:func:`read_answer`).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["PRINT_ANSWER", "read_answer"]

# The line that ends such a script (``answer`` is its result): a newline first, so a banner printed
# without one does not share the answer's line. json.dumps escapes every line break it could contain.
PRINT_ANSWER = 'sys.stdout.write("\\n" + json.dumps(answer) + "\\n")'


def read_answer(stdout: str) -> Any:
    """The JSON value on the last line of ``stdout``; ValueError when there is none."""
    lines = stdout.strip().splitlines()
    if not lines:
        raise ValueError("no output")
    return json.loads(lines[-1])
