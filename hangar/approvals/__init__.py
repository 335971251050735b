"""The approvals policy engine: auto, ask, deny-risky and governed, the hand-back exemption and taint.

Pure logic, standard library only. See ``rules.py`` for the policies and rules, ``docs/approvals.md``
for the user's view.
"""

from .display import DISPLAY_LIMIT, args_hash, canonical_json, display_command
from .handback import is_handback
from .program_rules import RULE_ORDER, Finding
from .rules import (
    POLICIES,
    Assessment,
    Decision,
    Policy,
    ToolCall,
    Verdict,
    assess,
    decide,
    risky,
    shell_command,
)

__all__ = [
    "DISPLAY_LIMIT",
    "POLICIES",
    "RULE_ORDER",
    "Assessment",
    "Decision",
    "Finding",
    "Policy",
    "ToolCall",
    "Verdict",
    "args_hash",
    "assess",
    "canonical_json",
    "decide",
    "display_command",
    "is_handback",
    "risky",
    "shell_command",
]
