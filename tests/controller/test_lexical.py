"""The lexical tools: plain tokens, the store's stemmed index terms, stemming from several threads, BM25 scores."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading

from controller.lexical import STEM_MAX_CHARS, _stem, index_tokens, stem, tokenize


def test_index_terms_are_the_plain_tokens_stemmed() -> None:
    assert tokenize("We went camping in 2023!") == ["went", "camping", "2023"]
    assert index_tokens("We went camping in 2023!") == ["went", "camp", "2023"]
    assert {stem(w) for w in ("camped", "camping", "camps")} == {"camp"}
    assert stem("researching") == stem("research") and stem("1990") == "1990"


def test_stemming_from_many_threads_gives_the_single_thread_stems() -> None:
    # A Snowball stemmer keeps its state on the object; unguarded, concurrent calls return wrong stems or raise
    # IndexError (seen with 8 threads and a short switch interval).
    rng = random.Random(0)
    roots = ["running", "camping", "researching", "generously", "happiness", "nationalization", "hopefully", "agreements"]
    words = sorted({rng.choice(roots) + "".join(rng.choice("aeiouxyz") for _ in range(rng.randint(0, 4))) + end
                    for end in ("", "ing", "ed", "s", "ly") for _ in range(3000)})
    _stem.cache_clear()
    expected = {w: stem(w) for w in words}
    _stem.cache_clear()
    got: dict[str, str] = {}
    errors: list[BaseException] = []

    def work(part: list[str]) -> None:
        try:
            for w in part:
                got[w] = stem(w)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(words[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
        _stem.cache_clear()
    assert not errors
    assert got == expected


def test_bm25_scores_do_not_depend_on_the_hash_seed() -> None:
    # Summed over the query's terms in set order, the scores changed in their last bits with PYTHONHASHSEED, so
    # documents with equal scores swapped places in `top` from one process to the next (data builds differed).
    code = ("from controller.lexical import BM25\n"
            "ix = BM25()\n"
            "ix.add_many(['alpha beta gamma delta epsilon zeta eta theta', 'alpha beta gamma delta epsilon zeta eta theta iota',"
            " 'beta gamma kappa lambda mu', 'alpha delta zeta theta nu xi omicron pi rho'])\n"
            "print(repr(sorted(ix.scores('alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi').items())))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(outs) == 1 and outs.pop().startswith("[(0, ")


def test_tokens_longer_than_any_word_are_indexed_unstemmed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The stemmer's time grows with the square of a token's length (200,000 characters: seconds, under the lock every
    # write and query waits on), so a token over the bound must never reach it.
    import controller.lexical as lexical

    assert stem("y" * STEM_MAX_CHARS) == _stem("y" * STEM_MAX_CHARS)  # at the bound: stemmed as before
    reached: list[int] = []
    monkeypatch.setattr(lexical, "_stem", lambda token: reached.append(len(token)) or token)
    long_token = "ay" * 100_000
    assert stem(long_token) == long_token and index_tokens(f"camping {long_token}") == ["camping", long_token]
    assert reached == [len("camping")]
    assert stem("generously" + "s" * STEM_MAX_CHARS) == "generously" + "s" * STEM_MAX_CHARS
