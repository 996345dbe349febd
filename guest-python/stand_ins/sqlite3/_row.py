"""`sqlite3.Row`: a row factory whose rows are read by position or by column name."""

import collections.abc

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class Row:
    """One result row: `row[0]`, `row["name"]` (column names compare case-insensitively, in
    ASCII), slices, `len`, iteration and `keys()`. Rows are equal when their columns and values
    are. Use it as `connection.row_factory = sqlite3.Row`."""

    __module__ = "sqlite3"
    __slots__ = ("_description", "_data")

    def __init__(self, cursor, data, /):
        if not isinstance(data, tuple):
            raise TypeError(f"Row() argument 2 must be tuple, not {type(data).__name__}")
        self._description = cursor.description
        self._data = data

    def keys(self):
        """The column names, in order."""
        return [column[0] for column in self._description or ()]

    def __getitem__(self, key):
        if isinstance(key, (int, slice)):
            return self._data[key]
        if isinstance(key, str):
            folded = key.translate(_ASCII_LOWER)
            for index, column in enumerate(self._description or ()):
                if column[0].translate(_ASCII_LOWER) == folded:
                    return self._data[index]
            raise IndexError("No item with that key")
        raise IndexError("Index must be int or string")

    def __len__(self):
        return len(self._data)

    def __iter__(self):
        return iter(self._data)

    def __eq__(self, other):
        if not isinstance(other, Row):
            return NotImplemented
        return self._description == other._description and self._data == other._data

    def __hash__(self):
        return hash(self._description) ^ hash(self._data)


collections.abc.Sequence.register(Row)
