"""A read-only multi-dict, as Starlette's `ImmutableMultiDict`: the base of `QueryParams` and
`FormData`. A name may appear more than once: `get(name)` and `[name]` give the last value,
`getlist(name)` all of them in order, `multi_items()` every pair. Not for: headers, whose names
are case-insensitive (`requests.Headers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar, overload

if TYPE_CHECKING:
    from collections.abc import ItemsView, Iterable, Iterator, KeysView, ValuesView

_V = TypeVar("_V")
_T = TypeVar("_T")


class MultiDict(Generic[_V]):
    """Names (`str`) to values of type `_V`, a name possibly repeated."""

    def __init__(self, items: Iterable[tuple[str, _V]] = ()) -> None:
        self._items = list(items)
        self._dict = {k: v for k, v in self._items}

    @overload
    def get(self, name: str) -> _V | None: ...
    @overload
    def get(self, name: str, default: _V) -> _V: ...
    @overload
    def get(self, name: str, default: _T) -> _V | _T: ...
    def get(self, name: str, default: object = None) -> object:
        return self._dict.get(name, default)

    def getlist(self, name: str) -> list[_V]:
        return [v for k, v in self._items if k == name]

    def keys(self) -> KeysView[str]:
        return self._dict.keys()

    def values(self) -> ValuesView[_V]:
        return self._dict.values()

    def items(self) -> ItemsView[str, _V]:
        return self._dict.items()

    def multi_items(self) -> list[tuple[str, _V]]:
        return list(self._items)

    def __getitem__(self, name: str) -> _V:
        return self._dict[name]

    def __contains__(self, name: object) -> bool:
        return name in self._dict

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"
