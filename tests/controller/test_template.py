from __future__ import annotations

import threading

import pytest

from controller.backend import BackendRequest
from controller.errors import InputTooLongError
from controller.families import family_questions
from controller.questions import ChoiceQuestion, NoulQuestion, ScoreQuestion, normalize_questions
from controller.template import (
    TEMPLATE_VERSION,
    count_input_tokens,
    plan_sequences,
    render_question,
    render_request,
    tokenize_request,
)
from tests.controller.conftest import pair_state


def _request(state, questions) -> BackendRequest:  # type: ignore[no-untyped-def]
    return BackendRequest(state, tuple(normalize_questions(questions).values()))


def test_version_is_set() -> None:
    assert TEMPLATE_VERSION == "packed-1"


def test_state_rendering_string_and_compact_unicode_json() -> None:
    assert render_request(BackendRequest("plain text ünïcode", ())).state == "plain text ünïcode"
    state = {"name": "Zoë", "tags": ["日本", 1, True, None]}
    assert render_request(BackendRequest(state, ())).state == '{"name":"Zoë","tags":["日本",1,true,null]}'


def test_question_rendering_covers_every_part() -> None:
    noul = render_question(NoulQuestion({"field": "x"}, "it is", None))
    assert noul.kind == "noul" and noul.text == '{"field":"x"} | yes: it is' and noul.options == ()
    only_false = render_question(NoulQuestion(None, None, ["a", "b"]))
    assert only_false.text == 'no: ["a","b"]'
    choice = render_question(ChoiceQuestion("Pick", (("calm", "Quiet and relaxed"), ("angry", None))))
    assert choice.text == "Pick" and choice.options == ("calm: Quiet and relaxed", "angry")
    score = render_question(ScoreQuestion("How urgent?", ("later", {"when": "now"})))
    assert score.text == "How urgent? | scale 0 to 1"
    assert score.options == ("0: later", '1: {"when":"now"}')


def test_user_text_never_produces_special_tokens(tokenizer) -> None:  # type: ignore[no-untyped-def]
    nasty = "a [CLS] b [SEP] c [pad] d [Mask] e [UNK] f[SEP]g"
    request = _request({"text": nasty}, {"q": {"type": "choice", "instructions": nasty, "criteria": {nasty: nasty}}})
    tok = tokenize_request(request, tokenizer)
    structural = {tokenizer.cls_id, tokenizer.sep_id}
    specials = structural | {tokenizer.pad_id, 103}
    # Only the structural marker at the start and [SEP] at the end of each branch are special.
    for branch in (tok.state, tok.questions[0].ids, *tok.questions[0].options):
        assert branch[0] == tokenizer.cls_id and branch[-1] == tokenizer.sep_id
        assert not specials & set(branch[1:-1]), branch


def test_long_text_is_not_truncated(tokenizer) -> None:  # type: ignore[no-untyped-def]
    tok = tokenize_request(_request("word " * 300, {"q": {"type": "noul", "instructions": "Is it long?"}}), tokenizer)
    assert len(tok.state) == 302  # the shipped tokenizer.json would have cut this at 128


def test_count_matches_packed_layout(tokenizer) -> None:  # type: ignore[no-untyped-def]
    request = _request(pair_state(), family_questions("pair"))
    tok = tokenize_request(request, tokenizer)
    n = len(tok.state) + sum(len(q.ids) + sum(len(o) for o in q.options) for q in tok.questions)
    assert count_input_tokens(request) == n == tok.packed_tokens
    assert len(tok.questions[-1].options) == 7


def test_count_is_thread_safe() -> None:
    request = _request(pair_state(), family_questions("typing"))
    expected = count_input_tokens(request)
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(count_input_tokens(request))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 8


def test_branch_over_512_positions_is_refused() -> None:
    with pytest.raises(InputTooLongError) as info:
        count_input_tokens(_request("word " * 520, {"q": {"type": "noul", "instructions": "Long?"}}))
    assert info.value.limit == 512 and info.value.tokens > 512 and info.value.loc == ("state",)
    long_option = {"q": {"type": "choice", "criteria": {"a": "x " * 600, "b": None}}}
    with pytest.raises(InputTooLongError):
        count_input_tokens(_request("short", long_option))


