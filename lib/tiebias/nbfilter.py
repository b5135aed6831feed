"""The git filter for notebooks: nbstripout (cell ids kept), and the kernel blocks JupyterLab rewrites on save set as
committed. ``python -m tiebias.nbfilter < in > out`` (clean filter), ``python -m tiebias.nbfilter FILE`` (textconv)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import nbformat

# nbstripout's own list (its command line adds these), plus cell metadata JupyterLab may add while you read
EXTRA_KEYS = ["metadata.signature", "metadata.widgets", "cell.metadata.collapsed", "cell.metadata.ExecuteTime",
              "cell.metadata.execution", "cell.metadata.heading_collapsed", "cell.metadata.hidden",
              "cell.metadata.scrolled", "metadata.papermill", "cell.metadata.papermill"]


def clean(text: str) -> str:
    """The text git stores for a notebook: no outputs, counts or save-time metadata; a Python notebook gets the
    committed kernel blocks."""
    from nbstripout import strip_output

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        nb = strip_output(nbformat.reads(text, as_version=nbformat.NO_CONVERT), keep_output=False, keep_count=False,
                          keep_id=True, extra_keys=EXTRA_KEYS)
        meta = nb.metadata
        if (meta.get("kernelspec", {}).get("language") or meta.get("language_info", {}).get("name")) == "python":
            meta["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
            meta["language_info"] = {"name": "python"}
        out = io.StringIO()
        nbformat.write(nb, out)
    return out.getvalue()


def post_save(model: dict | None = None, os_path: str = "", contents_manager: Any = None, **_: Any) -> None:
    """Jupyter's post-save hook: a tracked notebook whose filtered text is unchanged is ``git add``-ed, refreshing
    git's record (it compares sizes first)."""
    path = Path(os_path)
    if path.suffix != ".ipynb" or shutil.which("git") is None:
        return

    def git(*args: str) -> int:
        return subprocess.run(["git", *args, "--", path.name], cwd=path.parent, capture_output=True,
                              timeout=120).returncode

    try:
        if git("ls-files", "--error-unmatch") == 0 and git("diff", "--quiet") == 0:
            git("add")
    except (OSError, subprocess.SubprocessError):
        pass  # saving never fails because of git


def main(argv: list[str] | None = None) -> int:
    """Filter stdin to stdout, or print the cleaned text of the file named (git's textconv)."""
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.write(clean(Path(args[0]).read_text(encoding="utf-8") if args else sys.stdin.read()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
