"""Runtime edges: settings, the blob store, the embedded Temporal and model servers, telemetry.

They do IO on purpose and hold no run logic.
"""
