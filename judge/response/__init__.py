"""What happens after a loop is found.

- `responder`: turns a finding or a judge outcome into a loop `Verdict`; overrides, memory,
  the ``on_loop`` callback, stats and telemetry.
- `ladder`: the escalation ladder (warn, warn harder, ask the user, stop) and overrides.
- `recovery`: the three texts of a verdict, from the templates in ``prompts/``.
- `memory`: the known-loop memory across sessions.
- `stats`, `telemetry`: totals of a tracker's life, and OpenTelemetry.
"""
