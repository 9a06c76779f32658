"""A datastore of the model's own answers, to look drafts up in (retrieval-based drafting, as REST).

Answers repeat each other's phrasing ("To find the total cost, we need to", "Here's a Python function
that"), and a model's own answers repeat its phrasing most. The store holds the token ids of answers the
model generated offline (the distillation data) and every position sorted by the tokens that follow
it, to `depth` tokens: the positions where the committed text's last n tokens occurred form one range
of that order, and within it the tokens that followed them are sorted too. So the drafts are a walk
down a trie: at each depth the most frequent next token, and the range narrows to the positions that
continued with it. A draft's support is the share of the positions still in the walk that continued
with it: how often the model's own text went that way after this context.

Saved as `datastore.safetensors` (tokens, order) beside an adapter, or in the bundled weights folder of
a packaged model (used with or without its adapter).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import PardecError

FILE = "datastore.safetensors"
FORMAT = "pardec-datastore-1"
DEPTH = 32  # tokens each position is sorted by: the match and the drafts walked after it
MIN_MATCH = 2  # one shared token says too little about what follows
MAX_MATCH = 12  # a longer match says no more
END = -1  # between answers: no continuation


@dataclass(frozen=True)
class Datastore:
    tokens: np.ndarray  # [N + DEPTH] int32 answers' ids, END after each one and as padding
    order: np.ndarray  # [N] int32 positions sorted by tokens[p : p + depth]
    depth: int = DEPTH

    @property
    def size(self) -> int:
        return len(self.order)

    def _compare(self, p: int, query: list[int]) -> int:
        """-1, 0 or 1 as tokens[p : p + len(query)] sorts before, equal to or after query."""
        seg = self.tokens[p : p + len(query)].tolist()
        return (seg > query) - (seg < query)

    def find(self, query: list[int]) -> tuple[int, int]:
        """The range [start, end) of order whose positions are followed by query."""
        lo, hi = 0, self.size
        while lo < hi:
            mid = (lo + hi) // 2
            if self._compare(int(self.order[mid]), query) < 0:
                lo = mid + 1
            else:
                hi = mid
        start, hi = lo, self.size
        while lo < hi:
            mid = (lo + hi) // 2
            if self._compare(int(self.order[mid]), query) <= 0:
                lo = mid + 1
            else:
                hi = mid
        return start, lo

    def propose(
        self, context: list[int], max_drafts: int, max_match: int = MAX_MATCH
    ) -> tuple[list[int], list[float], int]:
        """Drafts for what follows `context` -> (drafts, each one's support, match length): the longest
        suffix of context (MIN_MATCH .. max_match tokens) found in the store, then the most frequent
        continuation token by token. ([], [], 0) where not even MIN_MATCH tokens match."""
        best, lo, hi = None, MIN_MATCH, min(max_match, len(context), self.depth - 1)
        while lo <= hi:  # a suffix that occurs has every shorter suffix occurring too
            n = (lo + hi) // 2
            start, end = self.find(context[-n:])
            if end > start:
                best, lo = (n, start, end), n + 1
            else:
                hi = n - 1
        if best is None:
            return [], [], 0
        n, start, end = best
        drafts: list[int] = []
        support: list[float] = []
        for depth in range(n, min(self.depth, n + max_drafts)):
            nxt = self.tokens[self.order[start:end].astype(np.int64) + depth]  # [end - start] sorted
            # Runs of equal tokens: the most frequent one continues the walk.
            edges = np.flatnonzero(np.diff(nxt)) + 1
            bounds = np.concatenate([[0], edges, [len(nxt)]])
            lengths = np.diff(bounds)
            lengths[nxt[bounds[:-1]] == END] = 0  # an answer's end continues nothing
            k = int(lengths.argmax())
            if lengths[k] == 0:
                break
            drafts.append(int(nxt[bounds[k]]))
            support.append(float(lengths[k]) / len(nxt))
            start, end = start + int(bounds[k]), start + int(bounds[k + 1])
        return drafts, support, n


def build(answers: list[list[int]], depth: int = DEPTH) -> Datastore:
    """A store of these answers' token ids."""
    answers = [a for a in answers if a]
    if not answers:
        raise PardecError("a datastore needs at least one non-empty answer")
    flat = np.concatenate([np.array(list(a) + [END], dtype=np.int32) for a in answers])
    tokens = np.concatenate([flat, np.full(depth, END, dtype=np.int32)])
    n = len(flat)
    keys = [tokens[i : i + n] for i in range(depth)]
    order = np.lexsort(keys[::-1]).astype(np.int32)  # the last key is lexsort's primary one
    return Datastore(tokens, order, depth)


def save(store: Datastore, folder: str | Path, meta: dict) -> Path:
    from safetensors.numpy import save_file

    path = Path(folder) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, "depth": str(store.depth), "meta": json.dumps(meta)}
    save_file({"tokens": store.tokens, "order": store.order}, str(path), metadata=header)
    return path


def load(path: str | Path, vocab_size: int | None = None) -> Datastore:
    """Read and check a store (a truncated or foreign file is refused, not half-used)."""
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            header = f.metadata() or {}
            tokens, order = f.get_tensor("tokens"), f.get_tensor("order")
        depth = int(header.get("depth", "0"))
    except Exception as e:  # safetensors raises several types for truncated or garbled files
        raise PardecError(f"corrupt datastore '{path}': {e}") from e
    n = len(order)
    if (
        header.get("format") != FORMAT
        or tokens.dtype != np.int32
        or order.dtype != np.int32
        or depth < MIN_MATCH + 1
        or len(tokens) != n + depth
        or n == 0
        or order.min() < 0
        or order.max() >= n
        or tokens.min() < END
    ):
        raise PardecError(f"corrupt datastore '{path}': not a {FORMAT} file")
    if vocab_size is not None and tokens.max() >= vocab_size:
        raise PardecError(f"datastore '{path}' holds token ids beyond this model's vocabulary ({vocab_size})")
    return Datastore(tokens, order, depth)


def meta(path: str | Path) -> dict:
    """What the store was built from (recorded at build)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return json.loads((f.metadata() or {}).get("meta", "{}"))


def locate(model: str, adapter: Path | None) -> Path | None:
    """The store to decode with: the adapter's own, else the one bundled for this packaged model."""
    from .checkpoint import BUNDLED
    from .packaged import PACKAGED

    for folder in (adapter, BUNDLED / model if model in PACKAGED else None):
        if folder is not None and (Path(folder) / FILE).is_file():
            return Path(folder) / FILE
    return None
