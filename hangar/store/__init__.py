"""Append-only history the resources should not carry: activity events, the audit log, driver dedupe."""

from .db import Database, Event, open_database

__all__ = ["Database", "Event", "open_database"]
