"""benchmarks/ship_relayed.py reproduces the signatures of every shipped relay kernel, so that prewarming it on an
H200 searches each of them again (and nothing else), and the export lands under the shipped files' names."""
from __future__ import annotations

from pathlib import Path

from forge_backend.inspect_model import model_cards
from forge_backend.signature import OpSignature
from forge_backend.store import ShippedStore

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "benchmarks" / "ship_relayed.py"


def _relay_keys() -> set[str]:
    shipped = ShippedStore(ROOT / "kernels_cache")
    return {key for key in shipped.keys()
            if ((shipped.read(key).candidate or {}).get("params") or {}).get("strategy") == "relay"}


def test_the_spec_holds_exactly_the_shipped_relay_signatures():
    found = model_cards(str(SPEC))
    on_h200 = {OpSignature.from_json({**card.signature, "arch": "sm_90"}).key() for card in found.cards}
    relayed = _relay_keys()
    assert len(relayed) == 11
    assert on_h200 == relayed
