"""The LLM judge: everything between the tracker and a model.

- `pair`: the fast model, then the confirming one, at the 0.9 threshold.
- `client`: the judge seam, `LLMClient` and `ModelReply` (bring your own client).
- `_litellm`: the one module that touches litellm (requests, retries, structured output).
- `assessment`: the reply schema and its parsing.
- `transcript`: the judge's window of messages and the prompt built from it.
- `redaction`: secrets removed before anything leaves the tracker.
- `breaker`, `budget`: when the judge must not be asked (an outage, a spent budget).
"""
