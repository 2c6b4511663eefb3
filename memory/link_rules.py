"""What an authored link may not say (`Engine.link`, `Engine.set_links`): each rule raises `InvalidLinkError`
before anything is stored, so a refused request changes nothing.

- no self-link, of any relation;
- no (dst, relation) twice in one authored list;
- no link of a directed relation (`DIRECTED_RELATIONS`) whose reverse is an authored link: the user unlinks
  that one first;
- no `supersedes` cycle of authored links, of any length (`ACYCLIC_RELATIONS`): every node in it would be
  superseded;
- no `temporal` link whose attrs `order` contradicts the authored reverse link's ("a before b" wants "b after a").

Symmetric relations take both directions. Only the user's own links count: derived edges (pair judgments,
timestamps, consolidation) are the engine's guesses, so an authored link that contradicts one is accepted and
overrules it (`lifecycle.settle_authored` unlinks the derived reverse edge), and they are never checked here
themselves (the write path, consolidation and relink do not pass through this module; they skip a derived edge
that would reverse an authored directed one, `write_path.add_unless_explicit`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memory.errors import InvalidLinkError
from memory.store.base import Store
from memory.types import ACYCLIC_RELATIONS, DIRECTED_RELATIONS, Edge, EdgeOrigin

# A temporal order (`controller.families.TEMPORAL_RELATIONS` but "unknown") read from the other end.
REVERSE_ORDER: dict[str, str] = {"before": "after", "after": "before", "during": "contains", "contains": "during",
                                 "overlaps": "overlaps", "same_time": "same_time"}


def authored(store: Store, src: str, relation: str) -> list[Edge]:
    return [e for e in store.edges_from(src, [relation]) if e.origin == EdgeOrigin.EXPLICIT]


def path_between(store: Store, start: str, goal: str, relation: str) -> list[str] | None:
    """The node ids of a shortest path from `start` to `goal` along authored `relation` links, or None."""
    parent: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        reached = []
        for current in frontier:
            for edge in authored(store, current, relation):
                if edge.dst in parent:
                    continue
                parent[edge.dst] = current
                if edge.dst == goal:
                    path = [goal]
                    while (step := parent[path[-1]]) is not None:
                        path.append(step)
                    return path[::-1]
                reached.append(edge.dst)
        frontier = reached
    return None


def check_link(store: Store, src: str, dst: str, relation: str, attrs: Mapping[str, Any] | None = None) -> None:
    """Refuse the authored link (src, dst, relation) if it contradicts itself or the stored links (read-only)."""
    key = (src, dst, relation)
    if src == dst:
        raise InvalidLinkError(f"a node cannot link to itself ({src!r} -> {dst!r}, {relation!r})", key)
    reverse = next((e for e in authored(store, dst, relation) if e.dst == src), None)
    if reverse is not None and relation in DIRECTED_RELATIONS:
        raise InvalidLinkError(f"{relation!r} link {src!r} -> {dst!r} contradicts the authored link {dst!r} -> {src!r}; "
                               "unlink that one first", key)
    if relation in ACYCLIC_RELATIONS:
        cycle = path_between(store, dst, src, relation)
        if cycle is not None:
            raise InvalidLinkError(f"{relation!r} link {src!r} -> {dst!r} would close a cycle with the authored links "
                                   f"{' -> '.join(map(repr, cycle))}", key)
    if reverse is not None and relation == "temporal":
        order, stored = (attrs or {}).get("order"), reverse.attrs.get("order")
        if isinstance(order, str) and isinstance(stored, str) and order in REVERSE_ORDER and stored in REVERSE_ORDER \
                and REVERSE_ORDER[stored] != order:
            raise InvalidLinkError(f"temporal link {src!r} -> {dst!r} with order {order!r} contradicts the authored "
                                   f"link {dst!r} -> {src!r} with order {stored!r} (its reverse is "
                                   f"{REVERSE_ORDER[stored]!r}); unlink that one first", key)


def check_link_list(store: Store, node_id: str, links: Sequence[tuple[str, str]]) -> None:
    """Refuse an authored list of (dst, relation) pairs for `node_id`: a pair twice, or one `check_link` refuses.

    The list replaces the node's authored outgoing links, and no reverse link or cycle runs through those (a
    path back to `node_id` ends there), so the stored links are the ones to check against."""
    seen: set[tuple[str, str]] = set()
    for dst, relation in links:
        if (dst, relation) in seen:
            raise InvalidLinkError(f"link ({dst!r}, {relation!r}) appears twice in the links of {node_id!r}",
                                   (node_id, dst, relation))
        seen.add((dst, relation))
        check_link(store, node_id, dst, relation)
