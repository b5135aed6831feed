"""What a person sees: plotly figures, notebook setup, explorers, summary.json, report.html, reproduction pages,
offline notebook pages, PNGs and run-folder text escaped for Markdown and HTML."""

from tiebias.output import explorers, notebook, plotting, report, reproduction_page

__all__ = ["explorers", "notebook", "plotting", "report", "reproduction_page"]
