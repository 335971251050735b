"""Run ids and activity scopes: unique across the namespaces the operator serves.

A sandbox run is the pod ``<session>-r<n>`` in the session's namespace. Its run id (the gateway's key, the
run key's binding, the database's driver-ack records, Approval names) is that name in the home namespace
(``HANGAR_NAMESPACE``: unchanged from a one-namespace operator, so a driver running across an upgrade keeps
its id) and ``<namespace>.<session>-r<n>`` elsewhere. Neither namespaces nor session names hold a dot, so
the two forms never meet. Activity scopes follow the same rule: ``session/<name>`` at home,
``session/<namespace>/<name>`` elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RUN = re.compile(r"^(?:(?P<ns>[a-z0-9][-a-z0-9]*)\.)?(?P<session>[a-z][-a-z0-9]*)-r(?P<n>\d+)$")


@dataclass(frozen=True)
class Run:
    namespace: str
    session: str
    pod: str  # <session>-r<n>: the pod's name, and the run key Secret's prefix
    id: str  # the gateway's run id

    @property
    def key_secret(self) -> str:
        return f"{self.pod}-key"


def make_run(home: str, namespace: str, session: str, n: int) -> Run:
    pod = f"{session}-r{n}"
    return Run(namespace, session, pod, pod if namespace == home else f"{namespace}.{pod}")


def parse_run(home: str, run_id: str) -> Run | None:
    m = _RUN.match(run_id)
    if m is None:
        return None
    ns = m.group("ns") or home
    return make_run(home, ns, m.group("session"), int(m.group("n")))


def run_of_pod(home: str, namespace: str, pod: str) -> Run | None:
    """The run a sandbox pod (or ``status.sandbox.run``) in ``namespace`` is."""
    m = _RUN.match(pod)
    if m is None or m.group("ns"):
        return None
    return make_run(home, namespace, m.group("session"), int(m.group("n")))


def scope(home: str, kind: str, namespace: str, name: str) -> str:
    """The activity log scope of a session or job (the api reads ``session/<name>`` for its home namespace)."""
    return f"{kind}/{name}" if namespace == home else f"{kind}/{namespace}/{name}"
