"""Render notebooks/exercises.toml into the last cells of each study notebook (run after editing the file).

Usage: python scripts/exercises.py [--check]   (--check: exit 1, writing nothing, if a notebook is out of date)
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from tiebias.config.paths import NOTEBOOKS, notebooks_dir  # noqa: E402
from tiebias.teach import exercises  # noqa: E402


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in NOTEBOOKS:
        path = notebooks_dir() / f"{name}.ipynb"
        if check:
            if exercises.rendered(json.loads(path.read_text()), name) != json.loads(path.read_text())["cells"]:
                stale.append(path.name)
        elif exercises.sync(path):
            print(f"updated {path.name}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python scripts/exercises.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
