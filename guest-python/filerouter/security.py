"""Security dependencies with FastAPI's names: bearer tokens, OAuth2's password flow, HTTP Basic,
API keys in a header, a cookie or the query.

Each scheme is an object used as a dependency, as in FastAPI::

    oauth2_scheme = OAuth2PasswordBearer(tokenUrl="token")

    def GET(request, token: str = Depends(oauth2_scheme)):
        ...

Called for a request, it reads the credentials from the request and returns them, or answers
401 `{"detail": "Not authenticated"}` with the `WWW-Authenticate` challenge FastAPI 0.165 sends
(`auto_error=False` returns None instead). Every scheme a handler depends on, directly or through
other dependencies, is declared in `/openapi.json` (`components.securitySchemes` and the
operation's `security`), which is how `/docs` knows to offer its Authorize button
(`describe.py`). Not for: checking a token's signature or a password (the project's dependency
does that with the credentials these return).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import TYPE_CHECKING, Annotated, Any

from .exceptions import HTTPException
from .markers import Form
from . import params
from .params import Dependency
from .requests import Request

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def get_authorization_scheme_param(authorization: str | None) -> tuple[str, str]:
    """`("Bearer", "abc")` for the header value `Bearer abc`: the scheme before the first
    space and the rest, stripped; `("", "")` for no value."""
    if not authorization:
        return "", ""
    scheme, _, rest = authorization.partition(" ")
    return scheme, rest.strip()


@dataclasses.dataclass
class HTTPAuthorizationCredentials:
    """What `HTTPBearer` (and `HTTPBase`, `HTTPDigest`) return: the `Authorization` header's
    scheme (`Bearer`, as the client spelled it) and the credentials after it."""

    scheme: str
    credentials: str


@dataclasses.dataclass
class HTTPBasicCredentials:
    """What `HTTPBasic` returns: the user name and password of a `Basic` header."""

    username: str
    password: str


class SecurityScopes:
    """Declare a dependency's parameter with this type to receive the OAuth2 scopes that the
    `Security(..., scopes=[...])` declarations above it require (`scopes`, and `scope_str`,
    the same joined by spaces)."""

    # How `filerouter.params` recognises the parameter without importing this module.
    __filerouter_security_scopes__ = True

    def __init__(self, scopes: Sequence[str] | None = None) -> None:
        self.scopes: list[str] = list(scopes or [])
        self.scope_str: str = " ".join(self.scopes)

    def __repr__(self) -> str:
        return f"SecurityScopes({self.scopes!r})"


if TYPE_CHECKING:

    def Security(  # noqa: N802
        dependency: Callable[..., Any] | None = None,
        *,
        scopes: Sequence[str] | None = None,
        use_cache: bool = True,
    ) -> Any:
        """`Depends` that also requires OAuth2 `scopes`: they are listed in the operation's
        `security` in `/openapi.json`, and passed to every `SecurityScopes` parameter of the
        dependency and of its own dependencies."""

else:

    class Security(Dependency):
        def __init__(self, dependency=None, *, scopes=None, use_cache=True):
            super().__init__(dependency, use_cache=use_cache)
            self.scopes = tuple(scopes or ())


class SecurityBase:
    """A security scheme: an object that reads credentials from a request when it is called
    as a dependency, and describes itself for OpenAPI. `scheme_name` (default: the class name)
    is its name in `components.securitySchemes`."""

    scheme_name: str
    description: str | None
    auto_error: bool = True
    # The `WWW-Authenticate` challenge of its 401.
    challenge: str = "Bearer"

    def openapi_scheme(self) -> dict[str, Any]:
        """Its OpenAPI Security Scheme Object."""
        raise NotImplementedError

    def _described(self, scheme: dict[str, Any]) -> dict[str, Any]:
        if self.description:
            scheme["description"] = self.description
        return scheme

    def make_not_authenticated_error(self) -> HTTPException:
        """The 401 it answers when the credentials are missing or malformed."""
        return HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": self.challenge})

    def _refuse(self) -> None:
        """Raise the 401, or return None (`auto_error=False`: the dependency's value is None)."""
        if self.auto_error:
            raise self.make_not_authenticated_error()

    def _authorization(self, request: Request) -> str | None:
        """The whole `Authorization` header; without one, [`_refuse`]'s answer."""
        authorization = request.headers.get("authorization")
        if not authorization:
            self._refuse()
            return None
        return authorization

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scheme_name={self.scheme_name!r})"


