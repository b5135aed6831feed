"""GLOSSARY.md explains every piece of jargon a student meets in the notebooks, their printed outputs and the plan."""

from __future__ import annotations

import re
from pathlib import Path

from tiebias.config.params import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]


JARGON = ("AdamW", "bf16", "papermill", "Nesterov", "SGD", "momentum", "weight decay", "learning rate", "softmax",
          "logits", "cross-entropy", "SVD", "Procrustes", "JupyterLab", "nbval", "Chromium", "checkpoint", "autograd",
          "hook", "L2 norm", "OLMo-1B", "Spearman", "perplexity", "KL", "nats", "bits", "unigram", "tuned lens",
          "noise floor", "warmup", "seed sd", "t-interval", "bootstrap", "KNN@k")
"""Terms a student meets in the notebooks, their printed outputs and the plan that need an explanation."""


def undefined_terms(glossary: str, texts: dict[str, str]) -> list[str]:
    """Each jargon term used in one of ``texts`` that no glossary entry names in its bold title."""
    titles = " ".join(re.findall(r"^\*\*(.+?)\*\*", glossary, re.M)).lower()
    out = []
    for term in JARGON:
        used = [name for name, text in texts.items() if re.search(rf"(?<![\w-]){re.escape(term)}", text, re.I)]
        if used and term.lower() not in titles:
            out.append(f"{term} (used in {', '.join(used)})")
    return out


def test_every_jargon_term_the_notebooks_and_the_plan_use_has_a_glossary_entry() -> None:
    texts = {"TEACHING.md": (ROOT / "TEACHING.md").read_text()}
    for name in NOTEBOOKS:
        texts[f"{name}.ipynb"] = (ROOT / "notebooks" / f"{name}.ipynb").read_text()
        texts[f"walkthrough/{name}.md"] = (ROOT / "walkthrough" / f"{name}.md").read_text()
    glossary = (ROOT / "GLOSSARY.md").read_text()
    assert not undefined_terms(glossary, texts), "terms without a GLOSSARY.md entry:\n" + "\n".join(
        undefined_terms(glossary, texts))
    assert undefined_terms("**Tied, untied.** x", {"a": "AdamW and bf16"}) == ["AdamW (used in a)", "bf16 (used in a)"]
