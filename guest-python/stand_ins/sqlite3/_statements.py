"""What the module needs to know about a statement's text before sending it: whether it
changes data, so that legacy transaction control opens a transaction first, as the standard
library does."""

# Statements that make the standard library open a transaction (when isolation_level is not
# None and none is open). Nothing else does: not SELECT, not DDL, not `WITH ... INSERT`.
_DATA_CHANGING = ("INSERT", "UPDATE", "DELETE", "REPLACE")
_WHITESPACE = " \t\n\f\r"


def leading_keyword(statement):
    """The first word of `statement`, upper case, after whitespace and SQL comments."""
    i, end = 0, len(statement)
    while i < end:
        if statement[i] in _WHITESPACE:
            i += 1
        elif statement.startswith("--", i):
            newline = statement.find("\n", i)
            i = end if newline == -1 else newline + 1
        elif statement.startswith("/*", i):
            close = statement.find("*/", i + 2)
            i = end if close == -1 else close + 2
        else:
            break
    word_end = i
    while word_end < end and statement[word_end].isascii() and statement[word_end].isalpha():
        word_end += 1
    return statement[i:word_end].upper()


def changes_data(statement):
    """Whether `statement` starts with INSERT, UPDATE, DELETE or REPLACE."""
    return leading_keyword(statement) in _DATA_CHANGING


def begin_statement(isolation_level):
    """The statement that opens a transaction at `isolation_level` ("" is SQLite's default,
    DEFERRED)."""
    return f"BEGIN {isolation_level}" if isolation_level else "BEGIN"
