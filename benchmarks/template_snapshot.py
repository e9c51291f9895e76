"""What the template families generate, as hashes, on a machine without a GPU: a refactor of the templates that claims
"no generated kernel changed" is checked by a snapshot before and after (the forty-eighth session's split of four
modules was: 313 cards, 39,898 params, identical).

For every card (test_templates.py's, the same cards built for sm_80, sm_89 and sm_120, probe_variants.py's cases and a
spread of depthwise convs), the snapshot holds the root, the seeds, the defaults of every strategy, and a
breadth-first walk over the actions from the seeds (up to ``--nodes`` params a card): each one's validity, the hash
of its candidate (source, launch plan, description, params) and the hash of its action list.

    python benchmarks/template_snapshot.py OUT.json [--nodes 150]
    python benchmarks/template_snapshot.py --compare BEFORE.json AFTER.json

The comparison prints each card and params whose entry differs and exits 1 if any does.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _p in (_ROOT, _ROOT / "tests", _ROOT / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

ARCHS = ("sm_80", "sm_89", "sm_120")
# (channels, length, k, dtype, channels-fast input, bias, padding, batch): odd and model-sized depthwise convs
CONVS = [(96, 37, 4, "bfloat16", True, False, None, 1), (8192, 2048, 4, "bfloat16", True, False, None, 1),
         (8192, 2048, 4, "float16", True, True, None, 1), (2048, 333, 4, "float32", True, False, None, 2),
         (256, 1000, 3, "bfloat16", False, True, None, 1), (120, 77, 5, "bfloat16", True, False, 2, 3),
         (1024, 512, 4, "float32", False, False, 1, 1), (64, 4096, 7, "float16", True, True, 0, 1),
         (8192, 2048, 5, "bfloat16", True, False, 2, 1), (4096, 1024, 4, "bfloat16", True, True, None, 2)]


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def all_cards() -> dict[str, Any]:
    """Every card the snapshot walks, by a stable name."""
    import probe_variants
    import template_cards as tc
    import test_templates

    cards = {f"t:{name}": make() for name, (make, _) in test_templates.CARDS.items()}
    cards.update({f"t:conv{i}": tc.causal_conv1d(*args) for i, args in enumerate(CONVS)})
    cards.update({f"{arch}:{name}": tc.for_arch(card, arch) for arch in ARCHS for name, card in list(cards.items())})
    cards.update({f"p:{name}": card for name, card, _ in probe_variants.cases()})
    return cards


def card_entry(name: str, card: Any, nodes: int) -> dict[str, Any]:
    """One card's entry: its family, root, seeds, strategy defaults and walked params (see the module docstring)."""
    from forge_backend.search.templates import family_for, family_name
    from forge_backend.search.templates.common import freeze

    fam = family_for(card)
    if fam is None:
        return {"family": None}
    entry: dict[str, Any] = {"family": family_name(fam), "root": fam.root_params(card), "seeds": fam.seeds(card)}
    if hasattr(fam, "defaults"):  # each named strategy's starting point, valid or not
        entry.update({f"defaults:{s}": fam.defaults(card, s) for s in getattr(fam, "STRATEGIES", ())})
    seen, queue, walked = set(), [dict(p) for p in entry["seeds"]], []
    rng = random.Random(name)
    while queue and len(walked) < nodes:
        p = queue.pop(0)
        if freeze(p) in seen:
            continue
        seen.add(freeze(p))
        node: dict[str, Any] = {"params": p, "valid": fam.valid(card, p)}
        try:
            node["candidate"] = digest(fam.generate(card, p).to_json())
        except ValueError as e:  # invalid params: the message is part of the behaviour
            node["candidate"] = f"error {e}"
        actions = fam.actions(card, p)
        node["actions"] = digest(actions)
        walked.append(node)
        rng.shuffle(actions)
        queue.extend(q for _, q in actions[:6])
    entry["nodes"] = walked
    return entry


def snapshot(cards: dict[str, Any], nodes: int) -> dict[str, Any]:
    return {name: card_entry(name, card, nodes) for name, card in sorted(cards.items())}


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per card missing on one side, per differing field, and per walked params whose entry differs."""
    out = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            out.append(f"{name}: only {'after' if a is None else 'before'}")
            continue
        for key in sorted((set(a) | set(b)) - {"nodes"}):
            if a.get(key) != b.get(key):
                out.append(f"{name}: {key} {a.get(key)!r} -> {b.get(key)!r}")
        an, bn = a.get("nodes", []), b.get("nodes", [])
        for x, y in zip(an, bn):
            if x != y:
                out.append(f"{name}: params {x['params']}: {x} -> {y}")
        if len(an) != len(bn):
            out.append(f"{name}: {len(an)} walked params -> {len(bn)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="where to write the snapshot (JSON)")
    ap.add_argument("--nodes", type=int, default=150, help="params walked a card (default 150)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="two snapshots to compare")
    args = ap.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        diff = differences(before, after)
        print("\n".join(diff) if diff else f"identical: {len(before)} cards")
        return 1 if diff else 0
    if not args.out:
        ap.error("give OUT.json, or --compare BEFORE AFTER")
    if args.nodes < 1:
        ap.error("--nodes must be at least 1")
    snap = snapshot(all_cards(), args.nodes)
    Path(args.out).write_text(json.dumps(snap, sort_keys=True, indent=0, default=repr))
    walked = sum(len(e.get("nodes", [])) for e in snap.values())
    print(f"{len(snap)} cards, {walked} params walked -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
