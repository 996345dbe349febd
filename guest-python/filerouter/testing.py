"""`filerouter.testing`: test a project as FastAPI's `TestClient` tests an app.

    from filerouter.testing import TestClient

    def test_index():
        with TestClient("path/to/project") as client:
            response = client.get("/")
            assert response.status_code == 200
            assert response.json() == {"message": "Hello, world"}

This module runs on your machine, not in the sandbox. A `TestClient` serves the project as users
meet it: the real `filerouter` binary (the wheel's, `$FILEROUTER_BIN`, or the one on `PATH`)
runs `filerouter dev` on a free port of 127.0.0.1 (or `filerouter run` from the build cache, with
`mode="run"`), so every line of route code runs in the sandbox, each request in a fresh instance.
Each client has a data folder of its own, so its database and kv store start empty (migrations
applied) and are removed when it stops; `FILEROUTER_DATABASE_URL`, `FILEROUTER_KV_URL` and
`FILEROUTER_DATA_DIR` from your environment are not passed on. Responses have the shape of
FastAPI's (`status_code`, `json()`, `text`, `content`, `headers`, `cookies`); the client keeps
cookies between requests and follows redirects, as FastAPI's does.

`mode="run"` runs `filerouter build` first, which builds only when the sources changed since the
last build: a test never passes against an old build. In `dev` the client waits until the server
serves from its snapshot of the imported routes, so requests cost what they cost under `run`.
`AsyncTestClient` is the same client for `async def` tests (`await client.get("/")`).
`startup.py` (FastAPI's lifespan) runs when the server starts, under either.

Failures show the server's log: a server that does not start raises `ServerError` with its
output; a request answered 500 raises `ServerError` with the log lines it wrote (the traceback,
in `dev`) unless `raise_server_exceptions=False`; and with the pytest plugin this package
installs, a failing test's report ends with the log of the clients it used.

Dependency overrides (FastAPI's `app.dependency_overrides`) cannot be a dict of functions here,
since the dependencies live in the sandbox, not in the test's process: name a Python file instead,
`TestClient(project, dependency_overrides="tests/overrides.py")`, that defines
`dependency_overrides = {get_db: fake_db}`. It runs in the sandbox with every request, beside the
route files, and may import the project's modules (`from _lib.db import get_db`); only `dev`
takes one (`filerouter dev --overrides FILE`), never `build` or `run`.
"""

from __future__ import annotations

import sys

if sys.platform == "wasi":  # imported by route code inside the sandbox
    raise ImportError(
        "filerouter.testing runs on your machine (pytest), not in the sandbox: route code cannot import it"
    )

import asyncio
import http.client
import json as _json
import os
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping
from http.cookies import Morsel, SimpleCookie
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlencode, urljoin, urlsplit

__all__ = ["AsyncTestClient", "Headers", "Response", "ServerError", "TestClient", "find_binary"]

# The environment variables that would point a test's server at shared data.
_SHARED_DATA = ("FILEROUTER_DATABASE_URL", "FILEROUTER_KV_URL", "FILEROUTER_DATA_DIR")
_BANNER = re.compile(r"^filerouter (?:dev|run): serving .* at (http://\S+) ", re.M)
# What `dev` logs once it serves from a snapshot of the imported routes, or why it cannot.
_IMPORTED = re.compile(r"routes imported once for every request|every request imports the routes from source")
# How long a client waits for that after the banner before it sends requests anyway.
_IMPORT_WAIT = 60.0
_UNSET: Any = object()
# The clients running now, for the pytest plugin's failure reports.
LIVE: weakref.WeakSet[TestClient] = weakref.WeakSet()


class ServerError(AssertionError):
    """The server did not start, or answered a request with 500; the message has its log."""


