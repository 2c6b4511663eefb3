"""The lexical tools: plain tokens, the store's stemmed index terms, and stemming from several threads."""

from __future__ import annotations

import random
import sys
import threading

from controller.lexical import index_tokens, stem, tokenize


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
    stem.cache_clear()
    expected = {w: stem(w) for w in words}
    stem.cache_clear()
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
        stem.cache_clear()
    assert not errors
    assert got == expected
