"""The project's page handlers: `docs.py` (replaces `/docs`) and `not-found.py` (the 404 body).

Both define `def handler(request, context)`, sync or async, and return HTML text, a dict (sent
as JSON) or a response object. `context` describes the project's API, as the host sent it:

    context.get_routes()                 # one entry per path and method: path, method, parameters,
                                         #  docstrings (len() is get_statistics()["total_routes"])
    context.get_routes_by_method("GET")  # the entries of one method
    context.get_statistics()             # {"total_routes", "static_routes", "dynamic_routes", "methods",
                                         #  "total_handlers", "total_paths"}: handlers (one per path
                                         #  and method) but for total_paths, the paths
    context.get_project_info()           # {"title", "description", "version", "app_name"}
"""

import copy
import inspect
import json

import project
from filerouter.exceptions import ProjectCodeError
from filerouter.responses import HTMLResponse, Response, to_response


class Context:
    """What a page handler knows about the project (read-only copies of the host's data)."""

    def __init__(self, data):
        self._data = data

    def get_routes(self):
        """One entry per path and method, as DECISIONS.md counts routes: the path's own keys
        (`path`, `file`, `dynamic`, `path_params`) and its handler's (`method`, `summary`,
        `description`, `doc`, `query_params`, `request_body`, `response`, `tags`, ...), with
        `methods` the one method, for docs.py written against a list of methods."""
        entries = []
        for route in self._data.get("routes", []):
            shared = {k: v for k, v in route.items() if k not in ("handlers", "methods")}
            for handler in route.get("handlers", []):
                entry = copy.deepcopy(shared)
                entry.update(copy.deepcopy(handler))
                entry["methods"] = [handler.get("method")]
                entries.append(entry)
        return entries

    def get_routes_by_method(self, method):
        method = str(method).upper()
        return [r for r in self.get_routes() if r.get("method") == method]

    def get_statistics(self):
        return copy.deepcopy(self._data.get("statistics", {}))

    def get_project_info(self):
        return copy.deepcopy(self._data.get("project", {}))

    def __repr__(self):
        return f"Context({len(self.get_routes())} routes)"


async def run(request, target, sources):
    """The response of `target.file`'s `handler`, with `target.status` unless it sets its own."""
    module = project.load_root(target.file, sources)
    fn = getattr(module, "handler", None) if module is not None else None
    if not callable(fn):
        raise ProjectCodeError(
            f"{target.file} defines no `handler` function",
            filename="/project/" + target.file,
            lineno=1,
            suggestions=[f"Define `def handler(request, context):` in {target.file}, returning HTML text, a dict or a response"],
        )
    result = fn(request, Context(json.loads(target.context)))
    if inspect.isawaitable(result):
        result = await result
    status = target.status
    if isinstance(result, str):
        return HTMLResponse(result, status_code=status)
    response = to_response(result, status_code=status)
    # A response object made with the default status keeps the page's status (404 stays 404).
    if isinstance(result, Response) and result.status_code == 200:
        response.status_code = status
    return response
