"""Explorers forgive: plain words, several vocabularies, empty or unknown input give messages, not tracebacks.

Also: figures fit the notebook width, and notebook figures carry no embedded plotly.js while HTML exports
carry it once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from nbclient import NotebookClient
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tiebias.align import comparisons
from tiebias.align.embeddings import Embeddings
from tiebias.config.environment import cell_timeout
from tiebias.data import tokens
from tiebias.lens import evaluate as lens_eval
from tiebias.lens import lenses as tl
from tiebias.models import build as tm
from tiebias.output import explorers, static_pages, token_text
from tiebias.output.plotting import lens as lplot

TEXT_A = ["the king and the queen rode to the kingdom of the king", "love is sweet, said the king to the queen"] * 40
TEXT_B = ["a queen sang; the queen danced with the duke and the king", "blood and love, the duke said"] * 40


def _emb(tok: PreTrainedTokenizerFast, tied: bool, seed: int) -> Embeddings:
    """Random input/output matrices with one row per token of ``tok``."""
    g = torch.Generator().manual_seed(seed)
    n = len(tok)
    inp = torch.randn(n, 8, generator=g)
    out = inp if tied else torch.randn(n, 8, generator=g)
    return Embeddings(inp, out, tied, tok.convert_ids_to_tokens(list(range(n))), f"test-{seed}")


@pytest.fixture(scope="module")
def tok_a() -> PreTrainedTokenizerFast:
    return tokens.train_tokenizer(TEXT_A, vocab_size=300)


@pytest.fixture(scope="module")
def tok_b() -> PreTrainedTokenizerFast:
    return tokens.train_tokenizer(TEXT_B, vocab_size=330)


@pytest.fixture(scope="module")
def one_vocab(tok_a) -> dict[str, explorers.Space]:
    return explorers.neighbour_spaces({"tied": _emb(tok_a, True, 0), "untied": _emb(tok_a, False, 1)}, tok_a)


@pytest.mark.parametrize("text", ["", "   ", "\n", None])
def test_empty_input_gives_a_message_and_no_table(one_vocab, text) -> None:
    view = explorers.neighbour_view(text, one_vocab)
    assert view.table is None and view.message == explorers.EMPTY_WORD
    assert explorers.resolve_token(text, one_vocab["tied"]).shown is None


@pytest.mark.parametrize("typed", ["king", " king", "Ġking", "king ", "  king", "\tking\n", "␣king"])
def test_plain_word_leading_space_and_token_string_all_reach_the_word_token(one_vocab, tok_a, typed) -> None:
    want = tok_a.convert_tokens_to_ids("Ġking")
    assert want != tok_a.unk_token_id
    r = explorers.resolve_token(typed, one_vocab["tied"])
    assert r.shown == want and r.pieces == ["Ġking"]
    assert "showing ␣king" in r.message and "Ġ" not in r.message.replace(repr(typed), "")
    view = explorers.neighbour_view(typed, one_vocab, k=4)
    assert list(view.table.columns) == ["tied", "untied input", "untied output"]
    expected = comparisons.neighbour_table(one_vocab["untied output"].emb, "output", want, 4)
    assert view.table["untied output"].tolist() == [f"{token_text.show(t)} {explorers.fixed(c)}"
                                                    for t, c in zip(expected.token, expected.cosine, strict=True)]


def test_multi_token_word_shows_its_pieces_and_the_first(one_vocab, tok_a) -> None:
    word = "kingqzx"
    ids = tok_a.encode(" " + word, add_special_tokens=False)
    assert len(ids) > 1
    r = explorers.resolve_token(word, one_vocab["tied"])
    assert r.shown == ids[0] and r.pieces == tok_a.convert_ids_to_tokens(ids)
    assert f"first of {len(ids)} tokens" in r.message
    view = explorers.neighbour_view(word, one_vocab, k=3)
    assert view.table.shape == (3, 3)


def test_unknown_word_gives_a_message_and_no_traceback(tok_a) -> None:
    vocab = {"[UNK]": 0, "king": 1, "queen": 2, "love": 3}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    wl = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    spaces = explorers.neighbour_spaces({"tied": _emb(wl, True, 0), "untied": _emb(wl, False, 1)}, wl)
    view = explorers.neighbour_view("zebra", spaces, k=2)
    assert view.table is None and "'zebra' is not in this vocabulary" in view.message
    assert explorers.neighbour_view("queen", spaces, k=2).table.shape == (2, 3)


def test_two_vocabularies_each_space_uses_its_own_tokenizer(tok_a, tok_b) -> None:
    tied, untied = _emb(tok_a, True, 0), _emb(tok_b, False, 1)
    spaces = explorers.neighbour_spaces({"tied": tied, "untied": untied}, tok_a, tok_b)
    id_a, id_b = tok_a.convert_tokens_to_ids("Ġking"), tok_b.convert_tokens_to_ids("Ġking")
    assert id_a != id_b  # the same word is a different row in each vocabulary
    view = explorers.neighbour_view("king", spaces, k=3)
    for col, emb, which, i in (("tied", tied, "input", id_a), ("untied input", untied, "input", id_b),
                               ("untied output", untied, "output", id_b)):
        nb = comparisons.neighbour_table(emb, which, i, 3)
        assert view.table[col].tolist() == [f"{token_text.show(t)} {explorers.fixed(c)}"
                                            for t, c in zip(nb.token, nb.cosine, strict=True)]
    # a token string of one vocabulary only (the old "'Ġkingdom' is not in list" crash): no error, both explained
    only_a = next(t for t in ("Ġkingdom", "Ġsweet", "Ġrode") if t in tok_a.get_vocab() and t not in tok_b.get_vocab())
    view = explorers.neighbour_view(only_a, spaces, k=3)
    assert view.table is not None and set(view.table.columns) == set(spaces)
    assert f"tied: {only_a!r} is a token" in view.message and "untied input, untied output:" in view.message


def test_tokenizers_load_from_a_folder(tmp_path: Path, tok_a) -> None:
    tok_a.save_pretrained(tmp_path / "tokenizer")
    pair = {"tied": _emb(tok_a, True, 0), "untied": _emb(tok_a, False, 1)}
    for folder in (tmp_path, str(tmp_path)):  # a str has .encode too: it must still be read as a folder
        spaces = explorers.neighbour_spaces(pair, folder)
        assert explorers.resolve_token("king", spaces["untied output"]).pieces == ["Ġking"]
    with pytest.raises(ValueError, match="untied_tokenizer: expected a transformers tokenizer, a folder or a hub id, "
                                         "got int"):
        explorers.neighbour_spaces(pair, tok_a, 42)
    with pytest.raises(ValueError, match="tied_tokenizer: .*got None"):
        explorers.neighbour_spaces({"tied": _emb(tok_a, True, 0), "untied": _emb(tok_a, False, 1)}, None)
    with pytest.raises(ValueError, match="pair: needs 'tied' and 'untied'.*missing \\['untied'\\]"):
        explorers.neighbour_spaces({"tied": _emb(tok_a, True, 0)}, tok_a)


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "3"])
def test_bad_k_names_k(one_vocab, k) -> None:
    with pytest.raises(ValueError, match=f"k: must be an int >= 1, got {k!r}"):
        explorers.neighbour_view("king", one_vocab, k=k)


@pytest.fixture(scope="module")
def loaded(tok_a, tok_b) -> dict:
    torch.set_num_threads(1)
    out = {}
    for label, tok, tied in (("tied", tok_a, True), ("untied", tok_b, False)):
        model = tm.build("tiny", tied=tied, vocab_size=len(tok)).eval()
        out[label] = (model, tl.new_lens(model), tok)
    return out


@pytest.mark.parametrize("text", ["", "  ", None])
def test_prompt_view_empty_gives_a_message(loaded, text) -> None:
    view = explorers.prompt_view(text, loaded)
    assert view.table is None and view.message == explorers.EMPTY_PROMPT


def test_prompt_view_tabulates_each_model_with_its_tokenizer(loaded) -> None:
    view = explorers.prompt_view("the king", loaded, k=2)
    assert list(view.table.columns) == ["tied", "untied"] and view.table.index.name == "layer"
    model, lens, tok = loaded["untied"]
    t = lens_eval.top_tokens_by_layer(model, lens, tok, "the king", k=2)
    t = t[(t.lens == "tuned") & (t.layer == 0)]
    assert view.table.loc[0, "untied"] == "  ".join(f"{token_text.show(x)} {explorers.fixed(p)}"
                                                    for x, p in zip(t.token, t.prob, strict=True))
    assert len(view.table) == model.config.num_hidden_layers + 1


def test_explorer_ui_updates_on_typing_and_never_raises(one_vocab) -> None:
    ui = explorers.explorer(lambda s: explorers.neighbour_view(s, one_vocab, k=2), description="token")
    box, msg, out = ui.children
    assert explorers.EMPTY_WORD.split(",")[0] in msg.value
    box.value = "king"
    assert "␣king" in msg.value
    box.value = ""
    assert "Type a word" in msg.value


def test_trajectory_figure_fits_the_notebook_width(loaded) -> None:
    model, lens, tok = loaded["tied"]
    long = lens_eval.trajectory(model, lens, tok, "the king and the queen rode to the kingdom " * 3)
    short = lens_eval.trajectory(model, lens, tok, "the king")
    assert lplot.trajectory_figure(long).layout.width <= 900
    n_short = len(short.input_ids)
    assert lplot.trajectory_figure(short).layout.width == 200 + 80 * n_short
    assert lplot.trajectory_figure(long, max_width=700).layout.width == 700
    with pytest.raises(ValueError, match="max_width: must be an int >= 300 \\(pixels\\), got 10"):
        lplot.trajectory_figure(short, max_width=10)


def _execute(cells: list[str], tmp_path: Path) -> nbformat.NotebookNode:
    """Run a small notebook in a kernel of this environment and return it with outputs."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def test_executed_notebook_has_figures_without_the_plotly_bundle_and_html_export_has_it_once(tmp_path: Path) -> None:
    cells = ["from tiebias.output import notebook\nimport plotly.graph_objects as go\nnotebook.setup()",
             "go.Figure(go.Bar(x=[1, 2], y=[3, 4]))",
             "display(go.Figure(go.Scatter(x=[1, 2], y=[3, 1])))"]
    nb = _execute(cells, tmp_path)
    outputs = [o for c in nb.cells for o in c.outputs]
    assert sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs) == 2
    size = len(json.dumps(nb))
    assert size < 50_000, f"executed notebook is {size} bytes: plotly.js embedded?"
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    page = static_pages.export_offline_html(path, tmp_path / "html" / "nb.html")
    text = page.read_text()
    assert text.count('class="plotly-graph-div"') == 2
    assert text.count('src="plotly.min.js"') == 1
    assert (page.parent / "plotly.min.js").stat().st_size > 1_000_000



