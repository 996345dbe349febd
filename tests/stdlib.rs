//! What route code can import (issue 24, points 1 and 4): every module of the standard library
//! that can work in the sandbox imports, in `dev` and in `run` alike, whether or not the guest's
//! snapshot holds it; the ones that cannot say why and what to use instead; FastAPI's names say
//! to import them from `filerouter`; the guest's own modules are not importable and not named
//! in hints; a socket call says that the sandbox has no sockets, and `urllib` goes through the
//! host's outbound gate (`tests/outbound.rs`).

use crate::support;

use std::collections::BTreeSet;

use serde_json::Value;
use support::{Project, Server, json, run};

/// The modules of the standard library the sandbox refuses, each with its reason: the README's
/// list ("What route code can import"). A submodule of one is refused as it is.
const REFUSED: &str = "
    _bz2 _ctypes _curses _curses_panel _dbm _gdbm _hashlib _interpchannels _interpqueues
    _interpreters _lzma _multiprocessing _overlapped _posixshmem _posixsubprocess
    _pyrepl.fancy_termios _pyrepl.readline _pyrepl.simple_interact _pyrepl.unix_console
    _pyrepl.unix_eventqueue _pyrepl.windows_console _remote_debugging _scproxy _ssl _tkinter
    _uuid _winapi _wmi _zstd asyncio.tools asyncio.windows_events asyncio.windows_utils bz2
    compression.bz2 compression.lzma compression.zstd concurrent.futures.interpreter
    concurrent.futures.process concurrent.interpreters ctypes curses dbm.gnu dbm.ndbm
    encodings.bz2_codec encodings.mbcs encodings.oem ensurepip fcntl grp idlelib lzma mmap
    msvcrt multiprocessing nt pty pwd readline resource syslog termios tkinter turtle
    turtledemo tty venv winreg winsound
";

