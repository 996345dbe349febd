"""What the module needs to know about a statement's text before sending it: whether it
changes data, so that legacy transaction control opens a transaction first, as the standard
library does."""

import re

# Statements that make the standard library open a transaction (when isolation_level is not
# None and none is open). Nothing else does: not SELECT, not DDL, not `WITH ... INSERT`.
_DATA_CHANGING = ("INSERT", "UPDATE", "DELETE", "REPLACE")
# Whitespace and comments (an unclosed `/*` runs to the end), then the first word.
_LEADING = re.compile(r"(?:[ \t\n\f\r]+|--[^\n]*(?:\n|\Z)|/\*(?:.*?\*/|.*\Z))*([A-Za-z]*)", re.DOTALL)


def leading_keyword(statement):
    """The first word of `statement`, upper case, after whitespace and SQL comments."""
    return _LEADING.match(statement).group(1).upper()


def changes_data(statement):
    """Whether `statement` starts with INSERT, UPDATE, DELETE or REPLACE."""
    return leading_keyword(statement) in _DATA_CHANGING


def begin_statement(isolation_level):
    """The statement that opens a transaction at `isolation_level` ("" is SQLite's default,
    DEFERRED)."""
    return f"BEGIN {isolation_level}" if isolation_level else "BEGIN"
