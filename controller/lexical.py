"""Lexical tools shared by the heuristic backend, the memory store and the baselines.

Tokens are lower-cased `[a-z0-9]+` runs minus a small English stop list; BM25 uses k1=1.2, b=0.75 and
idf = log(1 + (N - n + 0.5) / (n + 0.5)) (the reference configuration in EVALUATION.md). The memory store's
lexical index also stems them (`index_tokens`, Snowball English), so "camped" finds "camping"; the reference
baselines and the heuristic backend keep the plain tokens.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

_TOKEN = re.compile(r"[a-z0-9]+")

STOPWORDS: frozenset[str] = frozenset(
    """a an the and or but if then else of at by for with about against between into through during before
    after above below to from up down in out on off over under again further once here there when where why
    how all any both each few more most other some such no nor not only own same so than too very s t can
    will just don should now i me my myself we our ours ourselves you your yours yourself yourselves he him
    his himself she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did doing would
    could ll re ve d m o y as until while""".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric tokens without stop words."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


# What a store records about its lexical index: a store indexed under another analyzer is re-indexed on open.
ANALYZER = "tokenize+snowball-english+unstemmed-over-64"

# Tokens longer than this are indexed as they are: no English word is, and the Snowball stemmer's time grows with the
# square of a token's length (a 1 MB token: about a minute, under the lock every write and query of the process waits
# on). Such tokens (hashes, base64, URLs run together) are matched exactly.
STEM_MAX_CHARS = 64

_stem_word: Callable[[str], str] | None = None
_stem_lock = threading.Lock()  # a Snowball stemmer keeps its state on the object: one word at a time


def stem(token: str) -> str:
    """The Snowball English stem of one `tokenize` token ("camped", "camping" -> "camp"); digits and tokens over
    `STEM_MAX_CHARS` characters stay as they are. Safe from several threads (the server's writes and queries)."""
    if token.isdigit() or len(token) > STEM_MAX_CHARS:
        return token
    return _stem(token)


@lru_cache(maxsize=1 << 16)
def _stem(token: str) -> str:
    global _stem_word
    with _stem_lock:
        if _stem_word is None:  # imported on first use, not at import time
            import snowballstemmer

            _stem_word = snowballstemmer.stemmer("english").stemWord
        return _stem_word(token)


def index_tokens(text: str) -> list[str]:
    """The memory store's index terms: `tokenize` tokens, stemmed (`stem`)."""
    return [stem(t) for t in tokenize(text)]


class BM25:
    """A small in-memory BM25 index over a growing list of documents (ids are positions)."""

    def __init__(self, k1: float = 1.2, b: float = 0.75, analyzer: Callable[[str], list[str]] | None = None) -> None:
        self.k1 = k1
        self.b = b
        self._analyzer = analyzer or tokenize  # text -> terms (`tokenize`, or `index_tokens` for stemmed terms)
        self._tfs: list[Counter[str]] = []
        self._lens: list[int] = []
        self._df: Counter[str] = Counter()
        self._postings: dict[str, list[int]] = {}
        self._total_len = 0

    def __len__(self) -> int:
        return len(self._tfs)

    def add(self, text: str) -> int:
        tf = Counter(self._analyzer(text))
        doc = len(self._tfs)
        self._tfs.append(tf)
        self._lens.append(sum(tf.values()))
        self._total_len += self._lens[-1]
        for term in tf:
            self._df[term] += 1
            self._postings.setdefault(term, []).append(doc)
        return doc

    def add_many(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.add(text)

    def idf(self, term: str) -> float:
        n = self._df.get(term, 0)
        return math.log(1.0 + (len(self._tfs) - n + 0.5) / (n + 0.5))

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every document sharing a term with the query."""
        if not self._tfs:
            return {}
        avg = self._total_len / len(self._tfs) or 1.0
        out: dict[int, float] = {}
        for term in sorted(set(self._analyzer(query))):  # a fixed order: float sums (and so ties) must not vary with the hash seed
            idf = self.idf(term)
            for doc in self._postings.get(term, ()):
                f = self._tfs[doc][term]
                norm = f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self._lens[doc] / avg))
                out[doc] = out.get(doc, 0.0) + idf * norm
        return out

    def top(self, query: str, k: int, exclude: Sequence[int] = ()) -> list[tuple[int, float]]:
        """Best k documents, ties broken by position (deterministic)."""
        skip = set(exclude)
        ranked = sorted(((d, s) for d, s in self.scores(query).items() if d not in skip), key=lambda x: (-x[1], x[0]))
        return ranked[:k]
