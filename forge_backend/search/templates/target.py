"""What the card's GPU architecture lets a template use.

Note [templates for the card's architecture]
The templates were written and timed on the H200 (sm_90), but a card's key holds its GPU architecture, and kforge
doctor says kernels need sm_80 or newer. Compiled on the CPU with NVRTC 13.5 (forty-second session), the 335
candidates of tests/test_templates.py's cards (their roots, seeds and sampled actions) all compile for sm_90, sm_100
and sm_120; for sm_80, sm_86 and sm_89, 59 did not, every one a ``cluster``, ``pipe``, ``relay`` or ``resident``
layout (``__cluster_dims__``, bulk copies, mbarriers with transaction counts, ``fence.proxy.async``); for sm_75, 102
did not, also the paired bf16/fp16 conversions and mbarriers of the everyday layouts. And a block's shared memory
is capped per architecture, so the relay's 200 KB of slots that fit the H200 fail to launch where the cap is 99 KB.
Before this, an sm_8x card of the long rows got the H200's seeds: at the softmax [64, 262144] bf16 four of seven
(the relay root, two clusters, the pipe) could not compile for sm_80, and the proposer then offers the failed seeds'
neighbours, layouts of the same strategies, so a compile's 8 iterations went mostly to compile failures.

So templates serve sm_80 and newer (``Target.served``: TemplateProposer offers nothing below it, the search runner
and prewarm do not start a template search there, and the op stays with PyTorch or the LLM proposer); the families
with sm_90 layouts (softmax, group_norm) ask ``layout_ok`` first in ``valid``:

* the strategies and knobs in ``SM90_STRATEGIES`` / ``SM90_KNOBS`` need sm_90 or newer;
* a cluster of ``cs`` blocks stays within ``Target.max_cluster`` (16, a non-portable size, where sm_90 and sm_100
  allow it; 8, the portable size, elsewhere);

and each family that asks for dynamic shared memory checks a block's against ``smem_limit(card)`` (the opt-in
maximum per block of the CUDA Programming Guide's table; 99 KB for an architecture the table here lacks) where it
checked the H200's 227 KB.
On an sm_90 card every layout stays valid and every generated source is the same, byte for byte (the 2,066 sources of
every probe case's seeds and their actions hash as before). On the H200 (results/h200/gpu_tests_session42_full.log,
test_templates_gpu.py's test_other_archs_first_kernels_pass_here) the seeds an sm_80 and an sm_120 card get at the 17
anchor shapes whose H200 root needs sm_90 pass the verifier, compiled for the H200: no other GPU ran them. The LLM
proposer's prompt described the H200 whatever the GPU; the worker's baseline reply now describes its own device
(runtime/worker.py, gpu_description: name, arch, SMs, opt-in shared memory, L2), which run_search hands to the
proposers that prompt a model, and on the H200 it reports the 227 KB of the table here.

The SM count: grids are sized for the H200's 132 SMs (``common.SMS``), a guess that costs only speed, except in the
cooperative layouts, whose blocks must all be resident at once. The relay's grid is one block per SM of the GPU that
launches it (``num_sms``: Note [the GPU's SM count in a plan] in contract.py), so it runs on an H100 PCIe's 114 SMs
too, where a grid of 132 is refused; its progress rule is checked for 132 blocks by ``relay_valid`` and again by
the kernel for its own grid (Note [rows relayed through global memory] in relay.py). The other cooperative layouts
(``resident``, the group norm's ``lag``) keep 132 blocks: on a GPU with fewer SMs their launch fails (a failed
candidate, never a hang) and the search takes the next seed, and a shipped or imported record of one of them (or a
relay record made before the relay's grid followed the GPU) fails its re-verification there and is searched like a
miss (Note [a record that fails here is searched] in runtime/cuda_provider.py).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from ...cards import OperatorCard

REFERENCE_SM = 90  # the H200's; a card whose arch is not ``sm_<n>`` (CPU tests: ``cpu``) is served as this
SM90_STRATEGIES = frozenset({"cluster", "pipe", "relay", "resident"})  # clusters, bulk copies, tx-count mbarriers
SM90_KNOBS = frozenset({"tma"})  # Note [a chunk fetched by the copy engine] in common.py: a bulk copy
_SMEM_OPTIN_KB = {80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 103: 227, 120: 99, 121: 99}
_SMEM_UNKNOWN_KB = 99  # the smallest cap of the table, for an architecture it lacks
_CLUSTER_16 = frozenset({90, 100, 103})  # non-portable cluster size 16


@dataclass(frozen=True)
class Target:
    """A GPU architecture, as ``major * 10 + minor`` (90 for sm_90)."""
    sm: int

    @property
    def served(self) -> bool:
        return self.sm >= 80

    @property
    def sm90_features(self) -> bool:
        """Thread-block clusters, bulk copies and mbarriers with transaction counts."""
        return self.sm >= 90

    @property
    def smem_limit(self) -> int:
        """Bytes of shared memory one block may ask for (dynamic, opted in above 48 KB)."""
        return _SMEM_OPTIN_KB.get(self.sm, _SMEM_UNKNOWN_KB) * 1024

    @property
    def max_cluster(self) -> int:
        return 16 if self.sm in _CLUSTER_16 else 8 if self.sm90_features else 1


def target_of(card: OperatorCard) -> Target:
    return _target(card.arch)


@functools.lru_cache(maxsize=None)
def _target(arch: str) -> Target:
    m = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    return Target(int(m.group(1)) if m else REFERENCE_SM)


def smem_limit(card: OperatorCard) -> int:
    return target_of(card).smem_limit


def layout_ok(card: OperatorCard, p: dict[str, Any]) -> bool:
    """The architecture of ``card`` can run layout ``p`` (Note [templates for the card's architecture]); its shared
    memory is the family's own check."""
    t = target_of(card)
    if not t.served:
        return False
    if not t.sm90_features and (p.get("strategy") in SM90_STRATEGIES or SM90_KNOBS & p.keys()):
        return False
    return p.get("strategy") not in ("cluster", "pipe") or not isinstance(p.get("cs"), int) or \
        p["cs"] <= t.max_cluster
