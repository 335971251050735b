"""hangar's resource schemas: the one definition CRDs, OpenAPI and MCP schemas are generated from."""

from .approval import Approval, ApprovalSpec, ApprovalStatus
from .base import API_VERSION, GROUP, LIVE_HARNESSES, VERSION, Resource
from .environment import Environment, EnvironmentSpec
from .job import Job, JobSpec, JobStatus
from .session import Session, SessionSpec, SessionStatus
from .turn import Turn, TurnSpec, TurnStatus

KINDS: tuple[type[Resource], ...] = (Environment, Session, Turn, Approval, Job)

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "LIVE_HARNESSES",
    "VERSION",
    "Approval",
    "ApprovalSpec",
    "ApprovalStatus",
    "Environment",
    "EnvironmentSpec",
    "Job",
    "JobSpec",
    "JobStatus",
    "Resource",
    "Session",
    "SessionSpec",
    "SessionStatus",
    "Turn",
    "TurnSpec",
    "TurnStatus",
]
