"""Where the eval's report code used to live; now only names re-exported for old imports.

The report was split by concern (issue 10): `tables` turns scored runs into `TableData`,
`report_files` writes ``report.json`` and ``report.md``, and `chart` draws ``report.png``
(matplotlib, imported only when drawing). This module keeps ``from judge_eval.report
import ...`` and ``report.X`` working for code written against the old module (the closed
loop imports `TableData`, `markdown_table` and `public_config` from here). New code should
import from the three modules.
"""

from __future__ import annotations

from judge_eval.chart import CHART_DPI, CHART_FILE, CHART_SIZE_IN, write_chart
from judge_eval.report_files import (
    JSON_FILE,
    MARKDOWN_FILE,
    build_report,
    markdown_table,
    trajectory_row,
    write_json,
    write_markdown,
)
from judge_eval.tables import (
    Run,
    TableData,
    flag_source_table,
    grouped_table,
    loso_tables,
    main_tables,
    overall_table,
    public_config,
    sweep_table,
    unlabelled_summary,
    unlabelled_table,
)

__all__ = [
    "CHART_DPI",
    "CHART_FILE",
    "CHART_SIZE_IN",
    "JSON_FILE",
    "MARKDOWN_FILE",
    "Run",
    "TableData",
    "build_report",
    "flag_source_table",
    "grouped_table",
    "loso_tables",
    "main_tables",
    "markdown_table",
    "overall_table",
    "public_config",
    "sweep_table",
    "trajectory_row",
    "unlabelled_summary",
    "unlabelled_table",
    "write_chart",
    "write_json",
    "write_markdown",
]