def _save_model(tok: PreTrainedTokenizerFast, tied: bool, folder: Path) -> Path:
    """A tiny untrained model saved with its own tokenizer, as an external source folder."""
    tm.build("tiny", tied=tied, vocab_size=len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_align_notebook_runs_on_an_external_pair_with_two_vocabularies(tmp_path: Path, tok_a, tok_b) -> None:
    import papermill as pm

    nb_dir = Path(__file__).resolve().parents[1] / "notebooks"
    tied, untied = _save_model(tok_a, True, tmp_path / "tied"), _save_model(tok_b, False, tmp_path / "untied")
    out = tmp_path / "02.ipynb"
    pm.execute_notebook(str(nb_dir / "02_align.ipynb"), str(out), cwd=str(nb_dir), kernel_name="python3",
                        execution_timeout=cell_timeout(), progress_bar=False,
                        parameters={"profile": "smoke", "run_dir": str(tmp_path / "run"), "tied_source": str(tied),
                                    "untied_source": str(untied), "heldout_folds": 0})
    text = "".join(o.get("text", "") for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", []))
    assert "'king' -> ␣king: showing ␣king" in text  # both vocabularies have the word, as different rows
    assert "Claim 1 (tied closer to untied output" in text  # the cell after the explorer ran


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None, reason="needs git and make")
def test_make_setup_installs_a_filter_that_keeps_executed_notebooks_out_of_git(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    for f in ("Makefile", ".gitattributes", "pyproject.toml", "notebooks/03_lens.ipynb"):
        shutil.copy(root / f, repo / f)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                              capture_output=True, text=True).stdout

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "notebooks without outputs")
    venv = Path(sys.prefix)  # the environment running the tests stands in for .venv (-o: do not reinstall it)
    subprocess.run(["make", "-o", str(venv / ".installed"), "setup", f"VENV={venv}"], cwd=repo, check=True,
                   capture_output=True)
    assert "-m tiebias.nbfilter" in git("config", "filter.nbstripout.clean")  # nbstripout --keep-id, kernel blocks
    path = repo / "notebooks" / "03_lens.ipynb"
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code, 1):  # what running it in JupyterLab leaves behind
        cell.execution_count = i
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    nb.cells[0].metadata["collapsed"] = False
    nbformat.write(nb, path)
    assert git("diff") == ""  # outputs, counts and stripped metadata are invisible to git
    git("add", "-A")  # (git status lists a file whose size changed until the index is refreshed, e.g. by add)
    assert git("status", "--porcelain") == "" and git("diff", "--cached") == ""  # ids and sources as committed


