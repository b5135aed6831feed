"""What a person sees: plotly figures (``plotting``), notebook setup (``notebook``), explorers, ``summary.json`` and
``report.html`` (``report``), ``reproduction.md`` / ``.html`` (``reproduction_page``), offline notebook pages
(``static_pages``), PNGs (``figure_png``) and run-folder text escaped for Markdown and HTML (``markup``)."""

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
