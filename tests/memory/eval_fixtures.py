"""A tiny LoCoMo-shaped file written by the tests themselves (the real data may not be bundled or read).

Two conversations with two sessions each, questions of all five categories, one malformed evidence id
(`D1:2; D2:3`), one missing evidence list and one adversarial answer, plus an audit file that corrects one
question's evidence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TURNS: dict[str, list[list[tuple[str, str]]]] = {
    "conv-26": [
        [
            ("Caroline", "I went to the LGBTQ support group yesterday and it was powerful."),
            ("Melanie", "That sounds great! I just finished a painting of a lake sunrise."),
            ("Caroline", "I want to study counseling and work in mental health."),
            ("Melanie", "My kids love the pottery class we took together."),
        ],
        [
            ("Caroline", "I adopted a puppy named Oscar last weekend."),
            ("Melanie", "We went camping at the beach with the whole family."),
            ("Caroline", "Oscar chewed my counseling textbook, so I bought a new copy."),
            ("Melanie", "I signed up for a violin course downtown."),
        ],
    ],
    "conv-30": [
        [
            ("Jon", "I lost my job at the bank, so I am opening a dance studio."),
            ("Gina", "My clothing store got its first big order from Paris."),
            ("Jon", "The studio needs a new wooden floor before spring."),
        ],
        [
            ("Gina", "I hired two designers for the store in Rome."),
            ("Jon", "The dance studio opened and twenty students came."),
            ("Gina", "We celebrated the Rome store with a dinner party."),
        ],
    ],
}

DATES = ("1:56 pm on 8 May, 2023", "10:37 am on 27 June, 2023")

QA: dict[str, list[dict[str, Any]]] = {
    "conv-26": [
        {"question": "What did Melanie paint?", "answer": "a lake sunrise", "evidence": ["D1:2"], "category": 4},
        {"question": "When did Caroline adopt Oscar?", "answer": "the weekend before 27 June 2023", "evidence": ["D2:1"], "category": 2},
        {"question": "What did Caroline buy after Oscar chewed her counseling textbook?", "answer": "a new copy",
         "evidence": ["D1:3", "D2:3"], "category": 1},
        {"question": "Would Caroline enjoy the pottery class?", "answer": "maybe", "evidence": ["D1:2; D1:4"], "category": 3},
        {"question": "What did Caroline paint?", "adversarial_answer": "a lake sunrise", "evidence": ["D1:2"], "category": 5},
        {"question": "What is Melanie's favourite colour?", "answer": "unknown", "category": 4},
    ],
    "conv-30": [
        {"question": "Why did Jon open a dance studio?", "answer": "he lost his job", "evidence": ["D:1:1", "D2:2"], "category": 1},
        {"question": "Where did Gina open a second store?", "answer": "Rome", "evidence": ["D2:1"], "category": 4},
        {"question": "When did the dance studio open?", "answer": "June 2023", "evidence": ["D2:2"], "category": 2},
    ],
}


def locomo_samples() -> list[dict[str, Any]]:
    samples = []
    for sid, sessions in TURNS.items():
        speakers = sorted({s for session in sessions for s, _ in session}, key=lambda s: [t[0] for t in sessions[0]].index(s))
        conv: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
        for n, session in enumerate(sessions, start=1):
            conv[f"session_{n}_date_time"] = DATES[n - 1]
            turns = []
            for i, (speaker, text) in enumerate(session, start=1):
                turn = {"speaker": speaker, "dia_id": f"D{n}:{i}", "text": text}
                if sid == "conv-26" and (n, i) == (1, 2):
                    turn["blip_caption"] = "a photo of a painting of a sunrise over a lake"
                turns.append(turn)
            conv[f"session_{n}"] = turns
        conv["session_3_date_time"] = "9:00 am on 1 July, 2023"  # a date key without a session
        samples.append({
            "sample_id": sid,
            "conversation": conv,
            "qa": QA[sid],
            "observation": {"session_1_observation": {speakers[0]: [["a fact", "D1:1"]]}},
            "event_summary": {"events_session_1": {speakers[0]: ["an event"]}},
            "session_summary": {"session_1_summary": "a summary"},
        })
    return samples


def audit_entries() -> list[dict[str, Any]]:
    # conv-26 is locomo10 index 0; its question 0 ("What did Melanie paint?") gets corrected evidence
    return [{"question_id": "locomo_0_qa0", "question": QA["conv-26"][0]["question"], "category": 4,
             "error_type": "WRONG_CITATION", "cited_evidence": ["D1:2"], "correct_evidence": ["D1:2", "D2:4"]}]


def write_locomo(directory: Path) -> tuple[Path, Path]:
    data = directory / "locomo_tiny.json"
    audit = directory / "audit_tiny.json"
    data.write_text(json.dumps(locomo_samples()), encoding="utf-8")
    audit.write_text(json.dumps(audit_entries()), encoding="utf-8")
    return data, audit
