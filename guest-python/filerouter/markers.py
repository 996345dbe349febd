"""Where a handler parameter comes from, declared as in FastAPI: `Query`, `Path`, `Header`,
`Cookie`, `Body`, `Form`, `File`, and `Field` for the fields of a dataclass or TypedDict.

Each is used as a parameter's default (`limit: int = Query(10, ge=1, le=100)`) or inside
`Annotated[int, Query(ge=1)]`, and carries the default, the name the client uses (`alias`), a
description for the docs, and the constraints `validation` checks. Not for: reading the request
(see `params`).
"""

from .validation import Constraints

_REQUIRED = ...


class Param:
    """A declared parameter: `location` is `query`, `path`, `header`, `cookie`, `body` or `form`."""

    location = "query"

    def __init__(
        self,
        default=_REQUIRED,
        *,
        alias=None,
        title=None,
        description=None,
        gt=None,
        ge=None,
        lt=None,
        le=None,
        multiple_of=None,
        min_length=None,
        max_length=None,
        pattern=None,
        examples=None,
        example=None,
        deprecated=None,
        include_in_schema=True,
        embed=None,
        media_type=None,
        convert_underscores=True,
        default_factory=None,
    ):
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
    def required(self):
        return self.default is _REQUIRED and self.default_factory is None

    def default_value(self):
        return self.default_factory() if self.default_factory is not None else self.default

    def __repr__(self):
        shown = "" if self.required else repr(self.default)
        return f"{type(self).__name__}({shown})"


class Query(Param):
    """A query parameter: `?name=value` (`list[...]` for repeated names)."""

    location = "query"


class Path(Param):
    """A path parameter (a `[name]` folder), with constraints: `id: int = Path(ge=1)`."""

    location = "path"


class Header(Param):
    """A request header; `user_agent` reads `User-Agent` unless `convert_underscores=False`."""

    location = "header"


class Cookie(Param):
    """A cookie of the request."""

    location = "cookie"


class Body(Param):
    """A value of the JSON body; `embed=True` reads it under its name (`{"item": {...}}`)."""

    location = "body"


class Form(Param):
    """A field of a URL-encoded or multipart form body."""

    location = "form"


class File(Form):
    """An uploaded file of a multipart form (annotate the parameter with `UploadFile` or
    `bytes`)."""


class Field(Param):
    """Constraints and a default for a dataclass or TypedDict field:
    `price: Annotated[float, Field(gt=0)]`."""

    location = "field"


def marker_of(param, metadata=()):
    """The `Param` declared for a parameter (its default, or `Annotated` metadata), or None."""
    for item in metadata:
        if isinstance(item, Param):
            return item
    if isinstance(param.default, Param):
        return param.default
    return None
