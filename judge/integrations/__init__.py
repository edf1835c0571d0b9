"""Adapters that plug the tracker into other people's runtimes (the litellm proxy, ...).

Each module imports its host framework itself, lazily; this package imports nothing.
"""