class HTTPBase(SecurityBase):
    """An `Authorization: <scheme> <credentials>` header of any scheme."""

    def __init__(
        self,
        *,
        scheme: str,
        scheme_name: str | None = None,
        description: str | None = None,
        auto_error: bool = True,
    ) -> None:
        self.scheme = scheme
        self.scheme_name = scheme_name or type(self).__name__
        self.description = description
        self.auto_error = auto_error
        self.challenge = scheme.title()

    def openapi_scheme(self) -> dict[str, Any]:
        return self._described({"type": "http", "scheme": self.scheme})

    async def __call__(self, request: Request) -> HTTPAuthorizationCredentials | None:
        scheme, credentials = get_authorization_scheme_param(request.headers.get("authorization"))
        if not (scheme and credentials) or not self._accepts(scheme):
            self._refuse()
            return None
        return HTTPAuthorizationCredentials(scheme=scheme, credentials=credentials)

    def _accepts(self, scheme: str) -> bool:
        return True


class HTTPBearer(HTTPBase):
    """`Authorization: Bearer <token>`: returns `HTTPAuthorizationCredentials`."""

    def __init__(
        self,
        *,
        bearerFormat: str | None = None,  # noqa: N803  (FastAPI's name)
        scheme_name: str | None = None,
        description: str | None = None,
        auto_error: bool = True,
    ) -> None:
        super().__init__(scheme="bearer", scheme_name=scheme_name, description=description, auto_error=auto_error)
        self.bearer_format = bearerFormat

    def openapi_scheme(self) -> dict[str, Any]:
        scheme = super().openapi_scheme()
        if self.bearer_format:
            scheme["bearerFormat"] = self.bearer_format
        return scheme

    def _accepts(self, scheme: str) -> bool:
        return scheme.lower() == "bearer"


class HTTPDigest(HTTPBase):
    """`Authorization: Digest ...`, returned as `HTTPAuthorizationCredentials` unchecked (as in
    FastAPI, a stub for OpenAPI: verifying a digest is the project's)."""

    def __init__(
        self, *, scheme_name: str | None = None, description: str | None = None, auto_error: bool = True
    ) -> None:
        super().__init__(scheme="digest", scheme_name=scheme_name, description=description, auto_error=auto_error)

    def _accepts(self, scheme: str) -> bool:
        return scheme.lower() == "digest"


class HTTPBasic(HTTPBase):
    """`Authorization: Basic <base64 of user:password>`: returns `HTTPBasicCredentials`. The
    401 challenges `Basic`, with `realm="..."` when one is given."""

    def __init__(
        self,
        *,
        scheme_name: str | None = None,
        realm: str | None = None,
        description: str | None = None,
        auto_error: bool = True,
    ) -> None:
        super().__init__(scheme="basic", scheme_name=scheme_name, description=description, auto_error=auto_error)
        self.realm = realm
        self.challenge = f'Basic realm="{realm}"' if realm else "Basic"

    async def __call__(self, request: Request) -> HTTPBasicCredentials | None:  # type: ignore[override]
        authorization = request.headers.get("authorization")
        scheme, encoded = get_authorization_scheme_param(authorization)
        if not authorization or scheme.lower() != "basic":
            self._refuse()
            return None
        # Malformed credentials are a 401 even with `auto_error=False`, as in FastAPI.
        try:
            text = base64.b64decode(encoded).decode("ascii")
        except (ValueError, UnicodeDecodeError, binascii.Error):
            raise self.make_not_authenticated_error() from None
        username, colon, password = text.partition(":")
        if not colon:
            raise self.make_not_authenticated_error()
        return HTTPBasicCredentials(username=username, password=password)