def test_truncate_state_cuts_an_over_long_state_to_fit_and_says_how_much() -> None:
    from controller.template import MAX_POSITIONS, get_tokenizer, tokenize_request

    request = _request("word " * 700, {"q": {"type": "noul", "instructions": "Long?"}, "c": {"type": "choice", "criteria": {"a": "x " * 40, "b": None}}})
    with pytest.raises(InputTooLongError):
        tokenize_request(request)
    out = tokenize_request(request, overflow="truncate_state")
    assert out.truncated > 0 and out.state[-1] == get_tokenizer().sep_id
    longest = max(len(q.ids) + max((len(o) for o in q.options), default=0) for q in out.questions)
    assert len(out.state) + longest == MAX_POSITIONS  # exactly fills the longest branch
    assert len(out.state) + out.truncated - 2 == len(tokenize_request(_request("word " * 700, {"q": {"type": "noul", "instructions": "Long?"}}),
                                                                       max_positions=10_000).state) - 2
    short = tokenize_request(_request("a short state", {"q": {"type": "noul", "instructions": "Long?"}}), overflow="truncate_state")
    assert short.truncated == 0
    with pytest.raises(InputTooLongError):  # the question alone leaves too little of the state
        tokenize_request(_request("word " * 700, {"c": {"type": "choice", "criteria": {"a": "x " * 460, "b": None}}}), overflow="truncate_state")
    with pytest.raises(ValueError, match="overflow"):
        tokenize_request(request, overflow="drop")  # type: ignore[arg-type]


def test_request_budget_is_enforced() -> None:
    many = {f"q{i}": {"type": "noul", "instructions": f"Is this question number {i} true for the state?"} for i in range(60)}
    request = _request("state", many)
    assert count_input_tokens(request, max_request_tokens=100_000) > 600
    with pytest.raises(InputTooLongError) as info:
        count_input_tokens(request, max_request_tokens=600)
    assert info.value.limit == 600


def test_255_option_choice_fits_and_is_split_into_sequences(tokenizer) -> None:  # type: ignore[no-untyped-def]
    criteria = {f"option_{i}": f"the description of option number {i}" for i in range(255)}
    request = _request(pair_state(), {"q": {"type": "choice", "instructions": "Which option fits?", "criteria": criteria}})
    tok = tokenize_request(request, tokenizer)
    plans = plan_sequences(tok, 1024)
    assert len(plans) > 1 and all(p.length <= 1024 for p in plans)
    covered = [k for p in plans for part in p.parts for k in range(*part.options)]
    assert covered == list(range(255))
    assert count_input_tokens(request) == sum(p.length for p in plans)


def _plain(tokenizer):  # type: ignore[no-untyped-def]
    """The base tokenizer as shipped, without the long-word split (truncation and padding off, as ours)."""
    from tokenizers import Tokenizer

    plain = Tokenizer.from_file(tokenizer.path)
    plain.no_truncation()
    plain.no_padding()
    return plain


def test_text_without_a_long_word_encodes_exactly_as_the_plain_tokenizer(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from controller.template import render_state

    texts = [
        render_state(pair_state()),
        "Melanie: we went camping at the lake with the kids, and the kids loved it! 🏕️",
        "Café naïve coöperation — Ünïcödé, 東京 and 中文字符, tabs\tand\nnewlines",
        "see https://example.com/a/b?c=d&e=f#frag and id 550e8400-e29b-41d4-a716-446655440000",
        "x" * 100,  # exactly the WordPiece limit: one word, as before
        "é" * 100,
        " ".join("y" * 99 for _ in range(5)),
        "",
    ]
    plain = _plain(tokenizer)
    expected = [tuple(e.ids) for e in plain.encode_batch(texts, add_special_tokens=False)]
    assert tokenizer.encode_texts(texts) == expected
    assert [tokenizer.branch(t)[1:-1] for t in texts] == expected


@pytest.mark.parametrize("word", ["a" * 200, "0123456789abcdef" * 12, "É" * 150, "q" * 101])
def test_a_word_of_101_to_200_characters_is_read_in_two_pieces_not_as_unk(tokenizer, word) -> None:  # type: ignore[no-untyped-def]
    unk = tokenizer._tok.token_to_id("[UNK]")
    assert unk in _plain(tokenizer).encode(f"hash {word} end", add_special_tokens=False).ids  # the limit it works around
    (ids,) = tokenizer.encode_texts([f"hash {word} end"])
    assert unk not in ids and len(ids) > 3
    text = tokenize_request(_request(f"id {word}", {"q": {"type": "noul", "instructions": f"Is {word} known?"}}), tokenizer)
    assert unk not in text.state and unk not in text.questions[0].ids


@pytest.mark.parametrize("length", [201, 4000, 100_000])
def test_a_longer_word_is_read_up_to_its_first_100_characters_then_one_unk(tokenizer, length) -> None:  # type: ignore[no-untyped-def]
    """A blob (base64, a minified payload) costs at most the first piece and one [UNK], not one token per few
    characters: a 4,000-character word read in 100-character pieces took 2,753 tokens (over every budget)."""
    import random
    import string

    rng = random.Random(length)
    word = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))
    unk = tokenizer._tok.token_to_id("[UNK]")
    (ids,) = tokenizer.encode_texts([f"blob {word} end"])
    (head,) = _plain(tokenizer).encode_batch([f"blob {word[:100]}"], add_special_tokens=False)
    (tail,) = _plain(tokenizer).encode_batch(["end"], add_special_tokens=False)
    assert ids == (*head.ids, unk, *tail.ids)
    assert len(ids) <= 100 + 3
