"""Retrieval quality through note-taking: does a later session find the note an earlier one
distilled? hit@1, hit@3 and MRR printed next to their targets.

    python benchmarks/retrieval_quality.py                      # hashing and wordllama, vectors and hybrid
    python benchmarks/retrieval_quality.py --model-dir DIR      # and a sentence-transformers model
    python benchmarks/retrieval_quality.py --embedder hashing --hybrid off --misses

Two sets, each in a store of its own:
- paraphrases (benchmarks/data/paraphrases.yaml, written for this project): one note per
  task family plus distractor notes on nearby topics, and questions that ask for the same
  need in other words
- exact identifiers: incident notes generated here from a seed, near-identical but for one
  order number, error code, hostname or ticket id, and a question quoting each id in other words

Every note is stored as distillation stores it (parsed, rendered to Markdown, embedded,
added to the knowledge base) and every question asked through `KnowledgeBase.search`,
the search a later session's retrieval runs, in the caller's tenant chain. MRR counts the
first 10 results. `--hybrid` adds the keyword index fused with the vectors (hybrid search;
`--keyword-weight`, `--vector-weight` and `--rrf-k` weigh it, default the library's
`HybridWeights()`). The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import yaml

from agentloop.adapters import open_note_taking, open_stores
from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.adapters.embedders.wordllama import WordLlamaEmbedder
from agentloop.logging import configure_logging
from agentloop.notes import (
    DistillationSettings, KnowledgeBase, KnowledgeItem, Layer, LayerIds, NoteType, RetrievalSettings, parse_note,
)
from agentloop.ports import HybridWeights
from agentloop.ports.vectors import Embedder
from agentloop.testing import ScriptedLLM

DATA = Path(__file__).resolve().parent / "data" / "paraphrases.yaml"
CALLER = LayerIds("default", org_id="acme", team_id="eng", project_id="shop")
DEPTH = 10
DEFAULT_EMBEDDER = "wordllama"
PARAPHRASE_TARGETS = (("hit@1", 0.70), ("hit@3", 0.90))
EXACT_TARGETS = (("hit@1", 0.95),)


@attrs.frozen
class Case:
    """A note to store (`key` names it) or a question and the key of the note it is about."""

    key: str
    text: str


@attrs.frozen
class QualitySet:
    name: str
    notes: tuple[Case, ...]
    questions: tuple[Case, ...]


@attrs.frozen
class Scores:
    hit1: float
    hit3: float
    mrr: float
    duplicates: int
    misses: tuple[tuple[str, str, str], ...]  # question, the note it is about, the note ranked first


def note_markdown(note: dict[str, Any]) -> str:
    """The note as a distillation reply would give it."""
    patterns = "\n".join(f"- {pattern}" for pattern in note["patterns"])
    return (
        f"## Context\n{note['context']}\n\n## Solution\n{note['solution']}\n\n"
        f"## Key Patterns\n{patterns}\n\n## Tags\n{', '.join(note['tags'])}\n"
    )


def paraphrase_set(families: int | None = None) -> QualitySet:
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    chosen = data["families"][:families]
    notes = [Case(f["id"], note_markdown(f["note"])) for f in chosen]
    notes += [Case(d["id"], note_markdown(d["note"])) for d in data["distractors"]]
    questions = tuple(Case(f["id"], question) for f in chosen for question in f["questions"])
    return QualitySet("paraphrases", tuple(notes), questions)


INCIDENTS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "order": (
        {
            "context": "Order {id} stuck in pending after the payment webhook timed out",
            "solution": "Re-sent the payment webhook for order {id} from the provider dashboard; the order moved "
            "to paid and the confirmation email went out. Logged it on the incident board.",
            "patterns": ["re-send the webhook instead of editing the order status by hand"],
            "tags": ["incident", "orders", "webhooks"],
        },
        (
            "The purchase {id} never left pending, what fixed it?",
            "What did we do about {id} when the customer's payment went through but the order didn't update?",
            "Customer asks about {id}: paid but still not confirmed. How was that resolved?",
        ),
    ),
    "error": (
        {
            "context": "Checkout failing with gateway error {id}",
            "solution": "Error {id} came back from the card gateway for every attempt in one region; switched that "
            "region to the backup acquirer and opened a case with the gateway. Checkouts recovered within minutes.",
            "patterns": ["fail over to the backup acquirer while the gateway investigates"],
            "tags": ["incident", "payments", "gateway"],
        },
        (
            "Shoppers see code {id} when paying. Have we handled that before?",
            "What was the workaround the last time the card processor answered with {id}?",
            "Payments keep getting refused with {id}; what did the team do?",
        ),
    ),
    "host": (
        {
            "context": "Host {id} stopped answering health checks",
            "solution": "{id} had a full root volume after a runaway debug log; removed the log, restarted the agent "
            "and the host rejoined the load balancer pool. Turned debug logging off in its config.",
            "patterns": ["check free disk first when a host drops out of the pool"],
            "tags": ["incident", "hosts", "monitoring"],
        },
        (
            "The machine {id} dropped out of rotation; how did we bring it back last time?",
            "Monitoring says {id} is down again. What was done before?",
            "Why was {id} failing its probes, and what was the fix?",
        ),
    ),
    "ticket": (
        {
            "context": "Ticket {id}: customer cannot download invoices",
            "solution": "For ticket {id} the invoice links had expired because the signed URLs lived for one hour; "
            "regenerated them and sent them to the customer, and raised the link lifetime to seven days.",
            "patterns": ["signed download links need a lifetime longer than an email round trip"],
            "tags": ["incident", "support", "invoices"],
        },
        (
            "What was the outcome of {id}, the one about billing documents that wouldn't open?",
            "Reopening {id}: the client again can't get their bills. What happened the first time?",
            "How did support close {id}?",
        ),
    ),
}


def _identifier(kind: str, rng: random.Random) -> str:
    if kind == "order":
        return f"ORD-{rng.randrange(10**7, 10**8)}"
    if kind == "error":
        return f"E{rng.randrange(10**4, 10**5)}"
    if kind == "host":
        role, region = rng.choice(["web", "api", "db", "cache"]), rng.choice(["eu", "us", "ap"])
        return f"{role}-{region}-{rng.randrange(1, 100):02d}.prod.internal"
    return f"OPS-{rng.randrange(10**4, 10**5)}"


def identifier_set(incidents: int = 200, seed: int = 24) -> QualitySet:
    """`incidents` notes, the kinds taking turns, each with a distinct id drawn from `seed`,
    and one question per note in one of its kind's phrasings."""
    rng = random.Random(seed)
    seen: set[str] = set()
    notes: list[Case] = []
    questions: list[Case] = []
    kinds = list(INCIDENTS)
    for index in range(incidents):
        kind = kinds[index % len(kinds)]
        identifier = _identifier(kind, rng)
        while identifier in seen:
            identifier = _identifier(kind, rng)
        seen.add(identifier)
        note, phrasings = INCIDENTS[kind]
        filled = {
            name: [part.format(id=identifier) for part in value] if isinstance(value, list) else value.format(id=identifier)
            for name, value in note.items()
        }
        notes.append(Case(identifier, note_markdown(filled)))
        questions.append(Case(identifier, rng.choice(phrasings).format(id=identifier)))
    return QualitySet("exact ids", tuple(notes), tuple(questions))