class OAuth2(SecurityBase):
    """OAuth2 with the given `flows` (an OpenAPI OAuth Flows Object, as a dict); called, it
    returns the whole `Authorization` header value. The subclasses are what projects use."""

    def __init__(
        self,
        *,
        flows: dict[str, dict[str, Any]] | None = None,
        scheme_name: str | None = None,
        description: str | None = None,
        auto_error: bool = True,
    ) -> None:
        self.flows: dict[str, dict[str, Any]] = dict(flows or {})
        self.scheme_name = scheme_name or type(self).__name__
        self.description = description
        self.auto_error = auto_error

    def openapi_scheme(self) -> dict[str, Any]:
        return self._described({"type": "oauth2", "flows": self.flows})

    async def __call__(self, request: Request) -> str | None:
        return self._authorization(request)


def _flow(scopes: dict[str, str] | None, **urls: str | None) -> dict[str, Any]:
    flow: dict[str, Any] = {name: url for name, url in urls.items() if url is not None}
    flow["scopes"] = dict(scopes or {})
    return flow


class OAuth2PasswordBearer(OAuth2):
    """OAuth2's password flow: the client trades a user name and password (a form,
    `OAuth2PasswordRequestForm`) for a token at `tokenUrl`, then sends `Authorization: Bearer
    <token>`. Called, it returns the token."""

    def __init__(
        self,
        tokenUrl: str,  # noqa: N803  (FastAPI's name)
        scheme_name: str | None = None,
        scopes: dict[str, str] | None = None,
        description: str | None = None,
        auto_error: bool = True,
        refreshUrl: str | None = None,  # noqa: N803
    ) -> None:
        super().__init__(
            flows={"password": _flow(scopes, tokenUrl=tokenUrl, refreshUrl=refreshUrl)},
            scheme_name=scheme_name,
            description=description,
            auto_error=auto_error,
        )
        self.token_url = tokenUrl

    async def __call__(self, request: Request) -> str | None:
        authorization = request.headers.get("authorization")
        scheme, token = get_authorization_scheme_param(authorization)
        if not authorization or scheme.lower() != "bearer":
            self._refuse()
            return None
        return token


class OAuth2AuthorizationCodeBearer(OAuth2):
    """OAuth2's authorization code flow; called, it returns the bearer token."""

    def __init__(
        self,
        authorizationUrl: str,  # noqa: N803  (FastAPI's names)
        tokenUrl: str,  # noqa: N803
        refreshUrl: str | None = None,  # noqa: N803
        scheme_name: str | None = None,
        scopes: dict[str, str] | None = None,
        description: str | None = None,
        auto_error: bool = True,
    ) -> None:
        super().__init__(
            flows={
                "authorizationCode": _flow(
                    scopes, authorizationUrl=authorizationUrl, tokenUrl=tokenUrl, refreshUrl=refreshUrl
                )
            },
            scheme_name=scheme_name,
            description=description,
            auto_error=auto_error,
        )

    async def __call__(self, request: Request) -> str | None:
        scheme, token = get_authorization_scheme_param(request.headers.get("authorization"))
        if scheme.lower() != "bearer":
            self._refuse()
            return None
        return token


class OpenIdConnect(SecurityBase):
    """OpenID Connect, described by `openIdConnectUrl`; called, it returns the whole
    `Authorization` header value."""

    def __init__(
        self,
        *,
        openIdConnectUrl: str,  # noqa: N803  (FastAPI's name)
        scheme_name: str | None = None,
        description: str | None = None,
        auto_error: bool = True,
    ) -> None:
        self.url = openIdConnectUrl
        self.scheme_name = scheme_name or type(self).__name__
        self.description = description
        self.auto_error = auto_error

    def openapi_scheme(self) -> dict[str, Any]:
        return self._described({"type": "openIdConnect", "openIdConnectUrl": self.url})

    async def __call__(self, request: Request) -> str | None:
        return self._authorization(request)


class APIKeyBase(SecurityBase):
    """An API key sent in a header, a cookie or the query string under `name`; called, it
    returns the key. A missing or empty key is the 401, challenging `APIKey`."""

    location = "header"
    challenge = "APIKey"

    def __init__(
        self,
        *,
        name: str,
        scheme_name: str | None = None,
        description: str | None = None,
        auto_error: bool = True,
    ) -> None:
        self.name = name
        self.scheme_name = scheme_name or type(self).__name__
        self.description = description
        self.auto_error = auto_error

    def openapi_scheme(self) -> dict[str, Any]:
        return self._described({"type": "apiKey", "in": self.location, "name": self.name})

    def _key(self, request: Request) -> str | None:
        raise NotImplementedError

    async def __call__(self, request: Request) -> str | None:
        key = self._key(request)
        if not key:
            self._refuse()
            return None
        return key


