"""Command line: ``python -m tiebias study --profile smoke`` runs the notebooks in order.

Exit codes: 0 done; 1 a notebook failed or the run folder could not be written (one line); 2 a bad parameter,
refused before anything is written; 130 / 143 stopped by SIGINT / SIGTERM, finished work kept."""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from tiebias.config import profiles

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stoppable() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`tiebias.study.Stopped` once (a repeat is ignored); logging stays off from
    then until the block ends, so the kernel's shutdown logs nothing before the one stop line."""
    from .study import Stopped

    def stop(signum: int, frame: Any) -> None:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        logging.disable(logging.CRITICAL)
        raise Stopped(signum)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    before = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    disabled = logging.root.manager.disable
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        logging.disable(disabled)


def _study(args: argparse.Namespace, committed: bool = False) -> int:
    """Run the study quietly: one line per notebook, one error line (exit 1) or one stop line (128 + signal)."""
    from .study import FolderUnwritable, NotebookFailed, Stopped, parse_set, run_study

    logging.getLogger("papermill").setLevel(logging.WARNING)  # no "Input Notebook: ..." banner
    try:
        with _stoppable():
            run_study(args.profile, args.run_dir, parse_set(args.set), only=args.only,
                      progress=sys.stderr.isatty(), committed=committed)  # no progress bar in a log file
    except (NotebookFailed, FolderUnwritable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Stopped as e:
        during = f" during {e.notebook}" if e.notebook else ""
        print(f"stopped by {signal.Signals(e.signum).name}{during}: every finished model is kept; run the same "
              "command again to resume", file=sys.stderr)
        # the stop line is the last word: the stopped kernel's client may log an asyncio task's error at exit
        logging.disable(logging.CRITICAL)
        return 128 + e.signum
    return 0


def _exercise(args: argparse.Namespace) -> int:
    """Run an exercise's study command (printed first) on the notebooks as committed, into ``runs/ex-<id>`` of the
    checkout by default; without an id, list the exercises."""
    from tiebias.config.paths import runs_dir
    from tiebias.teach import exercises

    header, known = exercises.load()
    if not args.id:
        print("exercises (make exercise ID=<id>):")
        for e in known:
            print(f"  {e.id}  {e.notebook}  {e.title}")
        return 0
    ex = exercises.find(args.id, known)
    argv = ex.argv(args.profile or header["profile"], args.run_dir or runs_dir() / f"ex-{ex.id}")
    print(f"exercise {ex.id} ({ex.title}): {shlex.join(['python', '-m', 'tiebias', *argv])}", flush=True)
    return _study(main_parser().parse_args(argv), committed=True)


def _reproduction(args: argparse.Namespace) -> int:
    from tiebias.output.report import write_report
    from tiebias.output.reproduction_page import write_reproduction
    from tiebias.run.folder import Run
    from tiebias.run.guard import check_folder

    check_folder(args.run, param="run", existing=True)  # it writes there: only into a run folder of the kit
    for name, d in (("run", args.run), ("--scale", args.scale)):
        if d is not None and not Run(d).config_path.exists():
            raise ValueError(f"{name}: {d!r} is not a run folder (no config.json); give the folder of an executed "
                             "study, e.g. runs/default")
    print(f"reproduction: {write_reproduction(Run(args.run), None if args.scale is None else Run(args.scale))}")
    print(f"report:       {write_report(Run(args.run))}")
    return 0


def _walkthrough(args: argparse.Namespace) -> int:
    from tiebias.teach.walkthrough import write_walkthrough

    try:
        print(f"walkthrough: {len(write_walkthrough(args.run))} files written")
    except RuntimeError as e:  # no Chromium, or it drew nothing
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _profiles(args: argparse.Namespace) -> int:
    print(profiles.markdown_table() if args.markdown else profiles.describe(args.name))
    return 0


def main_parser() -> argparse.ArgumentParser:
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
    st.set_defaults(func=_study)
    wk = sub.add_parser("walkthrough", help="render a run's executed notebooks into walkthrough/ (Markdown, PNG "
                        "figures; needs Chromium)")
    wk.add_argument("run", help="run folder of an executed study, e.g. runs/class")
    wk.set_defaults(func=_walkthrough)
    rp = sub.add_parser("reproduction", help="write a run's reproduction report (reproduction.md/.json/.html): every "
                        "number the paper reports beside ours, with its computed cause")
    rp.add_argument("run", help="run folder of an executed study, e.g. runs/default")
    rp.add_argument("--scale", default=None, help="a run of the scale profile, of the same corpus and training "
                    "recipe, whose trends explain differences of size (used beside the run's own, if it has them)")
    rp.set_defaults(func=_reproduction)
    ex = sub.add_parser("exercise", help="run one of the notebooks' exercises (its study command, into "
                        "runs/ex-<id>/); without an id, list them")
    ex.add_argument("id", nargs="?", default="", help="an exercise id, e.g. 02-b")
    ex.add_argument("--profile", default=None, help="the profile (default: the exercises' own, class)")
    ex.add_argument("--run-dir", default=None, help="run folder (default: runs/ex-<id> in the checkout)")
    ex.set_defaults(func=_exercise)
    pr = sub.add_parser("profiles", help="list the parameters (one vocabulary) and the profiles")
    pr.add_argument("name", nargs="?", help="show one profile's values (a name or a .toml path)")
    pr.add_argument("--markdown", action="store_true", help="print the parameter table of the README")
    pr.set_defaults(func=_profiles)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run it; returns the exit code."""
    args = main_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
