"""`filerouter.plugins`: call the project's plugins, WebAssembly components with WIT interfaces.

`config.py` declares them (`plugins = {"markdown": {"component": "plugins/markdown/markdown.wasm"}}`)
and route code calls their functions with Python values::

    from filerouter.plugins import markdown

    def GET(request):
        return HTMLResponse(markdown.to_html("# Hello"))

WIT names become Python names with `-` turned into `_` (`to-html` is `to_html`). Values map as
follows, both ways: `bool`; the integer types as `int` (range-checked); `f32`/`f64` as `float`;
`char` and `string` as `str`; `list<u8>` as `bytes`; other lists as `list`; tuples as `tuple`;
records as `dict` (or, going in, any object with those attributes); `option<T>` as the value or
`None`; enums as the case's name (`str`); flags as a `set` of names; variants as
`Variant(case, value)`; a function's `result<T, E>` as its `T`, or a raised `PluginError` whose
`value` is the `E` (a `result` elsewhere, as `Ok(value)` / `Err(value)`).

The host does the converting, from the types the plugin's component declares (the guest is built
once and knows no plugin). Each plugin runs in a sandbox of its own, made on its first call in a
request and dropped with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._sandbox import plugins as _host

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = ["Err", "Ok", "PluginError", "PluginTrap", "Variant"]

_S64 = (-(1 << 63), (1 << 63) - 1)
_U64_MAX = (1 << 64) - 1


class PluginError(Exception):
    """A plugin function returned the error case of its `result`: `value` is that error's value
    (converted like any other value; `None` for a bare `result<T>`)."""

    def __init__(self, value: Any, plugin: str | None = None, function: str | None = None) -> None:
        super().__init__(value)
        self.value = value
        self.plugin = plugin
        self.function = function

    def __str__(self) -> str:
        where = f"{self.plugin}.{self.function}" if self.plugin else "the plugin"
        return f"{where} returned an error: {self.value!r}"


class PluginTrap(Exception):
    """A plugin stopped abnormally (a trap, its memory cap), or could not be started. Like an
    exception in a handler, it answers 500 unless route code catches it."""


class Variant:
    """A case of a WIT `variant`: `Variant("circle", 2.0)`, `Variant("empty")`."""

    __slots__ = ("case", "value")

    def __init__(self, case: str, value: Any = None) -> None:
        if not isinstance(case, str):
            raise TypeError(f"a variant's case is a str, not {type(case).__name__}")
        self.case = case
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Variant) and (self.case, self.value) == (other.case, other.value)

    def __hash__(self) -> int:
        return hash((Variant, self.case, self.value))

    def __repr__(self) -> str:
        return f"Variant({self.case!r})" if self.value is None else f"Variant({self.case!r}, {self.value!r})"


class Ok:
    """The `ok` case of a WIT `result` inside another value (a top-level result is unwrapped)."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self), self.value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class Err(Ok):
    """The `err` case of a WIT `result` inside another value."""

    __slots__ = ()


def _encode(value: Any) -> list[Any]:
    """`value` as the node list of `wit/filerouter.wit`'s `plugins.node` (root first)."""
    nodes: list[Any] = []
    active: set[int] = set()

    def add(item: Any) -> int:
        index = len(nodes)
        nodes.append(None)
        if item is None:
            node = _host.Node_None_()
        elif isinstance(item, bool):
            node = _host.Node_Boolean(item)
        elif isinstance(item, int):
            if _S64[0] <= item <= _S64[1]:
                node = _host.Node_Signed(item)
            elif 0 <= item <= _U64_MAX:
                node = _host.Node_Unsigned(item)
            else:
                node = _host.Node_Big(str(item))
        elif isinstance(item, float):
            node = _host.Node_Float(item)
        elif isinstance(item, str):
            node = _host.Node_Text(item)
        elif isinstance(item, (bytes, bytearray, memoryview)):
            node = _host.Node_Bytes(bytes(item))
        elif isinstance(item, Variant):
            node = _host.Node_Tagged((item.case, None if item.value is None else add(item.value)))
        elif isinstance(item, Ok):
            payload = None if item.value is None else add(item.value)
            node = _host.Node_Err(payload) if isinstance(item, Err) else _host.Node_Ok(payload)
        elif isinstance(item, (list, tuple, set, frozenset, dict)) or hasattr(item, "__dict__"):
            if id(item) in active:
                raise ValueError("cannot pass a value that contains itself to a plugin")
            active.add(id(item))
            try:
                node = _container(item, add)
            finally:
                active.discard(id(item))
        else:
            node = _enum_value(item, add)
        nodes[index] = node
        return index

    add(value)
    return nodes


def _container(item: Any, add: Callable[[Any], int]) -> Any:
    if isinstance(item, list):
        return _host.Node_Items([add(x) for x in item])
    if isinstance(item, tuple):
        return _host.Node_Group([add(x) for x in item])
    if isinstance(item, (set, frozenset)):
        return _host.Node_Members([add(x) for x in sorted(item, key=repr)])
    if isinstance(item, dict):
        fields: list[tuple[str, int]] = []
        for key, field in item.items():
            if not isinstance(key, str):
                raise TypeError(f"a record's keys are str, not {type(key).__name__} ({key!r})")
            fields.append((key, add(field)))
        return _host.Node_Mapping(fields)
    import enum  # noqa: PLC0415  (preloaded; only objects get here)

    if isinstance(item, enum.Enum):
        return _enum_value(item, add)
    names = getattr(type(item), "__dataclass_fields__", None) or vars(item)
    return _host.Node_Attributes([(name, add(getattr(item, name))) for name in names if not name.startswith("_")])