/// Every submodule of the standard library's packages (`sys.stdlib_module_names` lists only
/// top-level names), but those of packages refused whole and the `__main__` modules.
const SUBMODULES: &str = "
    _pyrepl._module_completer _pyrepl._threading_handler _pyrepl.base_eventqueue
    _pyrepl.commands _pyrepl.completing_reader _pyrepl.console _pyrepl.fancy_termios
    _pyrepl.historical_reader _pyrepl.input _pyrepl.keymap _pyrepl.main _pyrepl.pager
    _pyrepl.reader _pyrepl.readline _pyrepl.simple_interact _pyrepl.terminfo _pyrepl.trace
    _pyrepl.types _pyrepl.unix_console _pyrepl.unix_eventqueue _pyrepl.utils
    _pyrepl.windows_console _pyrepl.windows_eventqueue
    asyncio.base_events asyncio.base_futures asyncio.base_subprocess asyncio.base_tasks
    asyncio.constants asyncio.coroutines asyncio.events asyncio.exceptions asyncio.format_helpers
    asyncio.futures asyncio.graph asyncio.locks asyncio.log asyncio.mixins asyncio.proactor_events
    asyncio.protocols asyncio.queues asyncio.runners asyncio.selector_events asyncio.sslproto
    asyncio.staggered asyncio.streams asyncio.subprocess asyncio.taskgroups asyncio.tasks
    asyncio.threads asyncio.timeouts asyncio.tools asyncio.transports asyncio.trsock
    asyncio.unix_events asyncio.windows_events asyncio.windows_utils compression.bz2
    compression.gzip compression.lzma compression.zlib compression._common
    compression._common._streams compression.zstd compression.zstd._zstdfile concurrent.futures
    concurrent.futures._base concurrent.futures.interpreter concurrent.futures.process
    concurrent.futures.thread concurrent.interpreters concurrent.interpreters._crossinterp
    concurrent.interpreters._queues dbm.dumb dbm.gnu dbm.ndbm dbm.sqlite3 email._encoded_words
    email._header_value_parser email._parseaddr email._policybase email.base64mime email.charset
    email.contentmanager email.encoders email.errors email.feedparser email.generator email.header
    email.headerregistry email.iterators email.message email.parser email.policy email.quoprimime
    email.utils email.mime email.mime.application email.mime.audio email.mime.base email.mime.image
    email.mime.message email.mime.multipart email.mime.nonmultipart email.mime.text
    encodings._win_cp_codecs encodings.aliases encodings.ascii encodings.base64_codec encodings.big5
    encodings.big5hkscs encodings.bz2_codec encodings.charmap encodings.cp037 encodings.cp1006
    encodings.cp1026 encodings.cp1125 encodings.cp1140 encodings.cp1250 encodings.cp1251
    encodings.cp1252 encodings.cp1253 encodings.cp1254 encodings.cp1255 encodings.cp1256
    encodings.cp1257 encodings.cp1258 encodings.cp273 encodings.cp424 encodings.cp437
    encodings.cp500 encodings.cp720 encodings.cp737 encodings.cp775 encodings.cp850 encodings.cp852
    encodings.cp855 encodings.cp856 encodings.cp857 encodings.cp858 encodings.cp860 encodings.cp861
    encodings.cp862 encodings.cp863 encodings.cp864 encodings.cp865 encodings.cp866 encodings.cp869
    encodings.cp874 encodings.cp875 encodings.cp932 encodings.cp949 encodings.cp950
    encodings.euc_jis_2004 encodings.euc_jisx0213 encodings.euc_jp encodings.euc_kr
    encodings.gb18030 encodings.gb2312 encodings.gbk encodings.hex_codec encodings.hp_roman8
    encodings.hz encodings.idna encodings.iso2022_jp encodings.iso2022_jp_1 encodings.iso2022_jp_2
    encodings.iso2022_jp_2004 encodings.iso2022_jp_3 encodings.iso2022_jp_ext encodings.iso2022_kr
    encodings.iso8859_1 encodings.iso8859_10 encodings.iso8859_11 encodings.iso8859_13
    encodings.iso8859_14 encodings.iso8859_15 encodings.iso8859_16 encodings.iso8859_2
    encodings.iso8859_3 encodings.iso8859_4 encodings.iso8859_5 encodings.iso8859_6
    encodings.iso8859_7 encodings.iso8859_8 encodings.iso8859_9 encodings.johab encodings.koi8_r
    encodings.koi8_t encodings.koi8_u encodings.kz1048 encodings.latin_1 encodings.mac_arabic
    encodings.mac_croatian encodings.mac_cyrillic encodings.mac_farsi encodings.mac_greek
    encodings.mac_iceland encodings.mac_latin2 encodings.mac_roman encodings.mac_romanian
    encodings.mac_turkish encodings.mbcs encodings.oem encodings.palmos encodings.ptcp154
    encodings.punycode encodings.quopri_codec encodings.raw_unicode_escape encodings.rot_13
    encodings.shift_jis encodings.shift_jis_2004 encodings.shift_jisx0213 encodings.tis_620
    encodings.undefined encodings.unicode_escape encodings.utf_16 encodings.utf_16_be
    encodings.utf_16_le encodings.utf_32 encodings.utf_32_be encodings.utf_32_le encodings.utf_7
    encodings.utf_8 encodings.utf_8_sig encodings.uu_codec encodings.zlib_codec html.entities
    html.parser http.client http.cookiejar http.cookies http.server importlib._abc
    importlib._bootstrap importlib._bootstrap_external importlib.abc importlib.machinery
    importlib.readers importlib.simple importlib.util importlib.metadata
    importlib.metadata._adapters importlib.metadata._collections importlib.metadata._functools
    importlib.metadata._itertools importlib.metadata._meta importlib.metadata._text
    importlib.metadata.diagnose importlib.resources importlib.resources._adapters
    importlib.resources._common importlib.resources._functional importlib.resources._itertools
    importlib.resources.abc importlib.resources.readers importlib.resources.simple json.decoder
    json.encoder json.scanner json.tool logging.config logging.handlers pathlib._os pathlib.types
    pydoc_data.topics re._casefix re._compiler re._constants re._parser string.templatelib
    tomllib._parser tomllib._re tomllib._types unittest._log unittest.async_case unittest.case
    unittest.loader unittest.main unittest.mock unittest.result unittest.runner unittest.signals
    unittest.suite unittest.util urllib.error urllib.parse urllib.request urllib.response
    urllib.robotparser wsgiref.handlers wsgiref.headers wsgiref.simple_server wsgiref.types
    wsgiref.util wsgiref.validate xml.dom.NodeFilter xml.dom xml.dom.domreg xml.dom.expatbuilder
    xml.dom.minicompat xml.dom.minidom xml.dom.pulldom xml.dom.xmlbuilder xml.etree.ElementInclude
    xml.etree.ElementPath xml.etree.ElementTree xml.etree xml.etree.cElementTree xml.parsers
    xml.parsers.expat xml.sax xml.sax._exceptions xml.sax.expatreader xml.sax.handler
    xml.sax.saxutils xml.sax.xmlreader xmlrpc.client xmlrpc.server zipfile._path zipfile._path.glob
    zoneinfo._common zoneinfo._tzpath zoneinfo._zoneinfo
