"""What a person sees: plotly figures, notebook setup, ipywidgets explorers, summary.json / report.html, PNG export.

``plotting`` (one module per analysis), ``notebook`` (setup and HTML export), ``explorers``, ``token_text`` (the
whitespace notation), ``report``, ``reproduction_page`` (the run's reproduction report), ``static_pages`` (offline pages), ``figure_png``
(PNGs through headless Chromium) and ``markup`` (run-folder text made safe for Markdown and HTML pages).
"""

from tiebias.output import (
                            explorers,
                            figure_png,
                            markup,
                            notebook,
                            plotting,
                            report,
                            reproduction_page,
                            static_pages,
                            token_text,
)

__all__ = ["explorers", "figure_png", "markup", "notebook", "plotting", "report", "reproduction_page",
           "static_pages", "token_text"]
