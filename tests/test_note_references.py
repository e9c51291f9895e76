"""Every ``Note [name] in file.py`` (or ``(file.py)``, or ``, file.py``) in the package, the tests, the benchmarks and
the README names a file that holds that Note. The Notes are where the measured reasons live; a Note moved to another
module (the forty-eighth session split four template modules and moved their Notes with their code) must not leave
references pointing at a file that no longer has it. docs/STATUS.md and benchmarks/results/ record past sessions and
keep the names they had then."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = (".py", ".sh", ".md")
SCANNED = ("forge_backend", "tests", "benchmarks", "examples")
SELF = "tests/test_note_references.py"  # its examples are not references
# A Note's name may be wrapped over comment lines: "Note [a long\n# name] in relay.py".
_JOIN = re.compile(r"\s*\n\s*(?:#|//)?\s*")
_REF = re.compile(r"Note \[([^\]]+)\](?: in | \(|, )((?:[\w.]+/)*[\w]+\.py)")


def _flat(text: str) -> str:
    """The text on one line, comment markers at line starts dropped: wrapped Notes and references read whole."""
    return _JOIN.sub(" ", text)


def _sources(root: Path, dirs: tuple[str, ...]) -> list[Path]:
    """README.md and the files under ``dirs`` (past sessions' results and STATUS.md left out)."""
    found = [p for d in dirs for p in (root / d).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    keep = [p for p in found if not p.relative_to(root).as_posix().startswith(("benchmarks/results/", SELF))]
    return sorted(keep + [p for p in [root / "README.md"] if p.is_file()])


def dangling_references(root: Path, dirs: tuple[str, ...] = SCANNED) -> list[str]:
    """``file:name -> target`` for each reference whose named file is missing or does not hold the Note."""
    files = _sources(root, dirs)
    flat = {p: _flat(p.read_text(encoding="utf-8", errors="replace")) for p in files}
    bad = []
    for path, text in flat.items():
        for m in _REF.finditer(text):
            name, target = m.group(1), m.group(2)
            if name.endswith("..."):
                continue  # an abbreviation inside generated device code
            holders = [p for p in files if p.as_posix().endswith("/" + target)]
            if not any(f"Note [{name}]" in flat[p] for p in holders):
                bad.append(f"{path.relative_to(root)}: Note [{name}] -> {target}"
                           + ("" if holders else " (no such file)"))
    return bad


def test_every_note_reference_names_a_file_that_holds_the_note() -> None:
    assert dangling_references(ROOT) == []


def test_a_moved_note_and_a_missing_file_are_caught(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "old.py").write_text("# nothing here any more\n")
    (pkg / "new.py").write_text("# Note [slots held\n# across rows]\n# why, with a number\n")
    (pkg / "user.py").write_text("x = 1  # Note [slots held across rows] in old.py\n"
                                 "y = 2  # Note [slots held\n# across rows] (new.py)\n"
                                 "z = 3  # Note [slots held across rows], gone.py\n")
    assert dangling_references(tmp_path, dirs=("pkg",)) == [
        "pkg/user.py: Note [slots held across rows] -> old.py",
        "pkg/user.py: Note [slots held across rows] -> gone.py (no such file)",
    ]