";

/// The guest's own modules and componentize-py's: never importable by route code.
const INTERNAL: &[&str] = &[
    "dispatcher",
    "baked",
    "pipeline",
    "streaming",
    "preload",
    "wit_text",
    "describe",
    "pages",
    "project",
    "warmup",
    "bundled",
    "immortal",
    "docstrings",
    "nossl",
    "importing",
    "nonetwork",
    "wit_world",
    "wit_world.imports.types",
    "componentize_py_runtime",
    "componentize_py_types",
];

/// Imports every module of `sys.stdlib_module_names` and of `SUBMODULES`, each in the request
/// (the snapshot holds some of them already): which imported, which failed, which were refused
/// and how.
const EVERY_MODULE: &str = r#"
import importlib
import sys

REFUSED = set("""__REFUSED__""".split())
SUBMODULES = """__SUBMODULES__""".split()


def refused(name):
    while name:
        if name in REFUSED:
            return True
        name = name.rpartition(".")[0]
    return False


def GET(request):
    imported, failed, refusals = [], {}, {}
    for name in sorted(set(sys.stdlib_module_names) | set(SUBMODULES)):
        try:
            importlib.import_module(name)
        except ImportError as e:
            if refused(name):
                refusals[name] = f"{type(e).__name__}: {e}"
            else:
                failed[name] = f"{type(e).__name__}: {e}"
            continue
        except BaseException as e:
            failed[name] = f"{type(e).__name__}: {e}"
            continue
        if refused(name):
            failed[name] = "imported, but the sandbox should refuse it"
        else:
            imported.append(name)
    return {"imported": imported, "failed": failed, "refused": refusals}
"#;

fn every_module_route() -> String {
    EVERY_MODULE
        .replace("__REFUSED__", REFUSED)
        .replace("__SUBMODULES__", SUBMODULES)
}

