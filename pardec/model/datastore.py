"""A datastore of the model's own answers, to look drafts up in (retrieval-based drafting, as REST).

Answers repeat each other's phrasing ("To find the total cost, we need to", "Here's a Python function
that"), and a model's own answers repeat its phrasing most. The store holds the token ids of answers the
model generated offline (the distillation data) and every position sorted by the tokens that follow
it, to `depth` tokens: the positions where the committed text's last n tokens occurred form one range
of that order, and within it the tokens that followed them are sorted too. So the drafts are a walk
down a trie: at each depth the most frequent next token, and the range narrows to the positions that
continued with it (once one position is left, its text is copied on). A draft's support is the share of the
positions still in the walk that continued with it: how often the model's own text went that way after
this context.

Saved as `datastore.safetensors` (tokens, order) beside an adapter, or in the bundled weights folder of
a packaged model (used with or without its adapter).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import PardecError

FILE = "datastore.safetensors"
FORMAT = "pardec-datastore-1"
DEPTH = 32  # tokens each position is sorted by: the match and the drafts walked after it
MIN_MATCH = 2  # one shared token says too little about what follows
MAX_MATCH = 12  # a longer match says no more
END = -1  # between answers: no continuation
PAIR = 1 << 31  # above any token id + 1: two ids in one int64 key
SAMPLE = 1024  # a walk step over more positions than this finds the most frequent token in a sample


@dataclass(frozen=True, eq=False)
class Datastore:
    tokens: np.ndarray  # [N + DEPTH] int32 answers' ids, END after each one and as padding
    order: np.ndarray  # [N] int32 positions sorted by tokens[p : p + depth]
    depth: int = DEPTH

    @property
    def size(self) -> int:
        return len(self.order)

    @cached_property
    def pairs(self) -> np.ndarray:
        """[N] int64 the first two tokens after each position of order, as one sorted key: the range of
        a query's first two tokens is one searchsorted, in C."""
        at = self.order.astype(np.int64)
        return (self.tokens[at].astype(np.int64) + 1) * PAIR + self.tokens[at + 1] + 1

    def find(self, query: list[int]) -> tuple[int, int]:
        """The range [start, end) of order whose positions are followed by query (2 tokens or more)."""
        key = (query[0] + 1) * PAIR + query[1] + 1
        lo, end = np.searchsorted(self.pairs, [key, key + 1]).tolist()
        rest = query[2:]
        if not rest or lo == end:
            return lo, end
        after = lambda i: self.tokens[int(self.order[i]) + 2 :][: len(rest)].tolist()  # noqa: E731
        start = bisect.bisect_left(range(end), rest, lo=lo, key=after)
        return start, bisect.bisect_right(range(end), rest, lo=start, key=after)

    def _token_at(self, i: int, depth: int) -> int:
        return int(self.tokens[int(self.order[i]) + depth])

    def _most_frequent(self, start: int, end: int, depth: int) -> tuple[int, int, int] | None:
        """The most frequent token `depth` after the positions order[start:end] (sorted by it there),
        and the range of those followed by it; None where every one is an answer's end. Over a long
        range the token is the most frequent of an even sample (large runs are hit in proportion), its
        range found by bisection: a walk step stays cheap however common the match."""
        first = self._token_at(start, depth)
        if first == self._token_at(end - 1, depth):  # sorted: the whole range goes one way
            return None if first == END else (first, start, end)
        if end - start > SAMPLE:
            idx = np.linspace(start, end - 1, SAMPLE).astype(np.int64)
            seen = self.tokens[self.order[idx].astype(np.int64) + depth]
            seen = seen[seen != END]
            if len(seen) == 0:
                return None
            values, counts = np.unique(seen, return_counts=True)
            tok = int(values[counts.argmax()])
            key = lambda i: self._token_at(i, depth)  # noqa: E731
            lo = bisect.bisect_left(range(end), tok, lo=start, key=key)
            return tok, lo, bisect.bisect_right(range(end), tok, lo=lo, key=key)
        nxt = self.tokens[self.order[start:end].astype(np.int64) + depth]  # [end - start] sorted
        # Runs of equal tokens: the longest continues the walk (the first, the smallest id, on a tie).
        bounds = np.concatenate([[0], np.flatnonzero(nxt[1:] != nxt[:-1]) + 1, [len(nxt)]])
        lengths = np.diff(bounds)
        lengths[nxt[bounds[:-1]] == END] = 0  # an answer's end continues nothing
        k = int(lengths.argmax())
        if lengths[k] == 0:
            return None
        return int(nxt[bounds[k]]), start + int(bounds[k]), start + int(bounds[k + 1])

    def longest_match(self, context: list[int], max_match: int = MAX_MATCH) -> tuple[int, int, int] | None:
        """The longest suffix of context (MIN_MATCH .. max_match tokens) found in the store -> (its
        length n, the range [start, end) of order followed by it); None where not even MIN_MATCH match."""
        best, lo, hi = None, MIN_MATCH, min(max_match, len(context), self.depth - 1)
        while lo <= hi:  # a suffix that occurs has every shorter suffix occurring too
            n = (lo + hi) // 2
            start, end = self.find(context[-n:])
            if end > start:
                best, lo = (n, start, end), n + 1
            else:
                hi = n - 1
        return best

    def propose(
        self, context: list[int], max_drafts: int, max_match: int = MAX_MATCH
    ) -> tuple[list[int], list[float], int]:
        """Drafts for what follows `context` -> (drafts, each one's support, match length): the longest
        suffix of context (MIN_MATCH .. max_match tokens) found in the store, then the most frequent
        continuation token by token. ([], [], 0) where not even MIN_MATCH tokens match."""
        best = self.longest_match(context, max_match)
        if best is None:
            return [], [], 0
        n, start, end = best
        drafts: list[int] = []
        support: list[float] = []
        depth = n
        while len(drafts) < max_drafts:
            if end - start == 1:  # one occurrence left: a copy, past the sorted depth too
                p = int(self.order[start]) + depth
                rest = self.tokens[p : p + max_drafts - len(drafts)].tolist()
                rest = rest[: rest.index(END)] if END in rest else rest
                drafts += rest
                support += [1.0] * len(rest)
                break
            if depth >= self.depth:  # the order says nothing further
                break
            run = self._most_frequent(start, end, depth)
            if run is None:
                break
            tok, lo, hi = run
            drafts.append(tok)
            support.append((hi - lo) / (end - start))
            start, end, depth = lo, hi, depth + 1
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
    """The store to decode with: the adapter's own, else the one bundled for this packaged model, else
    the one bundled for the packaged model it shares a tokenizer with (`PackagedModel.store_from`)."""
    from .checkpoint import BUNDLED
    from .packaged import PACKAGED

    folders = [adapter]
    if model in PACKAGED:
        folders.append(BUNDLED / model)
        if PACKAGED[model].store_from:
            folders.append(BUNDLED / PACKAGED[model].store_from)
    for folder in folders:
        if folder is not None and (Path(folder) / FILE).is_file():
            return Path(folder) / FILE
    return None
