"""Rendering: the only code that prints or formats for a terminal or a file. Renderers read
frozen data from ``harness.reporting.analysis`` (or ledger rows) and compute nothing new;
the report's Markdown and HTML are jinja2 templates shipped beside them (``templates/``)."""
