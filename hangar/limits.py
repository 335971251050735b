"""hangar's byte budgets as plain numbers (no pydantic, so the CLI can check a message before it sends it).

``hangar.models.limits`` puts them on the models and the CRDs; ``docs/limits.md`` lists them.
"""

from __future__ import annotations

INLINE_MAX = 4096  # bytes of a message body kept inside a resource
MESSAGE_MAX = 262144  # bytes of one message body (stored in the database beyond INLINE_MAX)
PREVIEW_MAX = 512  # bytes of the preview a resource keeps of a body stored in the database
STEERS_MAX = 50  # steers one turn takes
INTERRUPTS_MAX = 20  # interrupt requests one turn takes
TURN_REQUESTS_BYTES_MAX = 1048576  # bytes of all steer and interrupt bodies of one turn, wherever they live
MODEL_MAX = 256  # bytes of a model name
REASON_MAX = 2000  # bytes of a stop reason
RESULT_MAX = 65536  # bytes of a turn's structured result (JSON) kept in its status
ARTIFACTS_MAX = 100  # artifacts recorded in a turn's status
SUMMARY_MAX = 16384  # bytes of a turn's summary kept in its status (the full answer is in the activity)
# What a whole object may reach by these limits; tests/unit/test_limits.py builds the largest Turn, Session
# and Job the limits allow and checks each stays under it (etcd refuses objects over 1.5 MiB).
OBJECT_BUDGET = 524288


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def clip(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` bytes of UTF-8 on a character boundary (for what the agent
    or the driver reports, which hangar records rather than refuses)."""
    raw = text.encode("utf-8", "surrogatepass")
    return text if len(raw) <= max_bytes else raw[:max_bytes].decode("utf-8", "ignore")


# A person's live work in a session's sandbox (MCP exec, process, watch; docs/mcp.md). The driver holds
# the same numbers as ceilings (hangar_driver/workbench.py; tests/unit/test_workbench.py keeps them equal).
EXEC_COMMAND_MAX = 65536  # bytes of one exec or process command, and of one input sent to a process
EXEC_OUTPUT_MAX = 262144  # bytes of an exec's stdout and stderr together; output past it is cut, and said so
EXEC_TIMEOUT_MAX = 600  # seconds an exec may run before it is killed
PROCESSES_MAX = 8  # background processes running at once per sandbox
PROCESS_BUFFER_MAX = 1048576  # bytes of a background process's output kept (the newest); a read says dropped
PROCESS_READ_MAX = 262144  # bytes one process read returns
WATCHES_MAX = 8  # directory watches at once per sandbox
WATCH_INTERVAL = 0.5  # seconds between two scans of a watched directory (at most 2 change notices a second)
WATCH_CHANGES_MAX = 200  # file changes listed in one notice (more are counted)
