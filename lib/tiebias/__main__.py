"""Command line: ``python -m tiebias study --profile smoke`` runs the notebooks in order."""

from __future__ import annotations

import argparse
import sys

from . import profiles


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run it; a bad parameter prints its error and returns 2."""
    ap = argparse.ArgumentParser(prog="tiebias", description="Weight-tying bias study kit (Lopardo et al., 2026).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("study", help="run the notebooks in order with papermill into <run>/notebooks/")
    st.add_argument("--profile", default=None, help=f"one of {', '.join(profiles.available())} or a .toml path "
                    "(default: $TIEBIAS_PROFILE or 'default')")
    st.add_argument("--run-dir", default=None, help="run folder (default: runs/<profile>)")
    st.add_argument("--set", action="append", metavar="NAME=VALUE", help="set any parameter listed by "
                    "`python -m tiebias profiles` (repeatable), e.g. --set steps=200 --set seeds=0,1 "
                    "--set overwrite=true")
    st.add_argument("--only", action="append", metavar="NOTEBOOK", help="run only these notebooks (e.g. 01_train)")
    pr = sub.add_parser("profiles", help="list the parameters (one vocabulary) and the profiles")
    pr.add_argument("name", nargs="?", help="show one profile's values (a name or a .toml path)")
    pr.add_argument("--markdown", action="store_true", help="print the parameter table of the README")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "profiles":
            print(profiles.markdown_table() if args.markdown else profiles.describe(args.name))
            return 0
        from .study import parse_set, run_study

        run_study(args.profile, args.run_dir, parse_set(args.set), only=args.only)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