def find_binary() -> str:
    """The `filerouter` binary: `$FILEROUTER_BIN`, else the one installed beside this package
    (the wheel puts it in the environment's scripts folder), else the first on `PATH`."""
    given = os.environ.get("FILEROUTER_BIN")
    if given:
        return given
    candidates = [sysconfig.get_path("scripts")]
    user = sysconfig.get_path("scripts", f"{os.name}_user")
    if user:
        candidates.append(user)
    for folder in candidates:
        path = Path(folder) / ("filerouter.exe" if os.name == "nt" else "filerouter")
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("filerouter")
    if found:
        return found
    raise FileNotFoundError(
        "the filerouter binary was not found: install the filerouter package "
        "(pip install filerouter), or set FILEROUTER_BIN to the binary's path"
    )


class Headers(Mapping[str, str]):
    """Response headers: names without case; a name sent twice reads as its values joined
    with ", " (as httpx's `Headers`), `get_list` gives them one by one."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items

    def __getitem__(self, name: str) -> str:
        values = self.get_list(name)
        if not values:
            raise KeyError(name)
        return ", ".join(values)

    def get_list(self, name: str) -> list[str]:
        """Every value of header `name`, in order."""
        lowered = name.lower()
        return [v for k, v in self._items if k.lower() == lowered]

    def multi_items(self) -> list[tuple[str, str]]:
        """Every (name, value) pair, in order, names in lower case."""
        return [(k.lower(), v) for k, v in self._items]

    def __iter__(self) -> Iterator[str]:
        seen: dict[str, None] = {}
        for k, _ in self._items:
            seen.setdefault(k.lower(), None)
        return iter(seen)

    def __len__(self) -> int:
        return len({k.lower() for k, _ in self._items})

    def __repr__(self) -> str:
        return f"Headers({self.multi_items()!r})"


class Response:
    """One answer, with the attributes of FastAPI's (httpx's) test responses."""

    def __init__(
        self, method: str, url: str, status_code: int, reason: str, headers: Headers, content: bytes
    ) -> None:
        self.method = method
        self.url = url
        self.status_code = status_code
        self.reason_phrase = reason
        self.headers = headers
        self.content = content
        # The redirects followed to get here, oldest first.
        self.history: list[Response] = []
        # What the answer's Set-Cookie headers set, with their attributes (the client's jar
        # reads `max-age` from them).
        self._set_cookies: dict[str, Morsel[str]] = {}
        for header in headers.get_list("set-cookie"):
            self._set_cookies.update(_parse_cookie(header))
        self.cookies: dict[str, str] = {name: morsel.value for name, morsel in self._set_cookies.items()}

    @property
    def encoding(self) -> str:
        match = re.search(r"charset=([\w.-]+)", self.headers.get("content-type", ""), re.I)
        return match.group(1) if match else "utf-8"

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding, errors="replace")

    def json(self) -> Any:
        return _json.loads(self.content)

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def is_redirect(self) -> bool:
        return self.status_code in (301, 302, 303, 307, 308) and "location" in self.headers

    def raise_for_status(self) -> Response:
        """Raise `AssertionError` naming the status unless it is 2xx (or a redirect)."""
        if not (self.is_success or self.is_redirect):
            raise AssertionError(f"{self.method} {self.url} answered {self.status_code}: {self.text[:500]}")
        return self

    def __repr__(self) -> str:
        return f"<Response [{self.status_code} {self.reason_phrase}]>"


class TestClient:
    """A project served by the real `filerouter` binary, for tests. See the module's docstring.

    `project`: the project folder. `mode`: "dev" (the default: no build needed, detailed
    errors) or "run" (the build cache, as production serves it; build it first). `env`: extra
    environment for the server (the project's declared settings and secrets). `data_dir`: keep
    the data there instead of in a temporary folder removed at the end.
    """

    __test__ = False  # not a test class, though its name starts with "Test"

    def __init__(
        self,
        project: str | os.PathLike[str] = ".",
        *,
        mode: Literal["dev", "run"] = "dev",
        base_url: str = "http://testserver",
        raise_server_exceptions: bool = True,
        follow_redirects: bool = True,
        cookies: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        dependency_overrides: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        startup_timeout: float = 120.0,
        timeout: float = 60.0,
    ) -> None:
        if mode not in ("dev", "run"):
            raise ValueError(f"mode is 'dev' or 'run', not {mode!r}")
        self.project = Path(project).resolve()
        if not (self.project / "routes").is_dir() and not (mode == "run" and (self.project / ".cache").is_dir()):
            raise FileNotFoundError(f"{self.project} has no routes/ folder: is it a filerouter project?")
        if dependency_overrides is not None and mode != "dev":
            raise ValueError("dependency_overrides needs mode='dev': build and run never take them")
        self.mode = mode
        self.base_url = base_url.rstrip("/")
        self.raise_server_exceptions = raise_server_exceptions
        self.follow_redirects = follow_redirects
        self.cookies: dict[str, str] = dict(cookies or {})
        self.headers: dict[str, str] = dict(headers or {})
        self.dependency_overrides = None if dependency_overrides is None else Path(dependency_overrides).resolve()
        self.env = dict(env or {})
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.timeout = timeout
        self._given_data_dir = None if data_dir is None else Path(data_dir).resolve()
        self._temporary: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_path: Path | None = None
        self._address: tuple[str, int] | None = None

    # -- the server -----------------------------------------------------------------------------

    def __enter__(self) -> TestClient:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the server and wait until it serves (at most `startup_timeout` seconds)."""
        if self._process is not None:
            return
        self._temporary = tempfile.mkdtemp(prefix="filerouter-test-")
        data_dir = self._given_data_dir or Path(self._temporary) / "data"
        self._log_path = Path(self._temporary) / "server.log"
        self._log_file = open(self._log_path, "wb")  # noqa: SIM115  (closed in close())
        binary = self.binary or find_binary()
        env = {k: v for k, v in os.environ.items() if k not in _SHARED_DATA}
        env.update(self.env)
        if self.mode == "run" and (self.project / "routes").is_dir():
            self._build(binary, env)
        command = [binary, self.mode, "--project", str(self.project)]
        command += ["--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir)]
        if self.mode == "run":
            command.append("--migrate")
        if self.dependency_overrides is not None:
            command += ["--overrides", str(self.dependency_overrides)]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT, env=env
        )
        LIVE.add(self)
        deadline = time.monotonic() + self.startup_timeout
        process = self._process
        serving_since: float | None = None
        while True:
            log = self.log
            match = _BANNER.search(log)
            if match and serving_since is None:
                serving_since = time.monotonic()
            # `dev` serves at once, and from the snapshot of the imported routes a moment later
            # (`filerouter dev`'s log says which): the tests wait for it, and then run as fast
            # as under `run`.
            ready = (
                self.mode == "run"
                or _IMPORTED.search(log) is not None
                or (serving_since is not None and time.monotonic() - serving_since > _IMPORT_WAIT)
            )
            if match and ready:
                address = urlsplit(match.group(1))
                self._address = (address.hostname or "127.0.0.1", address.port or 80)
                return
            status = process.poll()
            if status is not None:
                log = self.log
                self.close()
                raise ServerError(
                    f"filerouter {self.mode} stopped with status {status} before serving "
                    f"{self.project}; its output:\n{log}"
                )
            if time.monotonic() > deadline:
                log = self.log
                self.close()
                raise ServerError(
                    f"filerouter {self.mode} did not serve {self.project} within {self.startup_timeout:g} s; "
                    f"its output:\n{log}"
                )
            time.sleep(0.05)

    def _build(self, binary: str, env: dict[str, str]) -> None:
        """`filerouter build` before `mode="run"` serves: it builds only when the sources
        changed since the last build (else it says the build is up to date, at the cost of
        reading them), so a test never passes against an old build."""
        assert self._log_file is not None
        built = subprocess.run(
            [binary, "build", "--project", str(self.project)],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=self.startup_timeout,
            check=False,
        )
        if built.returncode != 0:
            log = self.log
            self.close()
            raise ServerError(f"filerouter build failed for {self.project} (status {built.returncode}); its output:\n{log}")

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove the temporary data."""
        LIVE.discard(self)
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None
        self._address = None

    @property
    def log(self) -> str:
        """Everything the server printed so far (its log)."""
        return self._log_from(0)

    def _log_size(self) -> int:
        try:
            return 0 if self._log_path is None else self._log_path.stat().st_size
        except OSError:
            return 0

    def _log_from(self, offset: int) -> str:
        """What the server printed from byte `offset` of its log on."""
        if self._log_path is None:
            return ""
        try:
            with open(self._log_path, "rb") as log:
                log.seek(offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    # -- requests ---------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | list[tuple[str, Any]] | None = None,
        json: Any = _UNSET,
        data: Mapping[str, Any] | None = None,
        files: Mapping[str, Any] | None = None,
        content: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        cookies: Mapping[str, str] | None = None,
        follow_redirects: bool | None = None,
        timeout: float | None = None,
    ) -> Response:
        """Send one request; arguments as FastAPI's TestClient (httpx) takes them."""
        __tracebackhide__ = True  # pytest shows the test's line, not these
        if self._address is None:
            self.start()
        body, content_type = _encode_body(json, data, files, content)
        sent: dict[str, str] = {"user-agent": "filerouter-testclient"}
        sent.update({k.lower(): v for k, v in self.headers.items()})
        if content_type:
            sent["content-type"] = content_type
        sent.update({k.lower(): v for k, v in (headers or {}).items()})
        path = _path_of(url, self.base_url)
        if params:
            query = urlencode(list(params.items()) if isinstance(params, Mapping) else params, doseq=True)
            path += ("&" if "?" in path else "?") + query
        follow = self.follow_redirects if follow_redirects is None else follow_redirects
        history: list[Response] = []
        while True:
            jar = {**self.cookies, **(cookies or {})}
            if jar:
                sent["cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
            response = self._send(method.upper(), path, sent, body, timeout)
            self._keep_cookies(response)
            if not (follow and response.is_redirect) or len(history) >= 20:
                break
            history.append(response)
            location = urljoin(self.base_url + path, response.headers["location"])
            path = _path_of(location, self.base_url)
            if response.status_code == 303 or (response.status_code in (301, 302) and method.upper() == "POST"):
                method, body = "GET", None
                sent.pop("content-type", None)
        response.history = history
        return response

    def _send(self, method: str, path: str, headers: dict[str, str], body: bytes | None, timeout: float | None) -> Response:
        __tracebackhide__ = True
        if self._address is None:
            raise ServerError("the server is not running")
        offset = self._log_size()
        host, port = self._address
        connection = http.client.HTTPConnection(host, port, timeout=timeout or self.timeout)
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            connection.putheader("host", urlsplit(self.base_url).netloc or "testserver")
            for name, value in headers.items():
                connection.putheader(name, value)
            if body is not None:
                connection.putheader("content-length", str(len(body)))
            connection.endheaders(body)
            answer = connection.getresponse()
            content = b"" if method == "HEAD" else answer.read()
            response = Response(
                method, self.base_url + path, answer.status, answer.reason, Headers(answer.getheaders()), content
            )
        except OSError as exc:
            raise ServerError(f"{method} {path}: {exc}; the server's log:\n{self.log[-20000:]}") from exc
        finally:
            connection.close()
        if self.raise_server_exceptions and response.status_code == 500:
            time.sleep(0.05)  # let the server's log lines about it land
            raise ServerError(
                f"{method} {path} answered 500: {response.text[:2000]}\n"
                f"the server's log while it ran:\n{self._log_from(offset)[-20000:]}"
            )
        return response

    def _keep_cookies(self, response: Response) -> None:
        for name, morsel in response._set_cookies.items():
            max_age = morsel["max-age"] or ""
            if max_age == "0" or max_age.startswith("-"):
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = morsel.value

    def get(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return self.request("GET", url, **kwargs)

    def head(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return self.request("HEAD", url, **kwargs)

    def options(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return self.request("OPTIONS", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return self.request("PUT", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return self.request("DELETE", url, **kwargs)



class AsyncTestClient:
    """The TestClient for `async def` tests, as FastAPI's async tests use `httpx.AsyncClient`:

        async with AsyncTestClient(PROJECT) as client:
            response = await client.get("/")

    It takes the same arguments as `TestClient` and serves the project the same way; each
    request waits in a thread of its own, so requests gathered together (`asyncio.gather`) are
    sent at once and the event loop is never blocked."""

    __test__ = False

    def __init__(self, project: str | os.PathLike[str] = ".", **options: Any) -> None:
        self.client = TestClient(project, **options)

    async def __aenter__(self) -> AsyncTestClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        await asyncio.to_thread(self.client.start)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.client.close)

    @property
    def cookies(self) -> dict[str, str]:
        return self.client.cookies

    @property
    def log(self) -> str:
        return self.client.log

    async def request(self, method: str, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await asyncio.to_thread(self.client.request, method, url, **kwargs)

    async def get(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await self.request("GET", url, **kwargs)

    async def head(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await self.request("HEAD", url, **kwargs)

    async def options(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await self.request("OPTIONS", url, **kwargs)

    async def post(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await self.request("POST", url, **kwargs)

    async def put(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await self.request("PUT", url, **kwargs)

    async def patch(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await self.request("PATCH", url, **kwargs)

    async def delete(self, url: str, **kwargs: Any) -> Response:
        __tracebackhide__ = True
        return await self.request("DELETE", url, **kwargs)

def _path_of(url: str, base_url: str) -> str:
    """The request target of `url`: a path, or an absolute URL of `base_url`'s host."""
    parts = urlsplit(url)
    if parts.scheme and parts.netloc and parts.netloc != urlsplit(base_url).netloc:
        raise ValueError(f"{url} is not on this client's server ({base_url})")
    path = parts.path or "/"
    if not path.startswith("/"):
        path = "/" + path
    return path + (f"?{parts.query}" if parts.query else "")


def _parse_cookie(header: str) -> SimpleCookie:
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(header)
    except Exception:  # noqa: BLE001  (a cookie the standard library cannot read is skipped)
        return SimpleCookie()
    return cookie


def _encode_body(
    json: Any, data: Mapping[str, Any] | None, files: Mapping[str, Any] | None, content: bytes | str | None
) -> tuple[bytes | None, str | None]:
    if json is not _UNSET:
        return _json.dumps(json).encode(), "application/json"
    if files:
        return _multipart(data or {}, files)
    if data is not None:
        return urlencode(_form_items(data), doseq=True).encode(), "application/x-www-form-urlencoded"
    if content is not None:
        return (content.encode() if isinstance(content, str) else bytes(content)), None
    return None, None


def _form_items(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    items = []
    for name, value in data.items():
        for one in value if isinstance(value, (list, tuple)) else [value]:
            items.append((name, str(one)))
    return items


def _multipart(data: Mapping[str, Any], files: Mapping[str, Any]) -> tuple[bytes, str]:
    """`files` as httpx takes them: {field: content | (filename, content[, content_type])}."""
    boundary = uuid.uuid4().hex
    out = bytearray()
    for name, value in _form_items(data):
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value.encode() + b"\r\n"
    for name, spec in files.items():
        filename, content, content_type = "upload", spec, "application/octet-stream"
        if isinstance(spec, tuple):
            filename, content = spec[0], spec[1]
            if len(spec) > 2 and spec[2]:
                content_type = spec[2]
        if hasattr(content, "read"):
            content = content.read()
        if isinstance(content, str):
            content = content.encode()
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            f"Content-Type: {content_type}\r\n\r\n"
        ).encode()
        out += bytes(content) + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"
