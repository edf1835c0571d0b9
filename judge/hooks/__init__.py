"""Agent hooks that answer from a warm per-user daemon (`judge.hooks.daemon`).

A coding agent runs its hook command as a new process for every tool call, and waits for
it. `judge.hooks.client` is that process: it imports only the standard library, forwards
the agent's name and raw payload to the daemon over a Unix socket, and prints what the
daemon answers; when there is no daemon (or it is stale, busy or gone) it answers in
process, exactly as the daemon would. ``python -m judge.hooks claude-code`` runs it.

Both paths answer with the same agent-neutral machinery: `invocation` (one raw event in,
the printed answer out), `session` (what to answer, and the state it keeps), `messages`
(how an event becomes tracker messages), `session_files` (a state file per session, under
a lock) and `session_cache` (the daemon's warm sessions). Each agent's own payloads and
answer fields are its module in `judge.integrations` (`claude_code`, `cursor`,
`gemini_cli`, `codex`).

Nothing is imported here: this package is on the hook's start-up path.
"""
