"""Temporal clients for runs: start, steer, read status and transcripts, watch.

Never imports worker internals (workflows, activities): everything goes through Temporal.
"""

from capstan.client.runs import CapstanClient, RejectedError, SteeringError

__all__ = ["CapstanClient", "RejectedError", "SteeringError"]
