"""The pure core: the loop, its state and every type it folds.

Must never do IO, read the clock, the environment or a random source, or import Temporal,
httpx or tiktoken (ruff's banned APIs and import-linter enforce it). Unit tests drive it directly.
"""