def _enum_value(item: Any, add: Callable[[Any], int]) -> Any:
    import enum  # noqa: PLC0415

    if isinstance(item, enum.Enum):
        return _host.Node_Text(item.value if isinstance(item.value, str) else item.name)
    raise TypeError(f"cannot pass a {type(item).__name__} to a plugin")


def _decode(nodes: list[Any]) -> Any:
    """The Python value of a node list from the host."""

    def value(index: int) -> Any:
        node = nodes[index]
        if isinstance(node, _host.Node_None_):
            return None
        if isinstance(node, (_host.Node_Boolean, _host.Node_Signed, _host.Node_Unsigned, _host.Node_Float, _host.Node_Text, _host.Node_Bytes)):
            return node.value
        if isinstance(node, _host.Node_Big):
            return int(node.value)
        if isinstance(node, _host.Node_Items):
            return [value(i) for i in node.value]
        if isinstance(node, _host.Node_Group):
            return tuple(value(i) for i in node.value)
        if isinstance(node, (_host.Node_Mapping, _host.Node_Attributes)):
            return {name: value(i) for name, i in node.value}
        if isinstance(node, _host.Node_Members):
            return {value(i) for i in node.value}
        if isinstance(node, _host.Node_Tagged):
            case, payload = node.value
            return Variant(case, None if payload is None else value(payload))
        if isinstance(node, _host.Node_Ok):
            return Ok(None if node.value is None else value(node.value))
        if isinstance(node, _host.Node_Err):
            return Err(None if node.value is None else value(node.value))
        raise TypeError(f"unexpected value from the host: {node!r}")

    return value(0) if nodes else None


class _Function:
    """One function of a plugin, called with Python values."""

    def __init__(self, plugin: str, info: Any) -> None:
        self._plugin = plugin
        self._info = info
        self.__name__ = info.name
        self.__qualname__ = f"{plugin}.{info.name}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        info = self._info
        params = list(info.params)
        if len(args) > len(params):
            raise TypeError(f"{self.__qualname__}() takes {len(params)} arguments but {len(args)} were given")
        values = list(args)
        for name in params[len(args):]:
            if name not in kwargs:
                raise TypeError(f"{self.__qualname__}() missing argument: '{name}'")
            values.append(kwargs.pop(name))
        if kwargs:
            extra = next(iter(kwargs))
            given_twice = extra in params
            raise TypeError(
                f"{self.__qualname__}() got multiple values for argument '{extra}'"
                if given_twice
                else f"{self.__qualname__}() got an unexpected keyword argument '{extra}'"
            )
        try:
            nodes = _host.call(self._plugin, info.key, _encode(tuple(values)))
        except Exception as exc:  # the binding raises `Err` carrying a `call-error`
            raise _error(exc, self._plugin, info.name) from None
        return _decode(nodes)

    def __repr__(self) -> str:
        params = ", ".join(self._info.params)
        return f"<plugin function {self.__qualname__}({params})>"


def _error(exc: Exception, plugin: str, function: str) -> Exception:
    error: Any = getattr(exc, "value", None)
    if isinstance(error, _host.CallError_Returned):
        return PluginError(_decode(error.value), plugin, function)
    if isinstance(error, _host.CallError_WrongType):
        return TypeError(error.value)
    if isinstance(error, _host.CallError_OutOfRange):
        return OverflowError(error.value)
    if isinstance(error, _host.CallError_Unknown):
        return AttributeError(error.value)
    if isinstance(error, _host.CallError_Trapped):
        return PluginTrap(error.value)
    return exc


class _Namespace:
    """A plugin, or one of its exported interfaces: attributes are its functions."""

    def __init__(
        self,
        name: str,
        functions: dict[str, _Function],
        interfaces: Mapping[str, _Namespace] | Iterable[tuple[str, _Namespace]] = (),
    ) -> None:
        self._name = name
        self._functions = functions
        self._interfaces = dict(interfaces)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in self._functions:
            return self._functions[attr]
        if attr in self._interfaces:
            return self._interfaces[attr]
        import difflib  # noqa: PLC0415

        known = sorted(self._functions) + sorted(self._interfaces)
        close = difflib.get_close_matches(attr, known, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else f" (it has: {', '.join(known) or 'nothing'})"
        raise AttributeError(f"plugin `{self._name}` has no function `{attr}`{hint}")

    def __dir__(self) -> list[str]:
        return sorted(self._functions) + sorted(self._interfaces)

    def __repr__(self) -> str:
        return f"<plugin {self._name}>"


def _load(name: str) -> _Namespace:
    try:
        infos = _host.describe(name)
    except Exception as exc:
        raise ImportError(getattr(exc, "value", str(exc)), name=f"{__name__}.{name}") from None
    flat: dict[str, _Function] = {}
    ambiguous: set[str] = set()
    by_interface: dict[str, dict[str, _Function]] = {}
    for info in infos:
        function = _Function(name, info)
        if info.interface is not None:
            by_interface.setdefault(info.interface, {})[info.name] = function
        if info.name in flat:
            ambiguous.add(info.name)
        flat[info.name] = function
    for clash in ambiguous:
        del flat[clash]
    interfaces = {iface: _Namespace(f"{name}.{iface}", fns) for iface, fns in by_interface.items()}
    return _Namespace(name, flat, interfaces)


_loaded: dict[str, _Namespace] = {}


def __getattr__(name: str) -> Any:
    """`from filerouter.plugins import NAME`: the plugin `config.py` declares as NAME."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _loaded:
        _loaded[name] = _load(name)
    return _loaded[name]
