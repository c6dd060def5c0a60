"""rabbitmqctl's two output shapes: a tab-separated table with a header line, or a JSON
array of objects keyed by the column names."""

import json
import sys


def print_rows(columns: list[str], rows: list[list], formatter: str) -> None:
    if formatter == "json":
        print_json([dict(zip(columns, row)) for row in rows])
        return
    print("\t".join(columns))
    for row in rows:
        print("\t".join(table_cell(value) for value in row))


def print_json(items: list[dict]) -> None:
    """One object a line, as rabbitmqctl's JSON formatter lays out a list."""
    if not items:
        print("[]")
        return
    lines = [json.dumps(item, separators=(",", ":")) for item in items]
    sys.stdout.write("[\n" + lines[0] + "\n" + "".join(f",{line}\n" for line in lines[1:])
                     + "]\n")


def table_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(table_cell(item) for item in value) + "]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
