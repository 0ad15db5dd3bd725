"""Search filters built from values (ids, names) that may hold quotes: MLflow's filter grammar has no escape.

MLflow strips the outer quotes of a string literal and keeps the inside verbatim, so a value is written in the
quote it does not contain, and the result is checked with MLflow's own parser: a filter either selects exactly
`value` or is refused (`RecordRejected`, naming the field, never the value), never a different query.
"""

from __future__ import annotations

from oltunes.tracking.client import RecordRejected


def literal(value: str, field: str) -> str:
    """`value` as an MLflow filter string literal."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.search_utils import SearchUtils

    for q in ("'", '"'):
        if q in value:
            continue
        text = f"{q}{value}{q}"
        try:
            parsed = SearchUtils.parse_search_filter(f"tags.`probe` = {text}")
        except MlflowException:
            continue
        if len(parsed) == 1 and parsed[0]["value"] == value:
            return text
    raise RecordRejected(f"{field}: cannot be written in an MLflow search filter (holds both quote characters)")


def tag_equals(tag: str, value: str, field: str) -> str:
    """``tags.`tag` = <value>`` with `value` quoted safely (tag names are ours: no backticks)."""
    return f"tags.`{tag}` = {literal(value, field)}"