class APIKeyHeader(APIKeyBase):
    """An API key in the header `name` (`APIKeyHeader(name="X-API-Key")`)."""

    location = "header"

    def _key(self, request: Request) -> str | None:
        return request.headers.get(self.name)


class APIKeyCookie(APIKeyBase):
    """An API key in the cookie `name`."""

    location = "cookie"

    def _key(self, request: Request) -> str | None:
        return request.cookies.get(self.name)


class APIKeyQuery(APIKeyBase):
    """An API key in the query parameter `name`."""

    location = "query"

    def _key(self, request: Request) -> str | None:
        return request.query_params.get(self.name)


class OAuth2PasswordRequestForm:
    """The form a client posts to the token URL of OAuth2's password flow, used as a class
    dependency: `form: OAuth2PasswordRequestForm = Depends()`. `username` and `password` are
    required; `scope` (space-separated) is also given split, as `scopes`."""

    def __init__(
        self,
        *,
        grant_type: Annotated[str | None, Form(pattern="^password$")] = None,
        username: Annotated[str, Form()],
        password: Annotated[str, Form()],
        scope: Annotated[str, Form()] = "",
        client_id: Annotated[str | None, Form()] = None,
        client_secret: Annotated[str | None, Form()] = None,
    ) -> None:
        self.grant_type = grant_type
        self.username = username
        self.password = password
        self.scopes = scope.split()
        self.client_id = client_id
        self.client_secret = client_secret


class OAuth2PasswordRequestFormStrict(OAuth2PasswordRequestForm):
    """`OAuth2PasswordRequestForm` with `grant_type=password` required, as the OAuth2
    specification says."""

    def __init__(
        self,
        *,
        grant_type: Annotated[str, Form(pattern="^password$")],
        username: Annotated[str, Form()],
        password: Annotated[str, Form()],
        scope: Annotated[str, Form()] = "",
        client_id: Annotated[str | None, Form()] = None,
        client_secret: Annotated[str | None, Form()] = None,
    ) -> None:
        super().__init__(
            grant_type=grant_type,
            username=username,
            password=password,
            scope=scope,
            client_id=client_id,
            client_secret=client_secret,
        )


def schemes_of(fn: Callable[..., Any]) -> list[tuple[SecurityBase, tuple[str, ...]]]:
    """The security schemes `fn` depends on, directly or through its dependencies, each with
    the scopes required of it, without repeats, in the order they are first met (depth first,
    parameters in order)."""
    found: list[tuple[SecurityBase, tuple[str, ...]]] = []
    seen: set[tuple[int, tuple[str, ...]]] = set()

    def walk(fn: Callable[..., Any], scopes: tuple[str, ...]) -> None:
        for spec in params.specs_of(fn):
            dependency = spec.dependency
            if dependency is None:
                continue
            needed = scopes + tuple(s for s in spec.scopes if s not in scopes)
            key = (id(dependency), needed)
            if key in seen:
                continue
            seen.add(key)
            if isinstance(dependency, SecurityBase):
                if not any(s is dependency and n == needed for s, n in found):
                    found.append((dependency, needed))
            walk(dependency, needed)

    walk(fn, ())
    return found


__all__ = [
    "APIKeyCookie",
    "APIKeyHeader",
    "APIKeyQuery",
    "HTTPAuthorizationCredentials",
    "HTTPBase",
    "HTTPBasic",
    "HTTPBasicCredentials",
    "HTTPBearer",
    "HTTPDigest",
    "OAuth2",
    "OAuth2AuthorizationCodeBearer",
    "OAuth2PasswordBearer",
    "OAuth2PasswordRequestForm",
    "OAuth2PasswordRequestFormStrict",
    "OpenIdConnect",
    "Security",
    "SecurityBase",
    "SecurityScopes",
    "get_authorization_scheme_param",
]
