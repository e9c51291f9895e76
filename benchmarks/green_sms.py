"""The relay roots on fewer SMs: each timed in green contexts of the H200 (``torch.cuda.green_contexts``) that hold
112 and 72 of its 132 SMs, beside PyTorch's op and a copy of the same bytes in the same context, and on the whole GPU.

    python benchmarks/green_sms.py [--sms 132 112 72] [--rounds 2] [--out DIR]

A green context limits the SMs its streams' kernels run on; the memory system (HBM, L2) stays the whole GPU's, so
this is a GPU with fewer SMs and the H200's bandwidth, not an H100 PCIe. Each launcher is built inside the context,
so the relay's grid is the context's SM count (Note [the GPU's SM count in a plan] in forge_backend/contract.py),
and verified there before it is timed. Times are CUDA events around one flushed call (forge_backend/measure.py),
medians of 30; every row's % is of the copy of the same bytes timed in the same context and round. Writes
green_sms.json and green_sms.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
import template_cards as tc  # noqa: E402
from harness import environment  # noqa: E402

SOFTCAP = "to_float32(mul(tanh(div(x0,30.0)),30.0))"
CASES = {
    "softmax [64,262144] bf16": lambda: tc.softmax((64, 262144), "bfloat16"),
    "softcap softmax [64,262144] bf16": lambda: tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")]),
    "group_norm [1,512,128,128] fp32": lambda: tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)),
    "softmax [64,262144] fp32": lambda: tc.softmax((64, 262144), "float32"),
}


@contextmanager
def green(sms: int):
    ctx = torch.cuda.green_contexts.GreenContext.create(num_sms=sms, device_id=0)
    ctx.set_context()
    try:
        stream = ctx.Stream()
        with torch.cuda.stream(stream):
            yield
        stream.synchronize()
    finally:
        ctx.pop_context()


def one_context(sms: int, full: int, rounds: int) -> list[dict]:
    from forge_backend.measure import Timer, copy_call
    from forge_backend.reference import call_aten
    from forge_backend.roofline import min_bytes
    from forge_backend.runtime.launch import Launcher, context_sm_count
    from forge_backend.runtime.nvrtc import compile_candidate
    from forge_backend.search.templates import family_for
    from forge_backend.verify import make_inputs, verify

    dev = torch.device("cuda", 0)
    rows = []
    with (nullcontext() if sms == full else green(sms)):
        held = context_sm_count(0)
        timer = Timer(dev)
        for name, make in CASES.items():
            card = make()
            fam = family_for(card)
            params = fam.root_params(card)
            cand = fam.generate(card, params)
            run = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, dev)
            rep = verify(card, run.launch_into, run.allocate_outputs, dev)
            inputs = make_inputs(card, "normal", 0, dev)
            sig = card.signature_obj()
            nbytes = min_bytes(sig)
            copy = copy_call(dev, nbytes)
            for r in range(rounds):
                times = {"copy": timer.time(copy).median_us,
                         "kforge": timer.time(lambda: run(inputs)).median_us,
                         "eager": timer.time(lambda: call_aten(sig, inputs)).median_us}
                rows.append({"case": name, "sms_asked": sms, "sms": held, "grid": run.launches[0].grid[0],
                             "verified": rep.ok, "round": r, "mb": nbytes / 1e6, **{f"{k}_us": v for k, v in
                                                                                      times.items()},
                             "pct_copy": 100 * times["copy"] / times["kforge"],
                             "vs_eager": times["eager"] / times["kforge"]})
                print(f"{sms:4d} SMs ({held}) {name:34s} copy {times['copy']:7.1f} kforge {times['kforge']:7.1f} "
                      f"eager {times['eager']:7.1f} us  {rows[-1]['pct_copy']:5.1f}% of the copy  "
                      f"{rows[-1]['vs_eager']:.2f}x eager  verified {rep.ok}", flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| case | SMs | grid | verified | copy us | kforge us | eager us | % of the copy | x eager |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['sms']} | {r['grid']} | {r['verified']} | {r['copy_us']:.1f} | "
                     f"{r['kforge_us']:.1f} | {r['eager_us']:.1f} | {r['pct_copy']:.1f} | {r['vs_eager']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, nargs="+", default=[132, 112, 72])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("."))
    a = ap.parse_args()
    full = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [row for sms in a.sms for row in one_context(sms, full, a.rounds)]
    env = environment("python benchmarks/green_sms.py " + " ".join(sys.argv[1:]))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "green_sms.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    head = (f"# The relay roots in green contexts of fewer SMs\n\n{env['date']}, {env.get('gpu')}, torch "
            f"{env['torch']}, `{env['command']}`. Events around one flushed call, medians of 30; % is of the copy of "
            f"the same bytes in the same context and round.\n\n")
    (a.out / "green_sms.md").write_text(head + table(rows) + "\n")


if __name__ == "__main__":
    main()
