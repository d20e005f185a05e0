"""HTML comparison reports: claim cards, curves, memory and communication breakdowns, from run records."""

from suite.report.build import build_report, build_report_for

__all__ = ["build_report", "build_report_for"]
