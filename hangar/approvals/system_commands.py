"""The system commands deny-risky refuses (rule ``system``): making or wiping filesystems and partition tables,
powering the machine off or rebooting it, and changing what the whole system runs on — mounts, swap, kernel
modules and parameters, the firewall, and signals to init or to every process.

``mkfs``, ``dd of=/dev/…`` and ``shutdown`` are the spec's examples; the others do the same kind of harm to the
sandbox as a whole rather than to a file. A crontab or an ``at`` job is there too: it has the system run a
command later, outside the turn and its approvals. What only reads (``mount`` with no operand, ``sysctl -a``,
``iptables -L``, ``lsmod``) is not flagged."""

from __future__ import annotations

from collections.abc import Sequence

from .argv import options
from .shell import Word

SYSTEM = frozenset(
    {"mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted", "sgdisk"}
    | {"shutdown", "reboot", "halt", "poweroff", "kexec"}
    | {"umount", "swapoff", "swapon", "insmod", "rmmod", "modprobe"}
)
# Looked at for their arguments (`mount` alone lists, `sysctl -a` reads, `iptables -L` lists).
SYSTEM_MAYBE = frozenset(
    {"init", "telinit", "systemctl", "mount", "sysctl", "iptables", "ip6tables", "nft", "kill", "killall5"}
    | {"crontab", "at", "batch", "atrm"}
)
# What only shows: `crontab -l`, `at -l` (atq), `at -c JOB` (a job's script), `at -V`.
_SCHEDULE_READS = {"crontab": frozenset({"-l"}), "at": frozenset({"-l", "-c", "-V"})}
_SYSTEMCTL_POWER = frozenset({"poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "isolate"})
# iptables' commands that change a table (-A append, -D delete, -F flush, -P policy …), short and long.
_IPTABLES_CHANGES = frozenset("-A -C -D -I -R -F -Z -N -X -P -E".split()) | frozenset(
    "--append --delete --insert --replace --flush --zero --new-chain --delete-chain --policy --rename-chain".split()
)
_NFT_READS = frozenset({"list", "-a", "--handle", "-n", "-s", "--stateless", "-j", "--json", "describe"})


def is_system(name: str, args: Sequence[Word]) -> bool:
    """Whether ``name args`` is a system command (see the module's docstring)."""
    if name.startswith("mkfs") or name in SYSTEM:
        return True
    if name not in SYSTEM_MAYBE:
        return False
    lits = [w.literal for w in args]
    if name in ("init", "telinit"):
        return bool(lits) and lits[0] in ("0", "6", "1", "s", "S")
    if name == "systemctl":
        return any(lit in _SYSTEMCTL_POWER for lit in lits)
    if name == "mount":
        # `mount` or `mount -l` lists; any operand (a device, a directory) or -a mounts.
        parsed = options(
            args, "tOoLUBM", ("--types", "--options", "--label", "--uuid", "--source", "--target")
        )
        return bool(parsed.operands) or parsed.has("-a", "--all", "--bind", "--move", "--source", "--target")
    if name == "sysctl":
        return any(
            lit is not None and ("=" in lit or lit in ("-w", "--write", "-p", "--load", "--system"))
            for lit in lits
        )
    if name in ("iptables", "ip6tables"):
        return any(
            lit is not None and (lit in _IPTABLES_CHANGES or lit.split("=")[0] in _IPTABLES_CHANGES)
            for lit in lits
        )
    if name == "nft":
        words = [lit for lit in lits if lit is not None and not lit.startswith("-")]
        return bool(words) and words[0] not in _NFT_READS
    if name in ("killall5", "batch", "atrm"):
        return True
    if name in _SCHEDULE_READS:
        # `crontab FILE`, `crontab -`, `-e`, `-r`; `at TIME`, `at -f FILE TIME`: what the system runs later.
        flags = {lit for lit in lits if lit is not None and lit.startswith("-") and lit != "-"}
        return not flags & _SCHEDULE_READS[name]
    # kill: a signal to init (PID 1) or to every process it may signal (-1 after the signal).
    operands: list[str] = []
    skip = False
    for lit in lits:
        if skip:
            skip = False
        elif lit in ("-s", "-n", "--signal"):
            skip = True  # the signal's name or number follows
        elif lit is not None:
            operands.append(lit)
    return "1" in operands or "-1" in operands[1:]
