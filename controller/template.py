"""The versioned input template shared by training and inference: request -> texts -> token ids -> plan.

Layout (TEMPLATE_VERSION `packed-1`), one *branch* per question and per Choice option / Score level:

    [CLS] state [SEP]                       the shared prefix (positions 0..S-1)
      [CLS] question text [SEP]             a question branch (positions restart at S)
        [CLS] option / level text [SEP]     an option branch (positions restart after its question)

Each branch starts with a `[CLS]` marker; the heads read the marker's final hidden state. Branch texts:
Noul `instructions | yes: <true> | no: <false>` (absent parts left out), Choice `instructions` with options
`name: description` (or `name`), Score `instructions | scale 0 to N` with levels `i: description`. The
question kind is not spelled out: each kind has its own head. The state is compact
JSON (`ensure_ascii=False`; a string state stays as it is). Instructions and criteria that are objects or
arrays are compact JSON text. Literal spellings of special tokens (`[CLS]`, `[sep]`, ...) are lower-cased so
that user text can never produce a special token (the tokenizer matches them case-sensitively, and the model
is uncased, so the text the model reads is unchanged). A word over WordPiece's 100 characters is read in
100-character pieces, not as `[UNK]` (`TemplateTokenizer`). By default nothing is ever truncated: a branch whose
positions exceed `MAX_POSITIONS`, or a request over the token budget, raises `InputTooLongError`. The opt-in
overflow policy `truncate_state` instead keeps the head of a state that leaves its longest branch no room
(at least `MIN_KEPT_STATE` tokens of it) and reports how many tokens it dropped (`TokenizedRequest.truncated`).

A large request is executed as several packed sequences (`plan_sequences`): every sequence repeats the state
(and, for a split Choice, the question), which changes nothing in the answers because an option only ever
attends to the state, its question and itself.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from controller.backend import BackendRequest
from controller.errors import BackendUnavailableError, InputTooLongError
from controller.questions import ChoiceQuestion, Content, NoulQuestion, Question, ScoreQuestion

TEMPLATE_VERSION = "packed-1"
MAX_POSITIONS = 512  # BERT position embeddings: state + question + option must fit
MIN_KEPT_STATE = 64  # `truncate_state` refuses rather than keep less of the state than this
OVERFLOW_POLICIES: tuple[str, ...] = ("refuse", "truncate_state")
Overflow = Literal["refuse", "truncate_state"]
DEFAULT_MAX_REQUEST_TOKENS = 8192  # unique packed tokens of one request (state once + every branch): 255 options of ~30 tokens
DEFAULT_MAX_SEQUENCE_TOKENS = 1024  # one packed sequence; larger requests are split (see module doc)

Kind = Literal["noul", "choice", "score"]
_SPECIAL = re.compile(r"\[(cls|sep|pad|mask|unk)\]", re.IGNORECASE)


# --------------------------------------------------------------------------------------------- rendering
@dataclass(frozen=True)
class RenderedQuestion:
    """One question's branch text and, for Choice / Score, one text per option / level (request order)."""

    kind: Kind
    text: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenderedRequest:
    state: str
    questions: tuple[RenderedQuestion, ...]


