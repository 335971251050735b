"""Prometheus metrics of the operator (served on /metrics of the operator's health port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SANDBOXES_STARTED = Counter("hangar_sandboxes_started_total", "Sandbox pods created")
SANDBOX_CONNECT = Histogram(
    "hangar_sandbox_connect_seconds",
    "Sandbox created to driver connected",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
SANDBOXES_ACTIVE = Gauge("hangar_sandboxes_active", "Sessions holding a sandbox slot")
TURNS = Counter("hangar_turns_total", "Turns finished, by outcome", ["outcome"])
TURN_SECONDS = Histogram(
    "hangar_turn_seconds", "Turn duration", buckets=(1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600)
)
STEERS = Counter("hangar_steers_total", "Steers by final status", ["status"])
INTERRUPTS = Counter("hangar_interrupts_total", "Interrupts sent to drivers")
INTERRUPT_KILLS = Counter(
    "hangar_interrupt_kills_total", "Runs killed because an interrupt was not confirmed"
)
DRIVER_REJECTED = Counter("hangar_driver_messages_rejected_total", "Driver frames refused", ["reason"])
DRIVER_EVENTS = Counter("hangar_driver_events_total", "Driver events stored", ["name"])
