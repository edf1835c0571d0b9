"""Read a /metrics answer as prometheus_client parses it, so tests assert on samples and
types rather than on how the library happens to format a number (``1`` or ``1.0``)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, by (name, labels); a repeated series fails the test."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in found, f"series {key} twice in the exposition"
            found[key] = s.value
    return found


def sample(text: str, name: str, **labels: str) -> float | None:
    """One sample's value, None when the exposition lacks it."""
    return samples(text).get((name, frozenset(labels.items())))


def types(text: str) -> dict[str, str]:
    """Each family's declared type, by family name (a counter's is without ``_total``)."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}
