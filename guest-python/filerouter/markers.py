"""Where a handler parameter comes from, declared as in FastAPI: `Query`, `Path`, `Header`,
`Cookie`, `Body`, `Form`, `File`, and `Field` for the fields of a dataclass or TypedDict.

Each is used as a parameter's default (`limit: int = Query(10, ge=1, le=100)`) or inside
`Annotated[int, Query(ge=1)]`, and carries the default, the name the client uses (`alias`), a
description for the docs, and the constraints `validation` checks. Not for: reading the request
(see `params`).

For type checkers each of them is a function that returns `Any`, as FastAPI declares its own, so
that `limit: int = Query(10)` and `price: Annotated[float, Field(gt=0)]` check; at run time they
are the classes below, whose instances the dispatcher reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .validation import Constraints

if TYPE_CHECKING:
    import inspect
    from collections.abc import Callable, Sequence

_REQUIRED: Any = ...


class Param:
    """A declared parameter: `location` is `query`, `path`, `header`, `cookie`, `body` or `form`."""

    location: str = "query"

    def __init__(
        self,
        default: Any = _REQUIRED,
        *,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None,
        ge: float | None = None,
        lt: float | None = None,
        le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None,
        max_length: int | None = None,
        pattern: str | None = None,
        examples: list[Any] | None = None,
        example: Any = None,
        deprecated: bool | None = None,
        include_in_schema: bool = True,
        embed: bool | None = None,
        media_type: str | None = None,
        convert_underscores: bool = True,
        default_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.default = default
        self.default_factory = default_factory
        self.alias = alias
        self.title = title
        self.description = description
        self.examples = examples if examples is not None else ([example] if example is not None else None)
        self.deprecated = deprecated
        self.include_in_schema = include_in_schema
        self.embed = embed
        self.media_type = media_type
        self.convert_underscores = convert_underscores
        self.constraints = Constraints(
            gt=gt, ge=ge, lt=lt, le=le, multiple_of=multiple_of,
            min_length=min_length, max_length=max_length, pattern=pattern,
        )

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED and self.default_factory is None

    def default_value(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default

    def __repr__(self) -> str:
        shown = "" if self.required else repr(self.default)
        return f"{type(self).__name__}({shown})"


if TYPE_CHECKING:
    # What type checkers see: functions returning `Any`, modeled on FastAPI's, with the options
    # `Param` takes. At run time each name is the marker class of the `else:` branch.

    def Query(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
        examples: list[Any] | None = None, example: Any = None,
        deprecated: bool | None = None, include_in_schema: bool = True,
    ) -> Any:
        """A query parameter: `?name=value` (`list[...]` for repeated names)."""

    def Path(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
        examples: list[Any] | None = None, example: Any = None,
        deprecated: bool | None = None, include_in_schema: bool = True,
    ) -> Any:
        """A path parameter (a `[name]` folder), with constraints: `id: int = Path(ge=1)`."""

    def Header(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        alias: str | None = None,
        convert_underscores: bool = True,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
        examples: list[Any] | None = None, example: Any = None,
        deprecated: bool | None = None, include_in_schema: bool = True,
    ) -> Any:
        """A request header; `user_agent` reads `User-Agent` unless `convert_underscores=False`."""

    def Cookie(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
        examples: list[Any] | None = None, example: Any = None,
        deprecated: bool | None = None, include_in_schema: bool = True,
    ) -> Any:
        """A cookie of the request."""

    def Body(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        embed: bool | None = None,
        media_type: str | None = None,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
        examples: list[Any] | None = None, example: Any = None,
        deprecated: bool | None = None, include_in_schema: bool = True,
    ) -> Any:
        """A value of the JSON body; `embed=True` reads it under its name (`{"item": {...}}`)."""

    def Form(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        media_type: str | None = None,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
        examples: list[Any] | None = None, example: Any = None,
        deprecated: bool | None = None, include_in_schema: bool = True,
    ) -> Any:
        """A field of a URL-encoded or multipart form body."""

    def File(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        media_type: str | None = None,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        min_length: int | None = None, max_length: int | None = None,
        examples: list[Any] | None = None, example: Any = None,
        deprecated: bool | None = None, include_in_schema: bool = True,
    ) -> Any:
        """An uploaded file of a multipart form (annotate the parameter with `UploadFile` or
        `bytes`)."""

    def Field(  # noqa: N802
        default: Any = ...,
        *,
        default_factory: Callable[[], Any] | None = None,
        alias: str | None = None,
        title: str | None = None,
        description: str | None = None,
        gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
        multiple_of: float | None = None,
        min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
        examples: list[Any] | None = None,
        deprecated: bool | None = None,
    ) -> Any:
        """Constraints and a default for a dataclass or TypedDict field:
        `price: Annotated[float, Field(gt=0)]`."""

else:
    # The markers themselves (documented on the functions above).

    class Query(Param):
        location = "query"

    class Path(Param):
        location = "path"

    class Header(Param):
        location = "header"

    class Cookie(Param):
        location = "cookie"

    class Body(Param):
        location = "body"

    class Form(Param):
        location = "form"

    class File(Form):
        pass

    class Field(Param):
        location = "field"


def marker_of(param: inspect.Parameter, metadata: Sequence[object] = ()) -> Param | None:
    """The `Param` declared for a parameter (its default, or `Annotated` metadata), or None."""
    for item in metadata:
        if isinstance(item, Param):
            return item
    if isinstance(param.default, Param):
        return param.default
    return None
