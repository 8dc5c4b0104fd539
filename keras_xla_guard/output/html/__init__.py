"""One self-contained HTML page of a run: verdict, plots and tables.

Pure: run data (`output.runfile.RunData`: the dicts `CoverageReport.to_dict()`
and `EpochSignatures.to_dict()` give, per worker, and
`CompareReport.to_dict()`) in, HTML text out. No script, no stylesheet or
font to fetch: the plots are matplotlib figures inlined as SVG, so the file
opens offline, in a CI artifact viewer or attached to a bug report
(docs/html-report.md).

`page` writes the document, `window_sections` and `compile_sections` its
sections, `plots` the figures, `markup` the escaping and cells they share.
"""

from keras_xla_guard.output.html.markup import escape
from keras_xla_guard.output.html.page import render_html

__all__ = ["escape", "render_html"]