def make_embedder(spec: str) -> Embedder:
    """`hashing`, `wordllama` or `sentence-transformers:PATH`."""
    if spec == "hashing":
        return HashingEmbedder()
    if spec == "wordllama":
        return WordLlamaEmbedder()
    if spec.startswith("sentence-transformers:"):
        from agentloop.adapters.embedders.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(spec.split(":", 1)[1])
    raise ValueError(f"unknown embedder {spec!r}; give hashing, wordllama or sentence-transformers:PATH")


def hybrid_settings(on: bool, weights: HybridWeights) -> RetrievalSettings:
    """Retrieval settings with the keyword side of hybrid search weighed by `weights`, or off."""
    return RetrievalSettings(hybrid=weights if on else attrs.evolve(weights, keyword=0.0))


async def store_notes(knowledge: KnowledgeBase, notes: Sequence[Case]) -> tuple[dict[int, str], int]:
    """Store each note as distillation does; the keys by note id, and how many notes
    distillation would have folded into an earlier one as duplicates."""
    rendered = [parse_note(case.text) for case in notes]
    markdowns = [note.to_markdown() for note in rendered]
    vectors = await knowledge.embedder.aembed(markdowns)
    above = DistillationSettings().duplicate_above
    at = datetime(2026, 1, 1, tzinfo=UTC)
    keys: dict[int, str] = {}
    duplicates = 0
    for case, note, markdown, vector in zip(notes, rendered, markdowns, vectors, strict=True):
        if await knowledge.find_duplicate(vector, owner=CALLER, above=above) is not None:
            duplicates += 1
        item = await knowledge.add(KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, CALLER, note.title, markdown, vector, at))
        assert item.id is not None
        keys[item.id] = case.key
    return keys, duplicates