def neutralize(text: str) -> str:
    """Make special-token spellings ordinary text; drop unencodable lone surrogates."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return _SPECIAL.sub(lambda m: m.group(0).lower(), text)


def render_content(content: Content | None) -> str:
    """Text as is; objects and arrays as compact JSON with Unicode kept."""
    if content is None:
        return ""
    if isinstance(content, str):
        return neutralize(content)
    return neutralize(json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False))


def render_state(state: Content) -> str:
    return render_content(state)


def render_question(question: Question) -> RenderedQuestion:
    """Branch texts of one question. Keys never appear: only content is rendered."""
    instructions = render_content(question.instructions)
    if isinstance(question, NoulQuestion):
        parts = [instructions] if instructions else []
        if question.true is not None:
            parts.append(f"yes: {render_content(question.true)}")
        if question.false is not None:
            parts.append(f"no: {render_content(question.false)}")
        return RenderedQuestion("noul", " | ".join(parts))
    if isinstance(question, ChoiceQuestion):
        options = tuple(
            neutralize(name) if desc is None else f"{neutralize(name)}: {render_content(desc)}"
            for name, desc in question.options
        )
        return RenderedQuestion("choice", instructions, options)
    if isinstance(question, ScoreQuestion):
        scale = f"scale 0 to {len(question.levels) - 1}"
        levels = tuple(f"{i}: {render_content(desc)}" for i, desc in enumerate(question.levels))
        return RenderedQuestion("score", f"{instructions} | {scale}" if instructions else scale, levels)
    raise TypeError(f"not a question: {type(question).__name__}")


def render_request(request: BackendRequest) -> RenderedRequest:
    return RenderedRequest(render_state(request.state), tuple(render_question(q) for q in request.questions))


# ------------------------------------------------------------------------------------------ tokenization
class TemplateTokenizer:
    """The base model's WordPiece tokenizer without truncation or padding (thread-safe, encode only).

    A word longer than WordPiece's `max_input_chars_per_word` (100 for BERT: a hash, an id, a long URL path) has
    its first 100 characters read as a word of their own before WordPiece (`split_long_words`); the rest is
    read whole when it is within the limit too, else it is one `[UNK]`, so a word costs at most two pieces'
    tokens however long it is. Text without such a word encodes exactly as the plain tokenizer encodes it."""

    def __init__(self, tokenizer_file: str | Path) -> None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer_file))
        tok.no_truncation()  # the shipped tokenizer.json truncates and pads to 128: we never truncate
        tok.no_padding()
        split_long_words(tok)
        self._tok = tok
        self.path = str(tokenizer_file)
        self.vocab_size = int(tok.get_vocab_size())
        ids = {name: tok.token_to_id(name) for name in ("[CLS]", "[SEP]", "[PAD]")}
        if any(v is None for v in ids.values()):
            raise BackendUnavailableError(f"{tokenizer_file} lacks the [CLS]/[SEP]/[PAD] tokens")
        self.cls_id, self.sep_id, self.pad_id = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]
        self._encode_cached = lru_cache(maxsize=8192)(self._encode_one)

    def _encode_one(self, text: str) -> tuple[int, ...]:
        return tuple(self._tok.encode(text, add_special_tokens=False).ids)

    def branch(self, text: str, *, cached: bool = True) -> tuple[int, ...]:
        """`[CLS] text [SEP]`. Question and option texts repeat across requests, so they are cached."""
        body = self._encode_cached(text) if cached else self._encode_one(text)
        return (self.cls_id, *body, self.sep_id)

    def encode_texts(self, texts: list[str]) -> list[tuple[int, ...]]:
        return [tuple(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]


def split_long_words(tok: Any) -> None:
    """Make `tok` (a `tokenizers.Tokenizer` with a WordPiece model) split the first `max_input_chars_per_word`
    characters (counted after normalisation, as WordPiece counts them) off every longer pre-token. The rest is
    then read by WordPiece when it is within the limit as well and is one `[UNK]` when it is not, so a word of
    any length costs at most two pieces' tokens (a 4,000-character blob: about 70 tokens, not 2,753 as with a cut at
    every 100 characters). A pre-token within the limit is left whole, so only text with a longer word changes."""
    from tokenizers import Regex, pre_tokenizers

    limit = getattr(tok.model, "max_input_chars_per_word", None)
    if not isinstance(limit, int) or limit < 1:
        return
    # `^`: the start of each pre-token (the split runs on each one), so only its first `limit` characters part
    split = pre_tokenizers.Split(Regex(rf"^[\s\S]{{{limit}}}"), behavior="isolated")
    tok.pre_tokenizer = split if tok.pre_tokenizer is None else pre_tokenizers.Sequence([tok.pre_tokenizer, split])


_TOKENIZERS: dict[str, TemplateTokenizer] = {}
_TOKENIZER_LOCK = threading.Lock()


def get_tokenizer(model_dir: str | Path | None = None) -> TemplateTokenizer:
    """The tokenizer of `model_dir` (default: the installed base model), loaded once per process."""
    if model_dir is None:
        from controller.embedding import base_model_path

        model_dir = base_model_path()
    path = Path(model_dir)
    file = path / "tokenizer.json" if path.is_dir() else path
    key = str(file.resolve())
    with _TOKENIZER_LOCK:
        tok = _TOKENIZERS.get(key)
        if tok is None:
            if not file.exists():
                raise BackendUnavailableError(f"tokenizer file not found: {file}")
            tok = _TOKENIZERS[key] = TemplateTokenizer(file)
    return tok


@dataclass(frozen=True)
class TokenizedQuestion:
    kind: Kind
    ids: tuple[int, ...]  # the question branch, marker and [SEP] included
    options: tuple[tuple[int, ...], ...] = ()  # one branch per option / level

    @property
    def tokens(self) -> int:
        return len(self.ids) + sum(len(o) for o in self.options)


@dataclass(frozen=True)
class TokenizedRequest:
    state: tuple[int, ...]  # [CLS] state [SEP]
    questions: tuple[TokenizedQuestion, ...]
    truncated: int = 0  # state tokens dropped by the `truncate_state` overflow policy

    @property
    def packed_tokens(self) -> int:
        """Unique tokens of the packed encoding: the state once plus every branch."""
        return len(self.state) + sum(q.tokens for q in self.questions)


def tokenize_request(
    request: BackendRequest | RenderedRequest,
    tokenizer: TemplateTokenizer | None = None,
    *,
    max_positions: int = MAX_POSITIONS,
    max_request_tokens: int = DEFAULT_MAX_REQUEST_TOKENS,
    overflow: Overflow = "refuse",
) -> TokenizedRequest:
    """Render (if needed), tokenize and check the limits; raises `InputTooLongError`. With `overflow=
    "truncate_state"` a state too long for its longest branch is cut to fit (head kept) instead, when at
    least `MIN_KEPT_STATE` of its tokens remain."""
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow must be one of {', '.join(OVERFLOW_POLICIES)}, not {overflow!r}")
    tok = tokenizer or get_tokenizer()
    rendered = request if isinstance(request, RenderedRequest) else render_request(request)
    (state_body,) = tok.encode_texts([rendered.state])
    questions = tuple(
        TokenizedQuestion(rq.kind, tok.branch(rq.text), tuple(tok.branch(o) for o in rq.options))
        for rq in rendered.questions
    )
    truncated = 0
    if overflow == "truncate_state":
        longest = max((len(q.ids) + max((len(o) for o in q.options), default=0) for q in questions), default=0)
        room = max_positions - longest - 2  # [CLS] and [SEP] around the state
        if len(state_body) > room >= MIN_KEPT_STATE:
            truncated, state_body = len(state_body) - room, state_body[:room]
    out = TokenizedRequest((tok.cls_id, *state_body, tok.sep_id), questions, truncated)
    check_limits(out, max_positions=max_positions, max_request_tokens=max_request_tokens)
    return out


def check_limits(tokenized: TokenizedRequest, *, max_positions: int, max_request_tokens: int) -> None:
    s = len(tokenized.state)
    for i, q in enumerate(tokenized.questions):
        longest = max((len(o) for o in q.options), default=0)
        need = s + len(q.ids) + longest
        if need > max_positions:
            longest_part = f" and its longest option ({longest} tokens)" if q.options else ""
            raise InputTooLongError(
                f"input too long: the state ({s} tokens) plus {q.kind} question {i + 1} ({len(q.ids)} tokens)"
                f"{longest_part} need {need} positions; the model reads at most {max_positions}. "
                "Shorten the state or the question.",
                tokens=need,
                limit=max_positions,
                loc=("state",) if s >= max_positions // 2 else ("questions",),
            )
    total = tokenized.packed_tokens
    if total > max_request_tokens:
        raise InputTooLongError(
            f"input too long: the request packs into {total} tokens; the limit is {max_request_tokens}. "
            "Send fewer or shorter questions / options, or split the request.",
            tokens=total,
            limit=max_request_tokens,
            loc=("questions",),
        )


# ------------------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class SequencePart:
    """Question `question` with its options `options[0]:options[1]` (all of them unless split)."""

    question: int
    options: tuple[int, int]


@dataclass(frozen=True)
class SequencePlan:
    parts: tuple[SequencePart, ...]
    length: int  # tokens of this packed sequence, state included


def plan_sequences(tokenized: TokenizedRequest, max_sequence_tokens: int = DEFAULT_MAX_SEQUENCE_TOKENS) -> tuple[SequencePlan, ...]:
    """Greedy split of one request into packed sequences of at most `max_sequence_tokens` tokens each."""
    s = len(tokenized.state)
    plans: list[SequencePlan] = []
    parts: list[SequencePart] = []
    length = s

    def flush() -> None:
        nonlocal parts, length
        if parts:
            plans.append(SequencePlan(tuple(parts), length))
        parts, length = [], s

    for qi, q in enumerate(tokenized.questions):
        n = len(q.options)
        if length + q.tokens <= max_sequence_tokens:
            parts.append(SequencePart(qi, (0, n)))
            length += q.tokens
            continue
        flush()
        start = 0
        while True:  # options of this question, as many per sequence as fit beside state + question
            stop, used = start, s + len(q.ids)
            while stop < n and used + len(q.options[stop]) <= max_sequence_tokens:
                used += len(q.options[stop])
                stop += 1
            if stop == start and n:
                raise InputTooLongError(
                    f"a branch of question {qi + 1} does not fit a sequence of {max_sequence_tokens} tokens",
                    tokens=used + len(q.options[start]),
                    limit=max_sequence_tokens,
                    loc=("questions",),
                )
            parts.append(SequencePart(qi, (start, stop)))
            length = used
            if stop >= n:
                break
            flush()
            start = stop
    flush()
    return tuple(plans)


def count_input_tokens(
    request: BackendRequest,
    *,
    max_request_tokens: int = DEFAULT_MAX_REQUEST_TOKENS,
    max_sequence_tokens: int = DEFAULT_MAX_SEQUENCE_TOKENS,
) -> int:
    """Tokens the packed encoding reads for `request` (the state counted once per packed sequence).

    Raises `InputTooLongError` exactly when the local model would refuse the request.
    """
    tokenized = tokenize_request(request, max_request_tokens=max_request_tokens)
    plans = plan_sequences(tokenized, max_sequence_tokens)
    return sum(p.length for p in plans) if plans else len(tokenized.state)


def template_config() -> dict[str, Any]:
    """What an artifact records about the template it was trained with."""
    return {
        "template_version": TEMPLATE_VERSION,
        "max_positions": MAX_POSITIONS,
        "max_request_tokens": DEFAULT_MAX_REQUEST_TOKENS,
        "max_sequence_tokens": DEFAULT_MAX_SEQUENCE_TOKENS,
    }
