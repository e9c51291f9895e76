"""The Inductor baseline of one signature (Note [the baseline inside Inductor]) compiles the op as one graph, with
no graph break that would leave it to eager, and computes what the op computes (CPU)."""
import torch
from torch._dynamo.utils import counters

import template_cards as tc
from forge_backend.reference import call_aten
from forge_backend.runtime.worker import inductor_single_op
from forge_backend.verify import make_inputs


def test_single_op_compiles_whole_and_matches_the_op():
    for card in (tc.softmax((8, 33), "float32"), tc.group_norm(2, 16, 5, 5, groups=4, used=(0,)),
                 tc.layer_norm((4, 32), (32,), "float32", used=(0,))):
        inputs = make_inputs(card, "normal", 0, torch.device("cpu"))
        torch._dynamo.reset()
        counters.clear()
        fn = inductor_single_op(card, inputs)
        with torch.no_grad():
            got = fn(*inputs)
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        for g, e in zip(got, call_aten(card.signature_obj(), inputs)):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"], card.op
        assert counters["inductor"]["fxgraph_cache_miss"] + counters["inductor"]["fxgraph_cache_hit"] >= 1