async def score(knowledge: KnowledgeBase, keys: dict[int, str], questions: Sequence[Case], duplicates: int) -> Scores:
    hit1 = hit3 = 0
    reciprocal = 0.0
    misses = []
    for question in questions:
        found = [keys[r.item.key] for r in await knowledge.search(question.text, CALLER, k=DEPTH, min_similarity=-1.0)]
        rank = found.index(question.key) + 1 if question.key in found else None
        hit1 += rank == 1
        hit3 += rank is not None and rank <= 3
        reciprocal += 1.0 / rank if rank else 0.0
        if rank != 1:
            misses.append((question.text, question.key, found[0] if found else "-"))
    count = len(questions)
    return Scores(hit1 / count, hit3 / count, reciprocal / count, duplicates, tuple(misses))


def measure(
    embedder: Embedder, quality_set: QualitySet, modes: Sequence[bool], weights: HybridWeights = HybridWeights()
) -> dict[bool, Scores]:
    """Scores with hybrid search off and on, as `modes` asks."""
    results: dict[bool, Scores] = {}
    with tempfile.TemporaryDirectory() as directory, open_stores(directory, embedder=embedder) as stores:
        with closing(open_note_taking(stores, ScriptedLLM())) as loader:
            keys, duplicates = asyncio.run(store_notes(loader.knowledge, quality_set.notes))
        for mode in modes:
            settings = hybrid_settings(mode, weights)
            with closing(open_note_taking(stores, ScriptedLLM(), retrieval=settings)) as note_taking:
                results[mode] = asyncio.run(score(note_taking.knowledge, keys, quality_set.questions, duplicates))
    return results


def _targets(scores: Scores, targets: Sequence[tuple[str, float]]) -> str:
    said = []
    for label, target in targets:
        measured = scores.hit1 if label == "hit@1" else scores.hit3
        said.append(f"{label} >= {target:.2f} {'ok' if measured >= target else 'MISSED'}")
    return ", ".join(said)


def print_row(quality_set: QualitySet, spec: str, name: str, mode: str, scores: Scores) -> None:
    head = f"{quality_set.name:<12} {spec:<22} {name:<28} {mode:<8}"
    targets: Sequence[tuple[str, float]] = ()
    if spec == DEFAULT_EMBEDDER and quality_set.name == "paraphrases":
        targets = PARAPHRASE_TARGETS
    elif spec == DEFAULT_EMBEDDER and quality_set.name == "exact ids" and mode == "hybrid":
        targets = EXACT_TARGETS
    figures = f"{scores.hit1:>6.2f} {scores.hit3:>6.2f} {scores.mrr:>6.3f} {scores.duplicates:>6}"
    print(f"{head} {figures}   {_targets(scores, targets) or '-'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", action="append", help="hashing, wordllama or sentence-transformers:PATH "
                        "(repeat for several; default: hashing and wordllama)")
    parser.add_argument("--model-dir", help="a sentence-transformers model directory, measured too")
    parser.add_argument("--hybrid", choices=["on", "off", "both"], default="both")
    parser.add_argument("--keyword-weight", type=float, default=HybridWeights().keyword)
    parser.add_argument("--vector-weight", type=float, default=HybridWeights().vector)
    parser.add_argument("--rrf-k", type=float, default=HybridWeights().rrf_k)
    parser.add_argument("--families", type=int, help="only the first N task families of the paraphrase set")
    parser.add_argument("--incidents", type=int, default=200, help="notes (and questions) of the exact-identifier set")
    parser.add_argument("--misses", action="store_true", help="print each question whose note was not ranked first")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    specs = list(args.embedder or ["hashing", DEFAULT_EMBEDDER])
    if args.model_dir:
        specs.append(f"sentence-transformers:{args.model_dir}")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.hybrid]
    weights = HybridWeights(vector=args.vector_weight, keyword=args.keyword_weight, rrf_k=args.rrf_k)
    sets = [paraphrase_set(args.families), identifier_set(args.incidents)]
    for quality_set in sets:
        print(f"{quality_set.name}: {len(quality_set.notes)} notes, {len(quality_set.questions)} questions")
    print("duplicates: notes distillation would fold into an earlier one (more than 0.95 similar)")
    print(f"{'set':<12} {'embedder':<22} {'name':<28} {'search':<8} {'hit@1':>6} {'hit@3':>6} {'MRR':>6} {'dupes':>6}   targets")
    misses: list[str] = []
    for spec in specs:
        embedder = make_embedder(spec)
        label = spec if not spec.startswith("sentence-transformers:") else "sentence-transformers"
        for quality_set in sets:
            results = measure(embedder, quality_set, modes, weights)
            for mode, scores in results.items():
                shown = "hybrid" if mode else "vectors"
                print_row(quality_set, label, embedder.name, shown, scores)
                if args.misses:
                    misses += [
                        f"{quality_set.name} / {label} / {shown}: {q!r} wants {want}, got {got}" for q, want, got in scores.misses
                    ]
    if misses:
        print()
        print("\n".join(misses))


if __name__ == "__main__":
    main()
