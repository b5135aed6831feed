"""The test suite's wall time at two commits, side by side: one sitting, one machine, each from a fresh clone.

For each commit (old first): ``git clone`` this repository into a temporary folder, check the commit out, ``make setup``
(not timed), then ``make test`` and ``make test-portable`` timed; prints each time and the ratio new / old. Run it on
an otherwise quiet machine: anything else running moves both times. Usage::

    python bench/suite_side_by_side.py 5803a75 HEAD [--keep DIR]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from clones import clones_root, commits_parser, fresh_clone, short

TARGETS = ("test", "test-portable")


def timed_targets(commit: str, root: Path) -> dict[str, float]:
    """Clone ``commit`` into ``root``, set it up, and return the wall seconds of each of :data:`TARGETS`."""
    clone = fresh_clone(commit, root)
    times = {}
    for target in TARGETS:
        with (clone / f"{target}.log").open("w") as log:
            t0 = time.perf_counter()
            res = subprocess.run(["make", target], cwd=clone, stdout=log, stderr=subprocess.STDOUT)
            times[target] = time.perf_counter() - t0
        if res.returncode:
            sys.exit(f"{commit}: make {target} failed (exit {res.returncode}); see {clone / (target + '.log')}")
    return times


def main() -> None:
    args = commits_parser(__doc__.splitlines()[0]).parse_args()
    short(args.old, "old")  # both checked before anything is cloned
    new = short(args.new)
    with clones_root(args.keep, "tiebias-suite-") as root:
        old_t, new_t = timed_targets(args.old, root), timed_targets(new, root)
    for target in TARGETS:
        print(f"make {target}: {args.old} {old_t[target]:.0f} s, {new} {new_t[target]:.0f} s, "
              f"ratio {new_t[target] / old_t[target]:.2f}")
    total_old, total_new = sum(old_t.values()), sum(new_t.values())
    print(f"both: {total_old:.0f} s -> {total_new:.0f} s, ratio {total_new / total_old:.2f}")


if __name__ == "__main__":
    main()
