"""Where the host time of ResNet-50 goes with the batch-norm fold, under Inductor and kforge+Inductor.

    python benchmarks/probe_fold_wall.py --out DIR [--setting fp16_b32] [--rounds 12]

The thirty-fourth session's model run (results/h200/models_session34_fold.json) timed ResNet-50 fp16 batch 32 with
``fold_conv_bn`` at 1.07 ms of GPU time against Inductor's 1.43, yet 3.99 ms of wall time against Inductor's 3.78
(kforge+eager with the same folds: 3.25). This compiles Inductor, kforge+Inductor with the fold and kforge+eager with
the fold on one model, times them in interleaved rounds (bench_models.interleaved_ms), then writes for each: the
Python profile of 50 forwards (cProfile, top functions by own time) and the generated Inductor code, so the wall
difference can be put on lines of host code. Writes DIR/fold_wall.json, DIR/fold_wall_<config>.prof.txt and
DIR/fold_wall_<config>_code.py.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_models import interleaved_ms, run_options, slot_reps  # noqa: E402


def _inductor_modules() -> dict[str, str]:
    """The generated Inductor modules loaded so far, by file."""
    return {m.__file__: m.__file__ for m in list(sys.modules.values())
            if getattr(m, "__file__", None) and "torchinductor" in str(m.__file__) and hasattr(m, "call")}


def _python_profile(fn, inputs, calls: int = 50) -> str:
    fn(*inputs)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(*inputs)
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(25)
    return f"{calls} forwards\n" + text.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--setting", default="fp16_b32")
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from forge_backend.backend import make_backend
    from forge_backend.modelspec import load

    loaded = load(f"examples/resnet50.py::{args.setting}")
    model, inputs = loaded.model, loaded.inputs
    opts = run_options(8, Path(tempfile.mkdtemp()), fold_conv_bn=True)
    configs, code = {}, {}
    with torch.no_grad():
        for name, make in (("inductor", lambda: torch.compile(model)),
                           ("kforge_inductor", lambda: torch.compile(model, backend=make_backend(),
                                                                     options={**opts, "inner": "inductor"})),
                           ("kforge_eager", lambda: torch.compile(model, backend=make_backend(),
                                                                  options={**opts, "inner": "eager"}))):
            before = _inductor_modules()
            fn = make()
            fn(*inputs)
            torch.cuda.synchronize()
            configs[name] = fn
            code[name] = sorted(set(_inductor_modules()) - set(before))
        reps = slot_reps(configs, inputs)
        rounds = interleaved_ms(configs, inputs, rounds=args.rounds, reps=reps)
        ms = {k: statistics.median(v) for k, v in rounds.items()}
        paired = statistics.median(a / b for a, b in zip(rounds["inductor"], rounds["kforge_inductor"]))
        for name, fn in configs.items():
            (args.out / f"fold_wall_{name}.prof.txt").write_text(_python_profile(fn, inputs))
            for i, path in enumerate(code[name]):
                (args.out / f"fold_wall_{name}_code{i}.py").write_text(Path(path).read_text())
    result = {"setting": args.setting, "reps_per_round": reps, "median_ms": ms, "round_ms": rounds,
              "inductor_over_kforge_inductor_paired": paired, "generated_modules": {k: len(v) for k, v in code.items()},
              "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    (args.out / "fold_wall.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "round_ms"}, indent=1))


if __name__ == "__main__":
    main()
