"""benchmarks/ui_watch.py: `kforge ui`'s JSON polled while a command runs. CPU only: the command plays a search by
writing its record live, then finished, as run_search does (runtime/live_record.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from test_mcts import KnobTree, SimEvaluator, run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ui_watch  # noqa: E402
from forge_backend.store.local import searches_dir  # noqa: E402

PLAY = """
import os, shutil, sys, time
live, done, target = sys.argv[1:4]
shutil.copy(live, target + ".tmp"); os.replace(target + ".tmp", target)
time.sleep(1.5)  # polls every 0.1 s: the live record is seen even on a loaded machine
shutil.copy(done, target + ".tmp"); os.replace(target + ".tmp", target)
time.sleep(0.3)
sys.exit(3)
"""


def test_the_watch_sees_a_search_go_from_live_to_finished(tmp_path):
    rec = run([KnobTree(depth=2)], SimEvaluator(), iterations=6, seed=1).record
    done = tmp_path / "done.json"
    done.write_text(json.dumps(rec.to_json()))
    rec.finished_at, rec.iterations, rec.nodes = None, 2, rec.nodes[:3]
    live = tmp_path / "live.json"
    live.write_text(json.dumps(rec.to_json()))
    cache = tmp_path / "cache"
    target = searches_dir(cache) / f"{rec.key}.json"
    target.parent.mkdir(parents=True)
    out = tmp_path / "out"
    status = ui_watch.main(["--out", str(out), "--cache-dir", str(cache), "--every", "0.1", "--",
                            sys.executable, "-c", PLAY, str(live), str(done), str(target)])
    assert status == 3, "the command's exit status comes back"
    polls = json.loads((out / "polls.json").read_text())
    states = [s["state"] for p in polls for s in p["searches"]]
    assert states[0] == "live" and states[-1] == "finished", states
    assert [s["iterations"] for p in polls for s in p["searches"]][0] == 2
    view = json.loads((out / "views" / f"{rec.key}.json").read_text())
    best = json.loads((out / "views" / f"{rec.key}_best.json").read_text())
    assert view["listing"]["state"] == "finished" and best["id"] == view["best_id"] and best["source"]
    md = (out / "ui_watch.md").read_text()
    assert "(exit status 3)" in md and "| live |" in md and "| finished |" in md
    kernels = json.loads((out / "views" / "kernels.json").read_text())
    assert [t["name"] for t in kernels["tiers"]] == ["local", "team", "shipped"]
    assert "Kernels view after the command: local: no local cache yet" in md
