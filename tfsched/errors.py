"""The one exception type that user-facing commands turn into a single error line."""

import re


class TfschedError(Exception):
    """Bad input or an impossible request, described in one line.

    The message names the file (or setting) and what is wrong with it; the CLI prints it
    as ``Error: <message>`` and exits non-zero without a traceback.
    """


class OutOfMemory(MemoryError):
    """Memory ran out in another process of ours that said so (``where``: "a simulation
    process"); ``str()``: what it said (numpy's allocation, or nothing)."""

    def __init__(self, detail: str, where: str):
        super().__init__(detail)
        self.where = where


# lines of a TensorFlow error around its cause: where it was detected, the node, the stack
_NOT_THE_CAUSE = (
    "Detected at node",
    "Node:",
    "[[",
    "=====",
    "Original stack trace",
    "File ",
    "Additional GRPC",
)


def cause_line(error: BaseException, limit: int = 300) -> str:
    """The line of a TensorFlow error that says what went wrong: its messages start "Graph
    execution error:" or "From /job:ps/replica:0/task:0:" and give the cause lines later. A
    variable the step reads before anything initialized it is said so, with what to do.

    >>> cause_line(RuntimeError("Graph execution error:\\n\\nFrom /job:ps/replica:0/task:0:\\nOut of memory"))
    'Out of memory'
    >>> cause_line(RuntimeError("Graph execution error:\\nDetected at node 'r' defined at (most recent call last):\\n"
    ...                         "Node: 'r'\\nFrom /job:ps/replica:0/task:0:\\nOut of memory\\n\\t [[{{node r}}]]"))
    'Out of memory'
    >>> cause_line(RuntimeError("From /job:ps/replica:0/task:0:\\nCould not find variable par/w7. This could mean ..."))
    'variable par/w7 is not initialized (or was deleted): run its initializer first (--init OP)'
    """
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    said = [x for x in lines if not x.endswith(":") and not x.startswith(_NOT_THE_CAUSE)]
    cause = (said or lines or [repr(error)])[0][:limit]
    missing = re.match(r"Could not find variable (\S+?)\.? ", cause)
    if missing:
        cause = f"variable {missing[1]} is not initialized (or was deleted): run its initializer first (--init OP)"
    return cause