def test_leading_spaces_show_the_word_not_the_space_token(one_vocab, tok_a) -> None:
    # unstripped, two leading spaces tokenize as the bare space token first: its neighbours were shown
    assert tok_a.convert_ids_to_tokens(tok_a.encode("  king", add_special_tokens=False))[0] == "Ġ"
    view = explorers.neighbour_view("  king", one_vocab, k=3)
    assert view.message == "'king' -> ␣king: showing ␣king"
    want = comparisons.neighbour_table(one_vocab["tied"].emb, "input", tok_a.convert_tokens_to_ids("Ġking"), 3)
    assert view.table["tied"].tolist() == [f"{token_text.show(t)} {explorers.fixed(c)}"
                                           for t, c in zip(want.token, want.cosine, strict=True)]
    assert explorers.resolve_token("␣", one_vocab["tied"]).pieces == ["Ġ"]  # the space token, typed on purpose


def test_long_word_input_is_cut_with_a_one_line_message(one_vocab) -> None:
    text = ("the king and the queen rode to the kingdom " * 27)[:1160]
    view = explorers.neighbour_view(text, one_vocab, k=3)
    cut = f"input cut to its first {explorers.MAX_WORD_CHARS} characters (it had 1,160)"
    assert cut in view.message and "\n" not in view.message
    assert len(view.message) < 400, view.message  # was the whole text and its hundreds of pieces
    assert "more)" in view.message and view.message.count(" + ") <= explorers.MAX_PIECES + 1
    assert view.table is not None and view.table.shape == (3, 3)


