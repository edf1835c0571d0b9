"""Recorded agent runs: the labelled dataset format and importers for other formats.

- `dataset`: load and validate labelled trajectories (``evals/data``).
- `importers`: read OpenAI chat logs, ATIF, SWE-agent and the shared recorded format.
"""
