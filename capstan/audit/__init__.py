"""Reading a run's history: typed entries, the step-level event stream, the verified audit.

A client-side layer: it reads from the server and the blob store, never from a worker.
"""
