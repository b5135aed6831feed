"""What a person sees: plotly figures, notebook setup, ipywidgets explorers, summary.json / report.html, PNG export.

``plotting`` (one module per analysis), ``notebook`` (setup and HTML export), ``explorers``, ``token_text`` (the
whitespace notation), ``report``, ``static_pages`` (offline pages) and ``figure_png``
(PNGs through headless Chromium).
"""

from tiebias.output import (
                            explorers,
                            figure_png,
                            notebook,
                            plotting,
                            report,
                            static_pages,
                            token_text,
)

__all__ = ["explorers", "figure_png", "notebook", "plotting", "report", "static_pages", "token_text"]