def test_long_prompt_is_cut_and_echoed_short(loaded) -> None:
    text = "  " + "the king and the queen rode to the kingdom " * 27
    view = explorers.prompt_view(text, loaded, k=2)
    n = len(text.strip())
    assert f"input cut to its first {explorers.MAX_PROMPT_CHARS} characters (it had {n:,})" in view.message
    assert len(view.message) < 250 and "…" in view.message
    short = explorers.prompt_view(text.strip()[: explorers.MAX_PROMPT_CHARS].rstrip(), loaded, k=2)
    assert view.table.equals(short.table)  # the cut prompt is what the models read


def test_one_whitespace_notation_in_tables_and_figures(one_vocab, loaded) -> None:
    cells = [c for col in explorers.neighbour_view("the", one_vocab, k=8).table.values.tolist() for c in col]
    cells += [c for col in explorers.prompt_view("the king,\nthe", loaded, k=3).table.values.tolist() for c in col]
    joined = " ".join(cells)
    assert "␣" in joined and not any(ch in joined for ch in ("Ġ", "Ċ", "'", "\\n", "\n"))
    assert token_text.show("Ġking") == "␣king" and token_text.show("Ċ") == "↵" and token_text.show("▁the") == "␣the"
    assert token_text.show("Ġkingdomsandcastles", 8) == "␣kingdo…"
    model, lens, tok = loaded["tied"]
    fig = lplot.trajectory_figure(lens_eval.trajectory(model, lens, tok, "the king,\nthe queen"))
    heat = fig.data[0]
    labels = [*heat.x, *np.asarray(heat.text).ravel()]
    assert not any(ch in "".join(labels) for ch in ("Ġ", "Ċ", "_"))
    assert "↵" in "".join(heat.x) and "␣" in "".join(heat.x)
    assert list(heat.y)[-1] == "model output" and heat.textfont.size >= 12
    assert "␣ = space" in fig.layout.xaxis.title.text


def test_explorer_prints_the_legend_once(one_vocab, capsys) -> None:
    ui = explorers.explorer(lambda s: explorers.neighbour_view(s, one_vocab, k=2), value="king")
    ui.children[0].value = "queen"
    assert capsys.readouterr().out.count(token_text.LEGEND) == 1


@pytest.mark.parametrize(("x", "want"), [(-0.001, "0.00"), (-0.004999, "0.00"), (-0.006, "-0.01"), (0.834, "0.83")])
def test_scores_never_print_as_negative_zero(x, want) -> None:
    assert explorers.fixed(x) == want
