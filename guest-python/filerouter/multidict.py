"""A read-only multi-dict, as Starlette's `ImmutableMultiDict`: the base of `QueryParams` and
`FormData`. A name may appear more than once: `get(name)` and `[name]` give the last value,
`getlist(name)` all of them in order, `multi_items()` every pair. Not for: headers, whose names
are case-insensitive (`requests.Headers`).
"""


class MultiDict:
    def __init__(self, items=()):
        self._items = list(items)
        self._dict = {k: v for k, v in self._items}

    def get(self, name, default=None):
        return self._dict.get(name, default)

    def getlist(self, name):
        return [v for k, v in self._items if k == name]

    def keys(self):
        return self._dict.keys()

    def values(self):
        return self._dict.values()

    def items(self):
        return self._dict.items()

    def multi_items(self):
        return list(self._items)

    def __getitem__(self, name):
        return self._dict[name]

    def __contains__(self, name):
        return name in self._dict

    def __iter__(self):
        return iter(self._dict)

    def __len__(self):
        return len(self._dict)

    def __repr__(self):
        return f"{type(self).__name__}({self._items!r})"
