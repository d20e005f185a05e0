"""HTML comparison reports: claim cards, curves, memory and communication breakdowns, from run records."""

from suite.report.build import Section, build_report, build_report_for, build_site, render_page

__all__ = ["Section", "build_report", "build_report_for", "build_site", "render_page"]
