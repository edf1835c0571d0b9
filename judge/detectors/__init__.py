"""Cheap heuristic detectors, run on every message between judge checks."""

from judge.detectors.base import Detector, Finding

__all__ = ["Detector", "Finding"]