/// Checks what `GET /every` answered: everything imports but the documented refusals, and
/// each refusal says it is the sandbox's, with a reason.
fn check_every_module(server: &Server, mode: &str) {
    let response = server.get("/every");
    assert_eq!(response.status(), 200, "{mode}: {}", server.log());
    let body = json(response);
    assert_eq!(body["failed"], serde_json::json!({}), "{mode}: {body:#}");
    let imported = body["imported"].as_array().unwrap();
    assert!(
        imported.len() > 500,
        "{mode}: only {} imported",
        imported.len()
    );
    for name in [
        "timeit",
        "configparser",
        "mailbox",
        "xml.dom.minidom",
        "email.mime.text",
    ] {
        assert!(imported.contains(&Value::from(name)), "{mode}: {name}");
    }
    let refused = body["refused"].as_object().unwrap();
    let expected: BTreeSet<&str> = REFUSED.split_whitespace().collect();
    for name in &expected {
        let message = refused
            .get(*name)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{mode}: {name} was not refused: {body:#}"));
        assert!(
            message.starts_with("ModuleNotFoundError: No module named")
                && message.contains("in the filerouter sandbox: "),
            "{mode}: {name}: {message}"
        );
    }
}

fn project() -> Project {
    let every = every_module_route();
    let issue = ISSUE.replace("__INTERNAL__", &INTERNAL.join(" "));
    Project::new(&[
        (
            "config.py",
            r#"sandbox = {"memory_mb": 1024, "timeout_s": 120}"#,
        ),
        (
            "routes/index.py",
            "def GET(request):\n    return {'ok': True}\n",
        ),
        ("routes/every/route.py", &every),
        (
            "routes/refusals/route.py",
            r#"
            import importlib

            NAMES = ["ctypes", "ctypes.util", "multiprocessing", "readline", "curses", "tkinter",
                     "_ssl", "lzma", "dbm.gnu", "fastapi", "fastapi.security", "starlette.requests",
                     "pydantic.mypy", "pydantic.v1.mypy", "uvicorn"]

            def GET(request, names: str = ""):
                out = {}
                for name in NAMES + [n for n in names.split(",") if n]:
                    try:
                        importlib.import_module(name)
                        out[name] = None
                    except ImportError as e:
                        out[name] = {"type": type(e).__name__, "message": str(e), "name": e.name}
                try:
                    from fastapi import Depends
                    out["from fastapi import Depends"] = None
                except ImportError as e:
                    out["from fastapi import Depends"] = {"type": type(e).__name__, "message": str(e), "name": e.name}
                return out
            "#,
        ),
        (
            "routes/network/route.py",
            r#"
            import socket
            import urllib.error
            import urllib.request

            def GET(request):
                out = {}
                for url in ["http://example.com", "https://example.com/x"]:
                    try:
                        urllib.request.urlopen(url, timeout=5)
                        out[url] = None
                    except urllib.error.URLError as e:
                        out[url] = ["URLError", str(e)]
                for name, call in [
                    ("create_connection", lambda: socket.create_connection(("example.com", 80), timeout=5)),
                    ("getaddrinfo", lambda: socket.getaddrinfo("127.0.0.1", 80)),
                    ("socket", lambda: socket.socket()),
                ]:
                    try:
                        call()
                        out[name] = None
                    except OSError as e:
                        out[name] = [type(e).__name__, str(e)]
                return out
            "#,
        ),
        ("routes/issue/route.py", &issue),
        // A project module named like one of the guest's own, and a route folder named like a
        // standard-library module: neither is shadowed.
        ("routes/settings.py", "WHO = 'the project'\n"),
        (
            "routes/mailbox/route.py",
            r#"
            import mailbox
            import settings

            def GET(request):
                return {"settings": settings.WHO, "mailbox": hasattr(mailbox, "Maildir")}
            "#,
        ),
    ])
}

/// The issue's own case (timeit and configparser), and no internal module in `sys.modules`.
const ISSUE: &str = r#"
import configparser
import sys
import timeit

INTERNAL = set("""__INTERNAL__""".split())


def GET(request):
    parser = configparser.ConfigParser()
    parser.read_string("[db]\nurl = sqlite:///app.db\n")
    internal = [n for n in sys.modules if n in INTERNAL or n.startswith(("wit_world", "componentize_py"))]
    return {
        "timeit": timeit.timeit("1 + 1", number=10) >= 0,
        "config": parser["db"]["url"],
        "internal": sorted(internal),
    }
"#;

fn check_refusals(server: &Server, mode: &str) {
    let names = INTERNAL.join(",");
    let response = server.get(&format!("/refusals?names={names}"));
    assert_eq!(response.status(), 200, "{mode}: {}", server.log());
    let body = json(response);
    let message = |name: &str| -> String {
        let entry = &body[name];
        assert!(entry.is_object(), "{mode}: {name} imported: {body:#}");
        assert_eq!(entry["type"], "ModuleNotFoundError", "{mode}: {name}");
        entry["message"].as_str().unwrap().to_string()
    };
    for (name, why) in [
        ("ctypes", "native libraries"),
        ("ctypes", "plugin"),
        (
            "ctypes.util",
            "No module named 'ctypes' in the filerouter sandbox",
        ),
        ("multiprocessing", "cannot start processes"),
        ("readline", "terminal"),
        ("curses", "terminal"),
        ("tkinter", "Tk"),
        ("tkinter", "HTMLResponse"),
        ("_ssl", "no network"),
        ("lzma", "`zlib` or `gzip`"),
        ("dbm.gnu", "filerouter.kv"),
        ("fastapi", "from filerouter import Depends"),
        ("fastapi.security", "No module named 'fastapi'"),
        (
            "from fastapi import Depends",
            "import these names from `filerouter`",
        ),
        ("starlette.requests", "from filerouter import"),
        // pydantic is built in (tests/pydantic.rs); the modules it leaves out say why.
        ("pydantic.mypy", "plugin for mypy"),
        ("pydantic.v1.mypy", "plugin for mypy"),
        ("uvicorn", "filerouter dev"),
    ] {
        let text = message(name);
        assert!(text.contains(why), "{mode}: {name}: {text}");
    }
    // The guest's own modules do not exist for route code: the plain message.
    for name in INTERNAL {
        let top = name.split('.').next().unwrap();
        assert_eq!(
            message(name),
            format!("No module named '{top}'"),
            "{mode}: {name}"
        );
    }

    let response = server.get("/network");
    assert_eq!(response.status(), 200, "{mode}: {}", server.log());
    let body = json(response);
    // urllib goes through the host's outbound gate, which allows nothing by default: the
    // refusal says where to allow the origin (tests/outbound.rs covers the gate).
    for call in ["http://example.com", "https://example.com/x"] {
        let entry = body[call]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: {body:#}"));
        assert_eq!(entry[0], "URLError", "{mode}: {call}: {body:#}");
        let text = entry[1].as_str().unwrap();
        assert!(
            text.contains("is not allowed: nothing is allowed by default")
                && text.contains("outbound[\"allow\"] in config.py"),
            "{mode}: {call}: {text}"
        );
    }
    // Sockets themselves stay closed, and say where HTTP calls go instead.
    for (call, kind) in [
        ("create_connection", "gaierror"),
        ("getaddrinfo", "gaierror"),
        ("socket", "PermissionError"),
    ] {
        let entry = body[call]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: {body:#}"));
        assert_eq!(entry[0], kind, "{mode}: {call}: {body:#}");
        let text = entry[1].as_str().unwrap();
        assert!(
            text.contains("the filerouter sandbox has no sockets")
                && text.contains("filerouter.http or urllib.request"),
            "{mode}: {call}: {text}"
        );
    }

    let response = server.get("/issue");
    assert_eq!(response.status(), 200, "{mode}: {}", server.log());
    assert_eq!(
        json(response),
        serde_json::json!({"timeit": true, "config": "sqlite:///app.db", "internal": []}),
        "{mode}"
    );
    let response = server.get("/mailbox");
    assert_eq!(response.status(), 200, "{mode}: {}", server.log());
    assert_eq!(
        json(response),
        serde_json::json!({"settings": "the project", "mailbox": true}),
        "{mode}"
    );
    // And the app itself still works.
    assert_eq!(json(server.get("/")), serde_json::json!({"ok": true}));
}

fn build(project: &Project) {
    let (code, stdout, stderr) = run(
        &["build", "--project", project.path().to_str().unwrap()],
        project.path(),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
}

#[test]
fn every_standard_library_module_imports_in_dev_and_run() {
    let project = project();
    {
        let dev = Server::dev(&project);
        check_every_module(&dev, "dev");
    }
    build(&project);
    let served = Server::run(&project, &[]);
    check_every_module(&served, "run");
}

#[test]
fn refusals_say_why_in_dev_and_run() {
    let project = project();
    {
        let dev = Server::dev(&project);
        check_refusals(&dev, "dev");
    }
    build(&project);
    let served = Server::run(&project, &[]);
    check_refusals(&served, "run");
}

/// A route file that fails to import says why on the development error page, and the hints
/// never list the guest's own modules.
#[test]
fn import_errors_on_the_error_page() {
    let project = Project::new(&[
        (
            "routes/port/route.py",
            "from fastapi import Depends\n\ndef GET(request):\n    return {}\n",
        ),
        (
            "routes/internal/route.py",
            "import dispatcher\n\ndef GET(request):\n    return {}\n",
        ),
        (
            "routes/native/route.py",
            "import ctypes\n\ndef GET(request):\n    return {}\n",
        ),
    ]);
    let server = Server::dev(&project);
    let error = |path: &str| -> Value {
        let response = server.get(path);
        assert_eq!(response.status(), 500, "{path}");
        json(response)["error"].clone()
    };
    let hints = |error: &Value| -> String {
        error["suggestions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    };

    let port = error("/port");
    assert_eq!(port["type"], "ModuleNotFoundError");
    assert_eq!(port["line"], 1);
    let message = port["message"].as_str().unwrap();
    assert!(
        message.contains("from filerouter import Depends"),
        "{message}"
    );
    // Not "install it from PyPI": FastAPI is what filerouter stands in for.
    assert!(!hints(&port).contains("requirements.txt"), "{port}");

    let internal = error("/internal");
    assert_eq!(internal["message"], "No module named 'dispatcher'");
    let text = hints(&internal);
    assert!(text.contains("filerouter packages install"), "{text}");
    // It names the module asked for, and none of the others.
    for name in INTERNAL.iter().filter(|n| **n != "dispatcher") {
        assert!(!text.contains(&format!("`{name}`")), "{name}: {text}");
        assert!(!text.contains(&format!(" {name},")), "{name}: {text}");
    }

    let native = error("/native");
    let message = native["message"].as_str().unwrap();
    assert!(message.contains("libffi"), "{message}");
    assert!(!hints(&native).contains("requirements.txt"), "{native}");
}
