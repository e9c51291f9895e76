"""How long a warm ``torch.compile`` takes with kforge inside Inductor against Inductor alone, repeated.

    python benchmarks/warm_compile.py --models qwen35_moe::eager_attn [--repeats 3] [--out DIR]

bench_models.py measures the warm compile once per model, after the other configurations ran; a single sample of a
host-bound quantity is noisy. Here each model is compiled cold once per configuration (filling Inductor's and
kforge's caches), then warm ``repeats`` times in alternation (``torch._dynamo.reset()`` before each), timing the
first call (compile + one forward). Writes warm_compile.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_models
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def first_call_s(fn, inputs) -> float:
    """Seconds of the first call (compile + one forward): bench_models' timer, without its output."""
    from bench_models import first_call_s as timed

    return timed(fn, inputs)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="comma-separated example[::setting]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--profile", action="store_true", help="cProfile one more warm kforge compile")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("warm_compile needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.modelspec import load

    configs = {"inductor": lambda m: torch.compile(m),
               "kforge_inductor": lambda m: torch.compile(m, backend="kforge", options={"inner": "inductor"})}
    rows = []
    for spec in args.models.split(","):
        name, _, setting = spec.partition("::")
        loaded = load(f"{EXAMPLES / name}.py" + (f"::{setting}" if setting else ""))
        row: dict = {"model": name, "setting": setting}
        with torch.no_grad():
            for cfg, make in configs.items():
                torch._dynamo.reset()
                row[f"{cfg}_cold_s"] = first_call_s(make(loaded.model), loaded.inputs)
            for cfg in configs:
                row[f"{cfg}_warm_s"] = []
            for _ in range(args.repeats):
                for cfg, make in configs.items():
                    torch._dynamo.reset()
                    row[f"{cfg}_warm_s"].append(first_call_s(make(loaded.model), loaded.inputs))
            if args.profile:  # where a warm kforge compile spends its host time
                import cProfile
                import io
                import pstats

                torch._dynamo.reset()
                prof = cProfile.Profile()
                prof.enable()
                first_call_s(configs["kforge_inductor"](loaded.model), loaded.inputs)
                prof.disable()
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
                print(text.getvalue()[-9000:], flush=True)
        row["warm_extra_s_median"] = statistics.median(
            k - i for k, i in zip(row["kforge_inductor_warm_s"], row["inductor_warm_s"]))
        print(json.dumps(row), flush=True)
        rows.append(row)
        del loaded
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "warm_compile.json").write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
