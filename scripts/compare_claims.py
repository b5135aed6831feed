"""Compare a study's claims with a reference, bit for bit: for refactors on one machine.

    python scripts/compare_claims.py runs/smoke/summary.json                      # vs tests/data/smoke_claims.json
    python scripts/compare_claims.py runs/a/summary.json runs/b/summary.json      # two runs

A structural change run on the same machine, torch and CPU kernels must leave every claim number identical;
this prints each difference (absolute, and in units of the claim's seed sd) and exits 1 if there is any.
Across machines numbers differ in the last bits: the test suite (tests/test_study.py) compares with a
tolerance derived from each claim's seed spread instead. ``--pin`` rewrites the reference from a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "smoke_claims.json"
KEYS = ("value", "threshold", "verdict", "above_threshold", "status", "spread", "noise_floor", "n_seeds")


def claims_of(path: Path) -> dict[str, dict]:
    """The claims of a summary.json (under "claims") or of a reference file (top level, minus "_" keys)."""
    data = json.loads(path.read_text())
    claims = data.get("claims", data)
    return {k: {key: v.get(key) for key in KEYS} for k, v in claims.items() if not k.startswith("_")}


def differences(got: dict[str, dict], want: dict[str, dict]) -> list[str]:
    """One line per claim key whose value is not identical."""
    out = [f"{c}: missing in one of the two" for c in sorted(set(got) ^ set(want))]
    for c in sorted(set(got) & set(want)):
        sd = want[c].get("spread") or None
        for key in KEYS:
            a, b = got[c].get(key), want[c].get(key)
            if a == b:
                continue
            line = f"{c}.{key}: {a!r} vs {b!r}"
            if isinstance(a, float) and isinstance(b, float):
                line += f" (diff {a - b:+.3g}" + (f", {(a - b) / sd:+.3g} seed sd)" if sd else ")")
            out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary", type=Path, help="a run's summary.json")
    ap.add_argument("reference", type=Path, nargs="?", default=REFERENCE, help=f"default: {REFERENCE}")
    ap.add_argument("--pin", action="store_true", help="write the summary's claims as the new reference")
    args = ap.parse_args(argv)
    if args.pin:
        about = json.loads(args.reference.read_text()).get("_about") if args.reference.exists() else None
        out = {"_about": about, **claims_of(args.summary)} if about else claims_of(args.summary)
        args.reference.write_text(json.dumps(out, indent=1) + "\n")
        print(f"pinned {args.summary} -> {args.reference}")
        return 0
    diffs = differences(claims_of(args.summary), claims_of(args.reference))
    print("\n".join(diffs) if diffs else f"identical: {args.summary} and {args.reference}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
